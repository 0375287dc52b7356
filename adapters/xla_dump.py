"""Each compiled program's optimized HLO and buffer assignment, as XLA dumps it.

XLA writes them when `XLA_FLAGS` holds `--xla_dump_to=DIR --xla_dump_hlo_as_proto`:
one `module_NNNN.<name>.<backend>after_optimizations.hlo.pb` (an HloProto: the
module and its buffer assignment, heap-simulator trace included) per program it
compiles. No framework API gives the heap-simulator trace (JAX's compiled memory
stats carry the buffer assignment without it), so tpumem asks XLA for the dump.

The user's own flags are kept: tpumem appends its two, and when the user dumps
already (`--xla_dump_to` of their own) it reads their directory and leaves it
alone, only adding the proto format to what they asked for. Otherwise the dump
goes to a directory tpumem owns and empties as it reads, so none is left behind.
Files are read off the training thread, once XLA has finished writing them.
"""

from __future__ import annotations

import atexit
import os
import re
import shutil
import tempfile
import time
from collections.abc import MutableMapping
from dataclasses import dataclass, field

from tpumem.adapters.base import CaptureOptions, Every
from tpumem.trace.hlo_rows import hlo_row_text
from tpumem.trace.schema import HLO
from tpumem.trace.writer import TraceWriter

FLAGS_VARIABLE = "XLA_FLAGS"
DUMP_TO = "--xla_dump_to"
AS_PROTO = "--xla_dump_hlo_as_proto"
AS_TEXT = "--xla_dump_hlo_as_text"
# Any of these set means the user chose the dump's formats; none means text.
_FORMATS = (AS_TEXT, AS_PROTO, "--xla_dump_hlo_as_dot", "--xla_dump_hlo_as_html",
            "--xla_dump_hlo_as_url", "--xla_dump_hlo_as_long_text")  # fmt: skip
_MODULE = re.compile(r"module_(\d+)\.")
SETTLE_S = 1.0  # a file untouched this long has been written whole
# XLA:CPU dumps each kernel's LLVM IR and MLIR beside the programs, hundreds of
# small files a compilation (no flag turns them off); on a disk their writes made
# a compilation of the PyTorch/XLA transformer example 0.5-0.9 s slower, in memory
# about 0.15 s (printing the IR). tpumem removes them within seconds.
MEMORY_FILESYSTEM = "/dev/shm"
READ_EVERY_S = 1.0  # how often the sampler thread looks for new programs
# The dump a notebook's kernel keeps from `%load_ext tpumem` on (open_session_dump):
# its directory, once made.
SESSION_DUMPS: list[str] = []


def _flag(flags: list[str], name: str) -> str | None:
    """The last value given for `name` ("" for a bare boolean flag), or None."""
    value = None
    for flag in flags:
        key, sep, rest = flag.partition("=")
        if key == name:
            value = rest if sep else ""
    return value


def _on(value: str | None) -> bool:
    return value is not None and value.lower() not in ("false", "0")


