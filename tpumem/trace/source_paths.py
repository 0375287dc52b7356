"""How a trace names a source file: from the run's working directory, as the user
reads paths in their own tree, unless that climbs three or more directories
(then the absolute path, which says more). The adapters name the lines of the
buffers they record so, and the analysis the lines XLA's metadata gives."""

from __future__ import annotations

import os


def user_path(filename: str, cwd: str) -> str:
    relative = os.path.relpath(os.path.abspath(filename), cwd)
    far = os.path.join(os.pardir, os.pardir, os.pardir)
    return filename if relative.startswith(far) else relative


# Where installed packages live: a file there is a framework's or a library's,
# never the user's (the adapters leave such frames out of a stack).
LIBRARY_DIRS = (os.sep + "site-packages" + os.sep, os.sep + "dist-packages" + os.sep)


def library_file(path: str) -> bool:
    return any(part in path for part in LIBRARY_DIRS)
