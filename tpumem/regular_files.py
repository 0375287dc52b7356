"""A file read beside what a command was given, as untrusted input: a summary
beside a trace, a program XProf extracted beside a profile. Only a regular file
itself is read: not a link, which may point anywhere (a summary linked to
/dev/zero or to a 10 GB file was followed and read), nor a FIFO or a device,
which would hang the read; and no more of it than what it should hold."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path


class NotRegular(Exception):
    """Why the file is not one to read, in words that follow "is" ("a link")."""


def read_regular(path: Path, most: int) -> bytes:
    """The bytes of `path`, a regular file of at most `most` bytes, opened without
    following a link or waiting on a FIFO. FileNotFoundError where there is none,
    NotRegular where it is a link, not a regular file or larger, OSError where it
    cannot be read."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as error:
        if error.errno in (errno.ELOOP, errno.EMLINK):  # (O_NOFOLLOW's answer to a link)
            raise NotRegular("a link") from None
        raise
    with os.fdopen(descriptor, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise NotRegular("not a regular file")
        too_large = NotRegular(f"larger than {most:,} bytes")
        if info.st_size > most:
            raise too_large
        data = handle.read(most + 1)  # (a file being written may outgrow its size)
    if len(data) > most:
        raise too_large
    return data
