"""How a trace names a source file: from the run's working directory, as the user
reads paths in their own tree, unless that climbs three or more directories
(then the absolute path, which says more). The adapters name the lines of the
buffers they record so, and the analysis the lines XLA's metadata gives."""

from __future__ import annotations

import os
from collections.abc import Iterable


def user_path(filename: str, cwd: str) -> str:
    relative = os.path.relpath(os.path.abspath(filename), cwd)
    far = os.path.join(os.pardir, os.pardir, os.pardir)
    return filename if relative.startswith(far) else relative


# Where installed packages live: a file there is a framework's or a library's,
# never the user's (the adapters leave such frames out of a stack).
LIBRARY_DIRS = (os.sep + "site-packages" + os.sep, os.sep + "dist-packages" + os.sep)
# Top-level packages of frameworks and the libraries around them: a file under a
# directory of one of these names is library code wherever it lies (a checkout on
# PYTHONPATH, a --target install).
LIBRARY_PACKAGES = frozenset(
    {
        "absl", "chex", "clu", "datasets", "einops", "equinox", "flax", "haiku", "jax",
        "jaxlib", "keras", "ml_collections", "numpy", "optax", "optree", "orbax",
        "tensorflow", "tensorflow_datasets", "tf_keras", "torch", "torch_xla",
        "torchvision", "transformers", "tree",
    }
)  # fmt: skip
# TensorFlow's autograph runs a function as code it wrote to a file of its own,
# which is no line the user can open.
GENERATED = "__autograph_generated_file"


def library_file(path: str) -> bool:
    """Whether a file is a framework's or a library's (or code one generated)."""
    if any(part in path for part in LIBRARY_DIRS) or GENERATED in path:
        return True
    return any(part in LIBRARY_PACKAGES for part in os.path.dirname(path).split(os.sep))


def first_user_location(frames: Iterable[tuple[str, int]]) -> str | None:
    """The user's line in a call stack given innermost first as (file, line): the
    first frame that is not a library's nor the interpreter's own."""
    for file, line in frames:
        if not library_file(file) and not file.startswith("<frozen"):
            return f"{file}:{line}"
    return None
