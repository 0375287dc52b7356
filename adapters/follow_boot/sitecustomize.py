"""Run by every Python process of a script's tree under `tpumem profile --follow`
(this directory comes first on PYTHONPATH): a process that imports a framework
records itself (tpumem/adapters/follow.py). The standard library only, and
nothing more until a framework is imported; then the sitecustomize module this
one stands in front of, if there is one, runs as it would have."""

import importlib.abc
import importlib.machinery
import importlib.util
import os
import signal
import sys

VARIABLE = "TPUMEM_FOLLOW"  # launch_protocol.FOLLOW_VARIABLE
FRAMEWORKS = ("jax", "tensorflow", "torch", "torch_xla")  # import_watch.FRAMEWORKS


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


# Linux's parent-death signal, for the processes that record nothing (one that
# records watches tpumem itself: follow_end.py). A signal of tpumem's own, looked
# at before it acts: Linux sends it when the parent's *thread* that started this
# process ends too, and a parent that ends while tpumem lives is tpumem's to deal
# with (it is the run's subreaper). When the parent has ended and tpumem with it,
# the process gets SIGTERM, as tpumem would have sent it. SIGURG, whose default
# is to do nothing: the setting outlives an exec, the handler does not, and a
# program this process becomes (os.execv) must not be ended by it (a real-time
# signal's default ends the process). Sockets' out-of-band data, SIGURG's other
# sender, finds the parent alive and ends nothing.
_PARENT_DIED = signal.SIGURG
_PR_SET_PDEATHSIG = 1
_armed = {"parent": 0, "tpumem": 0}


def _parent_died(number, frame):
    parent = os.getppid()
    if parent == _armed["parent"] and not _ended(parent):
        return  # a thread of the parent ended, not the parent
    _armed["parent"] = parent
    _end_without_tpumem()


def _end_without_tpumem():
    if _ended(_armed["tpumem"]):
        os.kill(os.getpid(), signal.SIGTERM)


def _ended(pid):
    """Whether process `pid` has ended (one not waited for yet is a zombie): the
    rule of parent_death.ended, written again because this file imports nothing
    of tpumem's."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            text = stat.read()
    except OSError:
        return True
    return text[text.rfind(b")") + 2 :][:1] in (b"Z", b"X")


def _die_with_tpumem():
    try:
        import ctypes
        import json

        _armed["tpumem"] = int(json.loads(os.environ[VARIABLE])["tpumem_pid"])
        signal.signal(_PARENT_DIED, _parent_died)
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, _PARENT_DIED, 0, 0, 0)
    except Exception:  # (no ctypes, another platform, an older tpumem's settings)
        return
    _armed["parent"] = os.getppid()
    if _armed["parent"] == 1:  # the parent ended before the signal was asked for
        _end_without_tpumem()


if os.environ.get(VARIABLE):
    sys.meta_path.insert(0, _Finder())
    if sys.platform.startswith("linux"):
        _die_with_tpumem()
        os.register_at_fork(after_in_child=_die_with_tpumem)  # (a fork has none)
_chain()
