"""One way in: the paths a command is given, as the traces they hold. A trace
file, several (a run's processes), a run's directory, or an XSpace profile (an
`.xplane.pb` or a TensorBoard logdir), imported into traces on the way."""

from __future__ import annotations

import tempfile
import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tpumem.reading.object_storage import Fetched


@dataclass(frozen=True, slots=True)
class RunInput:
    """One run as a command was given it."""

    traces: list[Path]  # one trace; or a distributed run's, one per process
    where: str  # what to call it
    is_processes: bool  # a distributed run: a directory, or several traces
    shown_as: str | None = None  # one trace imported from a profile: the profile's name
    imported: bool = False  # from a profile, into traces in a scratch directory
    # Traces in object storage, stand-ins until read in full (each brought whole
    # then); None where every trace is local.
    stored: Fetched | None = None

    def name_of(self, trace: Path) -> str | None:
        """The name a trace of this run goes by where its file's would mislead: a
        scratch file imported from a profile goes by the profile's (and its host's),
        a stand-in for one in object storage by its URL."""
        if self.stored is not None:
            return self.stored.url_of(trace)
        if not self.imported:
            return None
        return self.shown_as or f"{self.where} ({trace.stem})"


def traces_of(paths: list[Path]) -> tuple[list[Path], str, bool]:
    """The traces a command was given, what to call them, and whether they are a
    distributed run's: a trace file, several (a run's processes), or a run's
    directory (every .tpumem file in it, by name)."""
    from tpumem.errors import TpumemError
    from tpumem.outputs import trace_of_summary

    given = set(paths)
    traces: list[Path] = []
    for path in paths:
        if path.is_dir():
            found = sorted(path.glob("*.tpumem"))
            if not found:
                raise TpumemError(f"{path}: no traces (.tpumem files) in this directory")
            traces += found
        elif trace_of_summary(path) not in given:
            # (what is not a readable trace, the reader says so in one line; a trace's
            # summary given beside it, as `run/*` gives it, is read for it)
            traces.append(path)
    where = _called(paths, traces)
    return traces, where, len(traces) > 1 or any(path.is_dir() for path in paths)


def is_profile(path: Path) -> bool:
    """An XSpace profile as `tpumem import` takes it: an `.xplane.pb` file, or a
    directory holding some and no traces (a TensorBoard logdir, one profile run)."""
    from tpumem.xplane import XPLANE_SUFFIX
    from tpumem.xplane.logdir import profile_files

    if path.is_dir():
        if next(path.glob("*.tpumem"), None) is not None:
            return False
        return bool(profile_files(path))
    return path.name.endswith(XPLANE_SUFFIX)


def importing_meanwhile(modules: tuple[str, ...]) -> threading.Thread:
    """Imports `modules` on a thread of their own while this one reads a profile:
    imports run Python (holding the GIL) and the read is mostly numpy (which lets
    it go), so on a second core most of the imports hide (about 20 ms of a report).
    An import that fails is left to fail again, in one line, where it is used."""
    import importlib

    from tpumem.threads import leave_signals_to_the_script

    def run() -> None:
        leave_signals_to_the_script()  # (a Ctrl-C is the main thread's to take)
        for name in modules:
            with suppress(Exception):
                importlib.import_module(name)

    thread = threading.Thread(target=run, name="tpumem-imports", daemon=True)
    thread.start()
    return thread


@contextmanager
def opened_run(paths: list[Path], meanwhile: tuple[str, ...] = ()) -> Iterator[RunInput]:
    """The paths as one run (report, check, export): `traces_of`, where XSpace
    profiles among them are first imported into traces in a scratch directory that
    lasts as long as the block: a profile is reported in one process, and no file
    is left behind. `meanwhile`: modules to import on another thread while a
    profile is read."""
    from tpumem.outputs import remote_url

    if any(remote_url(path) is not None for path in paths):
        with _fetched(paths, meanwhile) as remote:
            yield remote
        return
    if not any(is_profile(path) for path in paths):
        yield RunInput(*traces_of(paths))
        return
    with _imported(paths, meanwhile) as imported:
        yield imported


@contextmanager
def _imported(
    paths: list[Path], meanwhile: tuple[str, ...], called: str | None = None
) -> Iterator[RunInput]:
    """The paths as one run, the profiles among them imported into traces in a
    scratch directory; `called`: what to call the run, where not its path (a
    profile brought from object storage goes by its URL)."""
    # What reads a profile is imported before the other thread starts: the two
    # then import different modules, not each other's halves of an import cycle.
    from tpumem.importer import import_into

    importing = importing_meanwhile(meanwhile)
    with tempfile.TemporaryDirectory(prefix="tpumem-") as scratch:
        given: list[Path] = []
        try:
            for index, path in enumerate(paths):
                if is_profile(path):
                    given += import_into(path, Path(scratch) / str(index), called)
                else:
                    given.append(path)
        finally:
            importing.join()  # (not left running as the process ends on an error)
        traces, _, is_run = traces_of(given)
        where = called or _called(paths, traces)
        yield RunInput(traces, where, is_run, None if is_run else where, imported=True)


@contextmanager
def _fetched(paths: list[Path], meanwhile: tuple[str, ...]) -> Iterator[RunInput]:
    """A run in object storage (`gs://bucket/run/`, or a trace there): its
    summaries and the ends of its traces brought to a scratch directory that lasts
    as long as the block, each trace whole only as it is read in full. A profile
    there (a logdir, an .xplane.pb) is brought whole and imported, as one here."""
    from tpumem.errors import TpumemError
    from tpumem.outputs import TRACE_SUFFIX, remote_url
    from tpumem.progress import progress
    from tpumem.reading.object_storage import fetched_file, fetched_run

    if len(paths) != 1:
        raise TpumemError("a run in object storage is given alone: its directory, or one trace")
    url = remote_url(paths[0])
    assert url is not None

    with tempfile.TemporaryDirectory(prefix="tpumem-") as scratch:
        with progress(f"reading {url}"):  # (a client retries a server out of reach a while)
            fetched = fetched_run(url, Path(scratch) / "run")
            if fetched is None:
                local, _ = fetched_file(url, Path(scratch) / "profile")
            elif len(fetched.traces) == 1 and url.endswith(TRACE_SUFFIX):
                fetched.fetch(fetched.traces[0])  # (one trace is read in full)
        if fetched is None:
            with _imported([local], meanwhile, url) as imported:
                yield imported
            return
        is_run = len(fetched.traces) > 1 or not url.endswith(TRACE_SUFFIX)
        yield RunInput(
            fetched.traces,
            url,
            is_run,
            None if is_run else url,
            stored=fetched,
        )


@contextmanager
def opened_runs(paths: list[Path]) -> Iterator[list[RunInput]]:
    """Each path a run of its own (compare, diff): a trace, a run's directory or a
    profile, as `opened_run` reads one."""
    with ExitStack() as stack:
        yield [stack.enter_context(opened_run([path])) for path in paths]


def _called(paths: list[Path], traces: list[Path]) -> str:
    """What to call what a command was given: the one path, else its traces' count."""
    from tpumem.units import counted

    return str(paths[0]) if len(paths) == 1 else counted(len(traces), "trace")
