"""The trace a run created, told from whatever is at its name when the run ends.

`tpumem profile` creates the trace and hands it to the profiled process open, so
the process writes into the file it was given whatever happens to the name. Another
run given the same name with --force (or a user's `rm`) puts another file there,
or none: this process keeps the file it created open for the whole run, knows it
by its device and inode, and at the end reports from it, never from another
run's trace. A file that lost its name is saved under the first free one beside
it (train-2.tpumem, ...): nothing recorded is lost.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path

from tpumem.errors import TpumemError
from tpumem.outputs import default_trace

_COPY_BYTES = 1 << 20


def _identity(info: os.stat_result) -> tuple[int, int]:
    return info.st_dev, info.st_ino


@dataclass
class OwnTrace:
    path: Path
    descriptor: int  # the created file, open for reading and writing until close()
    identity: tuple[int, int]

    @classmethod
    def hold(cls, path: Path, created: int) -> OwnTrace | None:
        """The trace just created at `path` (open on `created`, write-only), held
        open for reading too; None where it cannot be (it is gone already)."""
        identity = _identity(os.fstat(created))
        try:
            descriptor = os.open(path, os.O_RDWR | os.O_CLOEXEC)
        except OSError:
            return None
        if _identity(os.fstat(descriptor)) != identity:  # replaced in between
            os.close(descriptor)
            return None
        return cls(path, descriptor, identity)

    def at_its_name(self) -> bool:
        """Whether the file at the trace's name is still the one this run created."""
        try:
            return _identity(os.stat(self.path)) == self.identity
        except OSError:
            return False

    def size(self) -> int:
        return os.fstat(self.descriptor).st_size

    def saved_elsewhere(self) -> Path:
        """A copy of the trace under the first free name beside its own (which
        another file took); TpumemError where it cannot be written."""
        path, copy = default_trace(self.path, [])
        try:
            offset = 0
            while chunk := os.pread(self.descriptor, _COPY_BYTES, offset):
                view = memoryview(chunk)
                while view:
                    view = view[os.write(copy, view) :]
                offset += len(chunk)
        except OSError as error:
            with contextlib.suppress(OSError):
                os.unlink(path)
            raise TpumemError(f"{path}: cannot write: {error.strerror or error}") from None
        finally:
            os.close(copy)
        return path

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.descriptor)
