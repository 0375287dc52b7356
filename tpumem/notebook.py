"""Jupyter and IPython: `%load_ext tpumem` gives

- `%%tpumem [-o FILE] [--framework NAME] [--force] [--no-programs]`: runs the cell
  while `tpumem.track` records it (the cell's variables stay the kernel's), then
  shows its report under it: the HTML report, with the text report for consoles
  without HTML. Each cell its own trace: cell.tpumem, cell-2.tpumem, ...
- `%tpumem_report [FILE] [--format text|md|json|html]`: the report of the last
  recorded cell, or of a trace file.

Loading the extension sets what `tpumem profile` sets before a framework starts
(`tracking.prepare_frameworks`).

Imported only by IPython (`load_ipython_extension` in tpumem/__init__.py).
"""

from __future__ import annotations

import sys
from pathlib import Path

from IPython.core import magic_arguments
from IPython.core.magic import Magics, cell_magic, line_magic, magics_class
from IPython.display import display

from tpumem.errors import TpumemError
from tpumem.report import FORMATS
from tpumem.tracking import Tracker, analysis_of, prepare_frameworks

CELL_TRACE = Path("cell.tpumem")


def _say(error: TpumemError | OSError) -> None:
    """Bad input in a notebook: one line under the cell, never a traceback."""
    print(f"tpumem: {error}", file=sys.stderr)


@magics_class
class TpumemMagics(Magics):
    last: Tracker | None = None  # the last cell recorded

    @magic_arguments.magic_arguments()
    @magic_arguments.argument(
        "-o", "--output", help="the trace file (default: cell.tpumem, numbered when taken)"
    )
    @magic_arguments.argument(
        "--framework", help="the framework to record (default: the one the kernel uses)"
    )
    @magic_arguments.argument("--force", action="store_true", help="replace an existing trace")
    @magic_arguments.argument(
        "--no-programs", action="store_true", help="leave out the compiled programs' HLO"
    )
    @cell_magic
    def tpumem(self, line: str, cell: str) -> None:
        """Records the cell's device memory and shows the report under it."""
        from tpumem.outputs import check_target, free_name

        args = magic_arguments.parse_argstring(self.tpumem, line)
        output = Path(args.output) if args.output else free_name(CELL_TRACE)
        run = Tracker(
            output, framework=args.framework, force=args.force, programs=not args.no_programs
        )
        try:
            # (said as the magic takes it, and only where --force would do: /dev/full
            # or a directory is refused as it is, with --force too)
            if args.output and check_target(output) and not args.force:
                raise TpumemError(f"{output}: exists; %%tpumem --force replaces it")
            run.start()
        except TpumemError as refused:
            _say(refused)
            return
        error: BaseException | None = None
        shell = self.shell
        assert shell is not None  # (a magic runs in its shell)
        counted = shell.execution_count
        # IPython counted this cell before running it; the body runs under the
        # cell's own number, so its lines are "In [N]" as the notebook shows them.
        shell.execution_count = counted - 1
        try:
            result = shell.run_cell(cell, store_history=False)
            error = result.error_in_exec or result.error_before_exec
        finally:
            shell.execution_count = counted
            run.stop(error)  # the cell's own error was shown by IPython; the trace keeps it
        TpumemMagics.last = run
        display(run)

    @magic_arguments.magic_arguments()
    @magic_arguments.argument("trace", nargs="?", help="a trace file (default: the last cell's)")
    @magic_arguments.argument("--format", choices=FORMATS, help="one format, as text")
    @magic_arguments.argument("--full", action="store_true", help="the whole text report")
    @line_magic
    def tpumem_report(self, line: str) -> None:
        """Shows the report of the last recorded cell, or of a trace file."""
        from tpumem.report import reporter_for
        from tpumem.report.notebook_bundles import run_bundle

        args = magic_arguments.parse_argstring(self.tpumem_report, line)
        path = Path(args.trace) if args.trace else (self.last.path if self.last else None)
        if path is None:
            _say(TpumemError("no cell recorded yet: run one under %%tpumem, or name a trace"))
            return
        try:
            analysis = analysis_of(path)
        except (TpumemError, OSError) as error:
            _say(error)
            return
        if args.format is None:
            display(run_bundle(analysis), raw=True)
        else:
            print(reporter_for(None, args.format).render(analysis, full=args.full))


def load(ipython: object) -> None:
    # A notebook loads the extension before it imports its framework: the moment
    # to set what `tpumem profile` would have set.
    prepare_frameworks()
    ipython.register_magics(TpumemMagics)  # type: ignore[attr-defined]