@dataclass
class XlaDump:
    """Where XLA dumps programs for this run, and what has been read of it."""

    directory: str
    owned: bool  # tpumem made it: emptied as read, removed at the end
    kept: bool = False  # the kernel's (SESSION_DUMPS): emptied, never removed
    notes: list[str] = field(default_factory=list)
    _taken: set[int] = field(default_factory=set)  # module ids read
    _before: dict[str, int] = field(default_factory=dict)  # the user's files from before
    _reads: Every = field(default_factory=lambda: Every(READ_EVERY_S))
    # XLA_FLAGS as the user had it (None: unset), put back on close: XLA reads it
    # once, and a process that goes on (tpumem.track) keeps the user's own.
    _environ: MutableMapping[str, str] | None = None
    _flags: str | None = None

    @classmethod
    def install(cls, environ: MutableMapping[str, str], directory: str | None) -> XlaDump | None:
        """Adds the dump to `environ[XLA_FLAGS]` (before XLA reads it); `directory`:
        one made for it by `tpumem profile`, else a new temporary one. None when
        the user's own dump cannot be read (to stdout, or to a test's outputs)."""
        current = environ.get(FLAGS_VARIABLE, "")
        flags = current.split()  # as XLA splits them: no quoting, never an error
        theirs = _flag(flags, DUMP_TO)
        added = []
        if theirs in SESSION_DUMPS:  # the kernel's, tpumem's: what earlier cells left goes
            for entry in _files(theirs):
                _remove(os.path.join(theirs, entry))
            return cls(theirs, owned=True, kept=True)
        if theirs:
            if theirs in ("-", "sponge"):
                return None
            if not _on(_flag(flags, AS_PROTO)):
                if not any(_on(_flag(flags, name)) for name in _FORMATS):
                    added.append(AS_TEXT)  # what they get with no format named
                added.append(AS_PROTO)
            dump = cls(theirs, owned=False, _before=_files(theirs))
            if added:
                dump.notes.append(f"tpumem added {AS_PROTO} to your XLA dump in {theirs}")
        else:
            if directory is None:
                directory = dump_directory()
            added += [f"{DUMP_TO}={directory}", AS_PROTO]
            dump = cls(directory, owned=True)
        if _flag(flags, "--xla_dump_hlo_module_re") is not None:
            dump.notes.append(
                "XLA_FLAGS limits which programs are dumped (--xla_dump_hlo_module_re): "
                "the programs list holds only those"
            )
        if added:
            dump._environ, dump._flags = environ, environ.get(FLAGS_VARIABLE)
            environ[FLAGS_VARIABLE] = " ".join([current, *added]).strip()
        return dump

    def tick(self, writer: TraceWriter) -> None:
        """From an adapter's sampler: reads the dump at most once a READ_EVERY_S."""
        if self._reads.due():
            self.collect(writer)

    def collect(self, writer: TraceWriter, final: bool = False) -> None:
        """Records each program dumped since the last call (`final`: the run is
        over, take everything), and empties what tpumem owns of it."""
        try:
            entries = list(os.scandir(self.directory))
        except OSError:
            return
        settled = time.time_ns() - int(SETTLE_S * 1e9)
        chosen: dict[int, os.DirEntry] = {}
        for entry in entries:
            match = _MODULE.match(entry.name)
            if match is None or not _is_program(entry.name):
                continue
            module = int(match.group(1))
            if module in self._taken:
                continue
            try:
                modified = entry.stat().st_mtime_ns
            except OSError:
                continue
            if self._before.get(entry.name) == modified:
                continue  # an earlier run's, in the user's own dump directory
            if not final and modified > settled:
                continue
            best = chosen.get(module)
            # A backend that dumps more than one optimized form: the one with
            # the buffer assignment in its name, else the last in name order.
            if best is None or _rank(entry.name) > _rank(best.name):
                chosen[module] = entry
        for module, entry in sorted(chosen.items()):
            try:
                with open(entry.path, "rb") as handle:
                    data = handle.read()
            except OSError:
                continue
            self._taken.add(module)
            before = _before_optimizations(entries, module)
            writer.record(HLO, text=hlo_row_text(entry.name, data, module, before))
        if self.owned:
            for entry in entries:
                match = _MODULE.match(entry.name)
                if match is not None and int(match.group(1)) in self._taken:
                    _remove(entry.path)

    @property
    def taken(self) -> int:
        return len(self._taken)

    def close(self, writer: TraceWriter) -> None:
        self.collect(writer, final=True)
        if self.owned and not self.kept:
            shutil.rmtree(self.directory, ignore_errors=True)
        if self._environ is not None:
            if self._flags is None:
                self._environ.pop(FLAGS_VARIABLE, None)
            else:
                self._environ[FLAGS_VARIABLE] = self._flags


