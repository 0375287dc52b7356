"""What `tpumem profile` (tpumem/launch/launcher.py) and the profiled process
(runner.py) say to each other: the run's settings in one environment variable,
and how the run went as JSON lines on a status pipe. Both sides import this
module and nothing else of each other's."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from typing import Any

CONFIG_VARIABLE = "TPUMEM_RUNNER_CONFIG"
QUIET_VARIABLE = "TPUMEM_QUIET_THREADS"  # quiet.py: the framework's threads mute their noise
# What a tpumem thread writes on stderr to name itself to the launcher's filter
# (launch/stderr_filter.py), which drops the line and what that thread logs: a
# line no program prints (NUL, the word, then the thread's id).
ANNOUNCEMENT = b"\x00tpumem-thread "
RUN_ID_VARIABLE = "TPUMEM_RUN_ID"  # the run every process of it belongs to
ADAPTER_FAILED = 70  # EX_SOFTWARE: the runner, not the script, failed
# Between SIGTERM and SIGKILL, where tpumem ends what is left of a run (launch/tree.py)
# and where a followed process ends itself once tpumem is gone (follow_end.py): a
# process may save its state.
GRACE_S = 5.0


@dataclass(frozen=True, slots=True)
class LaunchConfig:
    output: str  # the trace's name; with placeholders ({host}, {rank}, {pid}) when `named_here`
    framework: str  # as --framework named it; empty: the one the script imports
    target: str  # a script's path, or a module's name when `module` is true
    module: bool
    args: list[str]
    capture: dict[str, Any] = field(default_factory=dict)  # CaptureOptions' fields
    environment: dict[str, str] = field(default_factory=dict)  # what tpumem set
    output_fd: int | None = None  # the trace, created by `tpumem profile` and passed open
    parent_pid: int | None = None  # `tpumem profile`, which this process must not outlive
    status_fd: int | None = None  # where to tell `tpumem profile` how the run ended
    named_here: bool = False  # this process creates the trace, its name filled in here
    force: bool = False  # a trace named here replaces an existing file
    follow: bool = False  # --follow: every process that imports a framework records itself
    # Signals `tpumem profile` blocked to take them itself (launch/signals.py),
    # which the script gets as it would without tpumem.
    unblock_signals: list[int] = field(default_factory=list)

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> LaunchConfig:
        return cls(**json.loads(text))


_told_last: set[int] = set()  # status descriptors closed (a number the script may reuse)


def tell(status_fd: int | None, news: dict[str, Any], last: bool = False) -> None:
    """For `tpumem profile`, one JSON line on the status pipe: where the trace is
    (as it is named), and at the end how the run ended."""
    if status_fd is None or status_fd in _told_last:
        return
    try:
        os.write(status_fd, json.dumps(news).encode() + b"\n")
        if last:
            _told_last.add(status_fd)
            os.close(status_fd)
    except OSError:
        pass  # tpumem is gone: nobody to tell


def read_ending(descriptor: int) -> dict[str, Any]:
    """What the runner said on the status pipe, its lines merged (later ones win):
    `framework`, the one whose import began (the trace opens then); `output`,
    where the trace is; `exit` or `adapter_failed`, how it ended (neither: it was
    killed). Read without waiting: a process the script forked may hold the pipe
    open."""
    os.set_blocking(descriptor, False)
    data = b""
    try:
        while chunk := os.read(descriptor, 65536):
            data += chunk
    except BlockingIOError:
        pass
    finally:
        os.close(descriptor)
    said: dict[str, Any] = {}
    for line in data.splitlines():
        try:
            news = json.loads(line)
        except ValueError:
            continue
        if isinstance(news, dict):
            said.update(news)
    return said


# --follow: every process that imports a framework records itself (follow.py),
# loaded by follow_boot/sitecustomize.py, which keeps its own copy of the name.
FOLLOW_VARIABLE = "TPUMEM_FOLLOW"
BOOT_DIRECTORY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "follow_boot")
# What an adapter sets in its own process's environment (its XLA dump, PyTorch/XLA's
# debug file), which a child must not inherit: each records its own.
OWN_VARIABLES = ("XLA_FLAGS", "PT_XLA_DEBUG_LEVEL", "PT_XLA_DEBUG_FILE")


@dataclass(frozen=True, slots=True)
class FollowConfig:
    pattern: str  # the run's directory / "{host}-{rank}.tpumem"
    capture: dict[str, Any]  # CaptureOptions' fields
    force: bool = False
    environment: dict[str, str | None] = field(default_factory=dict)  # OWN_VARIABLES at start
    dump_root: str | None = None  # each process's XLA dump goes in a directory of its own here
    tpumem_pid: int | None = None  # `tpumem profile`: each process ends with it (follow_end.py)

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_environment(cls) -> FollowConfig:
        return cls(**json.loads(os.environ[FOLLOW_VARIABLE]))
