"""Run by every Python process of a script's tree under `tpumem profile --follow`
(this directory comes first on PYTHONPATH): a process that imports a framework
records itself (tpumem/adapters/follow.py). The standard library only, and
nothing more until a framework is imported; then the sitecustomize module this
one stands in front of, if there is one, runs as it would have."""

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys

VARIABLE = "TPUMEM_FOLLOW"  # launch_protocol.FOLLOW_VARIABLE
FRAMEWORKS = ("jax", "tensorflow", "torch_xla")  # import_watch.FRAMEWORKS


class _Finder(importlib.abc.MetaPathFinder):
    """The first look for a framework hands over to tpumem's import watch, which
    starts the recording when a framework's module runs (follow.framework_spec)."""

    def find_spec(self, name, path, target=None):
        if name not in FRAMEWORKS:
            return None
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        try:
            from tpumem.adapters import follow
        except Exception:  # an interpreter without tpumem: the process runs unrecorded
            return None
        return follow.framework_spec(name, path, target)


def _chain():
    """The sitecustomize module this one hides, if there is one."""
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


if os.environ.get(VARIABLE):
    sys.meta_path.insert(0, _Finder())
_chain()