def keep_dump_flags(
    environ: MutableMapping[str, str], directory: str, over_theirs: bool = False
) -> str | None:
    """tpumem's dump to `directory` put back after the script's own XLA_FLAGS,
    where the script replaced the variable after tpumem set it and before XLA
    read it (Flax's examples set it in their main): XLA reads it once, and a dump
    lost there is every program's plan lost. Returns the script's flags where
    they were extended, None where tpumem's were still there or where the script
    asked for a dump of its own (left as it asked, unless `over_theirs`: `tpumem
    fit`, whose script never runs, reads its plans from tpumem's)."""
    current = environ.get(FLAGS_VARIABLE, "")
    flags = current.split()
    theirs = _flag(flags, DUMP_TO)
    if theirs == directory and _on(_flag(flags, AS_PROTO)):
        return None
    if theirs and not over_theirs:  # a dump of the script's own, as it asked
        return None
    environ[FLAGS_VARIABLE] = " ".join([current, f"{DUMP_TO}={directory}", AS_PROTO]).strip()
    return current


def open_session_dump(environ: MutableMapping[str, str]) -> dict[str, str]:
    """A dump for the rest of this process (a notebook's kernel, from `%load_ext
    tpumem`): XLA reads XLA_FLAGS once, as the framework first computes, which in a
    notebook comes before the first recorded cell; each recording then reads the
    programs compiled while it runs (XlaDump.install), and empties it. Removed at
    exit. Returns what it set; nothing where the user dumps on their own."""
    current = environ.get(FLAGS_VARIABLE, "")
    if SESSION_DUMPS or _flag(current.split(), DUMP_TO) is not None:
        return {}
    directory = dump_directory()
    SESSION_DUMPS.append(directory)
    atexit.register(shutil.rmtree, directory, True)
    environ[FLAGS_VARIABLE] = " ".join([current, f"{DUMP_TO}={directory}", AS_PROTO]).strip()
    return {FLAGS_VARIABLE: environ[FLAGS_VARIABLE]}


def dump_directory() -> str:
    """A new directory for a dump tpumem owns: in memory where the machine has a
    memory filesystem, else with the other temporary files."""
    memory = MEMORY_FILESYSTEM if os.access(MEMORY_FILESYSTEM, os.W_OK | os.X_OK) else None
    return tempfile.mkdtemp(prefix="tpumem-xla-", dir=memory)


def install_dump(options: CaptureOptions, warnings: list[str]) -> XlaDump | None:
    """The dump for an adapter about to load its framework (None: not asked for,
    or the user's own cannot be read); what tpumem changed goes to `warnings`."""
    if not options.programs:
        return None
    dump = XlaDump.install(os.environ, options.xla_dump_dir)
    if dump is not None:
        warnings.extend(dump.notes)
    return dump


def close_dump(
    dump: XlaDump | None, writer: TraceWriter, compiled: bool, warnings: list[str]
) -> None:
    """Reads the last programs and removes what tpumem owns; `compiled`: the
    framework compiled programs, so an empty dump means XLA never saw the flags."""
    if dump is None:
        return
    dump.close(writer)
    if compiled and not dump.taken:
        warnings.append(
            "XLA dumped no compiled programs: XLA read XLA_FLAGS before tpumem added its "
            "dump (the framework had started), so what fills each program is not shown; "
            "start tpumem before the framework's first computation"
        )


def _files(directory: str) -> dict[str, int]:
    try:
        return {entry.name: entry.stat().st_mtime_ns for entry in os.scandir(directory)}
    except OSError:
        return {}


def _before_optimizations(entries: list[os.DirEntry], module: int) -> bytes | None:
    """The program as the framework handed it to XLA, dumped beside the optimized
    one: what `--tpu` compiles for a TPU. None where XLA wrote none."""
    for entry in entries:
        match = _MODULE.match(entry.name)
        if (
            match is not None
            and int(match.group(1)) == module
            and entry.name.endswith(".before_optimizations.hlo.pb")
        ):
            try:
                with open(entry.path, "rb") as handle:
                    return handle.read()
            except OSError:
                return None
    return None


def _is_program(name: str) -> bool:
    return name.endswith(".hlo.pb") and "after_optimizations" in name


def _rank(name: str) -> tuple[bool, str]:
    return ("buffer_assignment" in name, name)


def _remove(path: str) -> None:
    try:
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            os.unlink(path)
    except OSError:
        pass
