"""The PyTorch/XLA adapter: the buffers of materialized XLA tensors on every
backend, each graph's memory from PyTorch/XLA's own analysis, training steps as
the framework marks them, and `get_memory_info` samples where the backend has
them (TPU, GPU).

- Tensors: a torch function mode sees every op the script calls from Python and
  hands the tensors it makes and uses to the book (tensor_book.py), which
  looks at what is materialized around each graph execution; a torch.optim
  step runs outside it, and what it read and kept is handed over after it
  (optimizer_steps.py).
- Executions: `torch_xla.sync()` / `xm.mark_step()` (both end in
  `_XLAC._xla_step_marker`) are hooked, and so are the tensor reads that run a
  graph at once (`.item()`, `.cpu()`, printing).
- Steps: `xp.StepTrace` and `torch_xla.step()` where the script uses them, else
  its optimizer's steps (training_steps.py). Syncs are marked as syncs: PyTorch/XLA's
  own examples sync several times a step.
- Graphs: `PT_XLA_DEBUG_LEVEL=2` with `PT_XLA_DEBUG_FILE` in a spool directory
  (debug_log.py), unless the user set them.
- Not exposed on the CPU: `get_memory_info` (UNIMPLEMENTED), allocator events;
  the report says so.
"""

from __future__ import annotations

import atexit
import contextlib
import glob
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tpumem.adapters.base import Adapter, CaptureOptions, Every, Patches, Sampler, register
from tpumem.adapters.book_rows import OPTIMIZER, WRITE_EVERY_S
from tpumem.adapters.call_stacks import CallStacks
from tpumem.adapters.interrupts import keep_interrupts
from tpumem.adapters.launch_protocol import FOLLOW_VARIABLE
from tpumem.adapters.optimizer_steps import OptimizerSteps
from tpumem.adapters.source_lines import SourceLines
from tpumem.adapters.torch_xla.debug_log import (
    FILE_VARIABLE,
    LEVEL_VARIABLE,
    PRECISION_BYTES,
    DebugLog,
    Graph,
)
from tpumem.adapters.torch_xla.framework import FRAMEWORK
from tpumem.adapters.torch_xla.graph_ends import GraphEnds
from tpumem.adapters.torch_xla.op_stacks import TorchStacks
from tpumem.adapters.torch_xla.tensor_book import TensorBook
from tpumem.adapters.torch_xla.training_steps import SYNC_MARK, TrainingSteps
from tpumem.adapters.xla_dump import XlaDump, close_dump, install_dump
from tpumem.trace.metadata import DeviceInfo, ProcessInfo, TorchXlaBook, TorchXlaExtra
from tpumem.trace.schema import BUFFER, PROGRAM
from tpumem.trace.writer import TraceWriter
from tpumem.units import counted

DEVICE_VARIABLE = "PJRT_DEVICE"
ALIASING_VARIABLE = "XLA_ENABLE_PARAM_ALIASING"
# Device files of accelerators PyTorch/XLA runs on: TPU chips, NVIDIA GPUs, Neuron.
_ACCELERATOR_FILES = ("/dev/accel*", "/dev/vfio/[0-9]*", "/dev/nvidia[0-9]*", "/dev/neuron*")
# Tensor methods that read a value, running the pending graph at once.
_READS = frozenset(
    ("item", "tolist", "cpu", "numpy", "__repr__", "__format__", "__bool__", "__float__")
)
# Calls that run autograd, which builds its graph in C++ where no op hook runs.
_AUTOGRAD = frozenset(("backward", "grad"))
# The debug file each PyTorch/XLA process writes, by path, read on by each recording.
_PROCESS_LOGS: dict[str, DebugLog] = {}


def accelerator_present() -> bool:
    return any(glob.glob(pattern) for pattern in _ACCELERATOR_FILES)


@register
class TorchXlaAdapter(Adapter):
    framework = FRAMEWORK

    def __init__(self, options: CaptureOptions) -> None:
        super().__init__(options)
        self._sampler: Sampler | None = None
        self._warnings: list[str] = []
        self._debug: DebugLog | None = None
        self._syncs = 0
        self._unseen_executions = 0
        self._names: dict[Any, str] = {}
        self._dump: XlaDump | None = None
        self._recorded: set[str] = set()  # graphs recorded as programs in this trace
        self._patches = Patches()
        self._book_writes = Every(WRITE_EVERY_S)

    @classmethod
    def environment(cls, options: CaptureOptions, current: Mapping[str, str]) -> dict[str, str]:
        # PyTorch/XLA picks TPU when it finds one and otherwise falls back to the
        # CPU with a warning; with no accelerator at all, tpumem says CPU itself.
        if (
            DEVICE_VARIABLE not in current
            and current.get("PJRT_SELECT_DEFAULT_DEVICE", "1") != "0"
            and not accelerator_present()
        ):
            return {DEVICE_VARIABLE: "CPU"}
        return {}

    @classmethod
    def runtime_started(cls) -> bool:
        xlac = sys.modules.get("_XLAC") or getattr(sys.modules.get("torch_xla"), "_XLAC", None)
        return bool(xlac is not None and xlac._xla_runtime_is_initialized())

    # -- start and stop ----------------------------------------------------------

    def start(self, writer: TraceWriter) -> None:
        self.writer = writer
        self.origin = writer.start_time_ns
        self._identified = False
        started = self.runtime_started()  # by the user's process, before tpumem.track
        self._configure_debug_output(started)  # read by torch_xla's C++ when it starts
        self._dump = install_dump(self.options, self._warnings)  # XLA_FLAGS, likewise
        import torch
        import torch_xla
        import torch_xla.runtime as xr

        self.torch, self.xlac = torch, torch_xla._XLAC
        self.backend = (xr.device_type() or "CPU").upper()
        aliasing = os.environ.get(ALIASING_VARIABLE, "1").lower() not in ("0", "false")
        self.stacks = CallStacks(writer, self.options.native_frames, self.options.stacks)
        self.op_stacks = TorchStacks(self.stacks)
        places = self.op_stacks.places
        self.book = TensorBook(
            self.origin, self.xlac, self._device_name, aliasing, places, xr.is_spmd
        )
        self.sources = SourceLines()
        writer.patch_metadata(
            framework_version=torch_xla.__version__,
            extra=TorchXlaExtra(torch_version=torch.__version__),
            backend=self.backend.lower(),
            not_exposed=_not_exposed(self.backend),
        )
        self._ends = GraphEnds(self.xlac, self.book.end, self._now)
        self._hook_step_marker()
        self.steps = TrainingSteps(writer)
        self.steps.install(torch, torch_xla)
        self._watch_child_processes()
        self._mode = _watch_mode(torch, self)
        self._mode.__enter__()
        self._optimizer_steps = OptimizerSteps(torch, self._mode, self._stepped)
        self._optimizer_steps.install()
        self._watch_new_threads()
        keep_interrupts(self._patches)  # the book hears of deaths in callbacks
        if started:
            self._warnings.append(
                "PyTorch/XLA was in use before tpumem started: the tensors made before "
                "count from when the recording first saw an op use them"
            )
        self._sampler = Sampler("tpumem-torch-xla", self.options.sample_interval_s, self._tick)
        self._sampler.start()

    def forget(self) -> None:
        self._unhook()

    def _unhook(self) -> None:
        """Every hook in the script's process goes: the op mode, the optimizer
        and step hooks, the patches."""
        self._optimizer_steps.remove()
        self._mode.__exit__(None, None, None)
        self.steps.remove()
        self._patches.undo()

    def stop(self) -> None:
        if self._sampler is not None:
            self._sampler.stop()
            self._warnings.extend(self._sampler.warnings())
        self._unhook()
        self._wait_for_runs()
        self.book.finish(self._now())
        self._read_debug()
        self._write_book()
        compiled = self._debug is not None and bool(self._debug.graphs)
        close_dump(self._dump, self.writer, compiled, self._warnings)
        devices = sorted(set(self._names.values()))
        self.writer.patch_metadata(
            devices=[DeviceInfo(name, self.backend) for name in devices],
            fidelity=dict.fromkeys(devices, BUFFER),
            extra=TorchXlaExtra(self.torch.__version__, self._book_metadata()),
            warnings=self._warnings,
        )

    def _configure_debug_output(self, started: bool) -> None:
        """PyTorch/XLA reads its debug settings once, when its runtime starts, and
        writes to that file for the rest of the process: a spool tpumem makes lives
        as long as the process, and a later recording reads on from where the last
        one stopped."""
        level, path = os.environ.get(LEVEL_VARIABLE), os.environ.get(FILE_VARIABLE)
        if level is None and started:
            self._warnings.append(
                "PyTorch/XLA had started before tpumem: it reads its debug settings once, "
                "so graphs' sizes and temps are missing; "
                f"{LEVEL_VARIABLE}=2 {FILE_VARIABLE}=<a file> in the environment before "
                "PyTorch/XLA starts gives them"
            )
            return
        if level is None:
            os.environ[LEVEL_VARIABLE] = "2"
            if path is None:
                spool = tempfile.mkdtemp(prefix="tpumem-torch-xla-")
                atexit.register(shutil.rmtree, spool, ignore_errors=True)
                path = os.environ[FILE_VARIABLE] = os.path.join(spool, "pt_xla_debug.txt")
        if path is None or (level is not None and level.strip() in ("", "0")):
            self._warnings.append(
                f"{LEVEL_VARIABLE} is set without {FILE_VARIABLE}, or to 0: PyTorch/XLA's "
                "graph analysis is not read, so graphs' sizes and temps are missing"
            )
            return
        self._debug = _PROCESS_LOGS.get(path)
        if self._debug is None:
            self._debug = _PROCESS_LOGS[path] = DebugLog(Path(path))
        self._debug.read()  # what ran before this recording: its graphs stay known

    def _wait_for_runs(self, timeout_s: float = 10.0) -> None:
        """Graphs still running when the script ended: their ends are waited for."""
        self._ends.stop(timeout_s)
        left = self.book.close_running(self._now())
        if left:
            self._warnings.append(
                f"the script ended before {counted(left, 'graph execution')} had finished: "
                "their temps end at the script's end"
            )

    def _watch_new_threads(self) -> None:
        """A torch function mode holds for the thread that entered it only: threads
        started from now on (torch_xla.launch runs a thread per device on the CPU)
        run inside it too. tpumem's own threads stay outside."""
        # (CPython's own, private: typeshed leaves it out)
        mode, original = self._mode, threading.Thread._bootstrap_inner  # type: ignore[attr-defined]
        optimizer_steps = self._optimizer_steps

        def _bootstrap_inner(thread: threading.Thread) -> None:
            if thread.name.startswith("tpumem"):
                return original(thread)
            with mode:
                try:
                    return original(thread)
                finally:
                    optimizer_steps.resume()  # the mode is innermost again for `with`

        self._patches.replace(threading.Thread, "_bootstrap_inner", _bootstrap_inner)

    def _watch_child_processes(self) -> None:
        """`torch_xla.launch` and `xmp.spawn` run the work in one child process per
        device, which this trace does not follow: say so in the report."""
        import torch_xla.distributed.xla_multiprocessing as xmp

        original, adapter = xmp.spawn, self

        def spawn(fn: Any, args: Any = (), nprocs: Any = None, *rest: Any, **kwargs: Any) -> Any:
            if nprocs != 1 and FOLLOW_VARIABLE not in os.environ:  # nprocs=1: in this process
                adapter._warnings.append(
                    "the script ran its work in a child process (torch_xla.launch / "
                    "xmp.spawn), which this trace does not hold: tpumem profile --follow "
                    "records it, or torch_xla.launch(fn, debug_single_process=True) runs "
                    "it in this process"
                )
            return original(fn, args, nprocs, *rest, **kwargs)

        spawn.__doc__ = original.__doc__
        self._patches.replace(xmp, "spawn", spawn)

    # -- executions --------------------------------------------------------------

    def _hook_step_marker(self) -> None:
        xlac, adapter = self.xlac, self
        original = xlac._xla_step_marker

        def _xla_step_marker(*args: Any, **kwargs: Any) -> Any:
            adapter._optimizer_steps.resume()  # an optimizer step that raised left it off
            adapter.writer.mark(SYNC_MARK)
            adapter._syncs += 1
            return adapter._execute(original, args, kwargs, waits=False)

        _xla_step_marker.__doc__ = original.__doc__
        self._patches.replace(xlac, "_xla_step_marker", _xla_step_marker)

    def _execute(self, call: Any, args: Any, kwargs: Any, waits: bool) -> Any:
        """Runs a call that executes the pending graph, with the book's look
        before and after. `waits`: the call returns once the graph has run."""
        with self.torch._C.DisableTorchFunction():
            pending = self.book.prepare(self._now())
        settled = False
        try:
            out = call(*args, **kwargs)
            launched = self._now()
            with self.torch._C.DisableTorchFunction():
                graph = self._read_debug()
                temp = graph.sizes.get("temp_bytes", 0) if graph else 0
                name = _graph_name(graph) if graph else None
                where = self.stacks(sys._getframe())
                settled = True  # (settle counts the launch done, whatever it raises)
                run, output = self.book.settle(pending, launched, name, temp, where)
        finally:
            if not settled:
                self.book.abandon()
        if waits or output is None:
            self.book.end(run, self._now())
        else:
            self._ends.launched(run)
        return out

    def _read_debug(self) -> Graph | None:
        """New graphs into the trace; the graph of the last execution."""
        if self._debug is None:
            return None
        compiled, executed = self._debug.read()
        for graph in compiled:
            self._record_program(graph)
        graphs = self._debug.graphs
        for graph_hash in executed:  # compiled before this recording began
            if graph_hash not in self._recorded and graph_hash in graphs:
                self._record_program(graphs[graph_hash])
        if len(executed) > 1:
            self._unseen_executions += len(executed) - 1
        return graphs.get(executed[-1]) if executed else None

    def _record_program(self, graph: Graph) -> None:
        self._recorded.add(graph.hash)
        analysis = {
            "name": _graph_name(graph),
            "graph_hash": graph.hash,
            **graph.sizes,
            "precision_bytes": PRECISION_BYTES,
            "source": next(filter(None, map(self.sources.file_line, graph.frames)), None),
        }
        self.writer.record(PROGRAM, op=analysis["name"], text=json.dumps(analysis))

    def _stepped(self, optimizer: Any) -> None:
        """What an optimizer step that ran outside the op hook read (each
        parameter and its gradient) and kept (its state), to the book, as the
        hook hands over what an op made and used (optimizer_steps.py)."""
        tensor_type, reads = self.torch.Tensor, self.book.reads
        read = [p for group in optimizer.param_groups for p in group["params"]]
        read += [grad for p in read if (grad := p.grad) is not None]
        kept = [  # (torch's stubs leave out Tensor.is_xla)
            value
            for state in optimizer.state.values()
            for value in state.values()
            if isinstance(value, tensor_type) and value.is_xla  # type: ignore[attr-defined]
        ]
        made = [t for t in kept if not reads(t, False)]
        used = [t for t in read if t.is_xla and not reads(t, False)]
        if made or used:
            op = f"{type(optimizer).__name__}.step"
            where = self.op_stacks.capture()
            self.book.seen(made, used, self._now(), op, where, False, region=OPTIMIZER)

    # -- the sampler ---------------------------------------------------------------

    def _tick(self) -> None:
        if not self._identified:
            self._identify()
        self._sample_once()
        if self._book_writes.due():
            self._write_book()
        if self._dump is not None:
            self._dump.tick(self.writer)

    def _identify(self) -> None:
        """Which process of a multi-process run, once the runtime has started (a TPU
        pod's hosts; torchrun's processes each have a world of their own on the CPU,
        and their launcher's RANK stands)."""
        if not self.xlac._xla_runtime_is_initialized():
            return
        self._identified = True
        import torch_xla.runtime as xr

        source = "torch_xla.runtime.process_index()"
        self.identify(self.writer, ProcessInfo(xr.process_index(), xr.process_count(), source))

    def _sample_once(self) -> None:
        if self.backend == "CPU" or not self.xlac._xla_runtime_is_initialized():
            return
        for device in self.xlac._xla_real_devices():
            try:
                info = self.xlac._xla_memory_info(device)
            except RuntimeError:
                continue
            self.writer.sample(device=device, **_memory_fields(info))

    def _write_book(self) -> None:
        columns, count = self.book.take_columns()
        if count:
            self.writer.write_columns(columns, count)

    # -- labels ----------------------------------------------------------------------

    def _device_name(self, device: Any) -> str:
        name = self._names.get(device)
        if name is None:
            name = self._names[device] = self.xlac._xla_real_devices([str(device)])[0]
        return name

    def _now(self) -> int:
        return time.time_ns() - self.origin

    def _book_metadata(self) -> TorchXlaBook:
        import torch_xla.runtime as xr

        counts = self.book.counts
        spmd = None
        with contextlib.suppress(Exception):
            if xr.is_spmd():
                spmd = int(xr.global_runtime_device_count())
        return TorchXlaBook(
            spmd_devices=spmd,
            sharded_tensors=counts.sharded if spmd else None,
            method="materialized XLA tensors, seen by a torch function mode (a torch.optim "
            "step's in the optimizer's state); "
            "executions at torch_xla.sync() and value reads",
            tensors_seen=counts.seen,
            tensors_transferred=counts.transferred,
            tensors_materialized_by_graphs=counts.materialized,
            buffers_replaced_in_place=counts.replaced,
            gradients_found=counts.gradients,
            freed_after_their_graph=counts.freed_after_graph,
            executions_observed=counts.executions,
            executions_not_observed=self._unseen_executions,
            syncs=self._syncs,
            steps=self.steps.count,
            steps_from=self.steps.source,
            program_temp_shown=self._debug is not None,
        )


def _watch_mode(torch: Any, adapter: TorchXlaAdapter) -> Any:
    """The torch function mode that sees every op the script calls from Python
    outside a torch.optim step (optimizer_steps.py): about 150 a step of
    the transformer example, 750 with the step's, so what it needs is bound here
    once, and an op costs one Python call and no framework calls beyond
    `is_xla`, `requires_grad`, whether grad mode is on (an op autograd records
    may keep what it made or read for backward) and, for an op that makes or
    first uses a tensor, PyTorch's capture of its stack (op_stacks.py)."""
    from torch.overrides import TorchFunctionMode

    tensor_type, book, stacks = torch.Tensor, adapter.book, adapter.stacks
    capture = adapter.op_stacks.capture
    knows, reads, seen, execute = book.knows, book.reads, book.seen, adapter._execute
    pending_flags = book.pending_flags
    origin, grad_enabled = adapter.origin, torch.is_grad_enabled

    class _Watch(TorchFunctionMode):
        def __torch_function__(
            self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None
        ) -> Any:
            name = getattr(func, "__name__", None)
            if (
                name in _READS
                and args
                and getattr(args[0], "is_xla", False)
                and pending_flags([args[0]])[0]
            ):
                return execute(func, args, kwargs or {}, waits=True)
            if name in _AUTOGRAD:  # (before: it runs in C++, where no hook does)
                book.autograd_runs(stacks(sys._getframe()), _keeps_graph(name, args, kwargs))
            out = func(*args, **kwargs) if kwargs else func(*args)
            made = used = None
            recorded = False  # autograd recorded the op: it may keep what it made or read
            if isinstance(out, tensor_type):
                recorded = out.requires_grad and grad_enabled()
                if out.is_xla and not knows(out):
                    made = [out]
            elif isinstance(out, (tuple, list)):
                made = [o for o in out if isinstance(o, tensor_type) and o.is_xla]
                recorded = any(o.requires_grad for o in made) and grad_enabled()
            for arg in (*args, *kwargs.values()) if kwargs else args:
                if isinstance(arg, tensor_type):
                    if arg.is_xla and not reads(arg, recorded):
                        used = [*used, arg] if used else [arg]
                elif isinstance(arg, (tuple, list)) and arg and isinstance(arg[0], tensor_type):
                    found = [
                        a
                        for a in arg
                        if isinstance(a, tensor_type) and a.is_xla and not reads(a, recorded)
                    ]
                    used = [*used, *found] if used else found
            if made or used:
                # Property reads (`.grad`, `.data`) make no tensor: what they give is used.
                op = None if name == "__get__" else name
                seen(made, used, time.time_ns() - origin, op, capture(), recorded)
            return out

    return _Watch()


def _keeps_graph(name: str, args: tuple, kwargs: dict | None) -> bool:
    """Whether a backward or autograd.grad call may keep its graph for another
    (retain_graph, create_graph, or arguments past the first it takes, which
    could say so)."""
    if kwargs and (kwargs.get("retain_graph") or kwargs.get("create_graph")):
        return True
    return len(args) > (1 if name == "backward" else 2)


def _graph_name(graph: Graph) -> str:
    return f"graph {graph.hash[:8]}"


def _memory_fields(info: Mapping[str, Any]) -> dict[str, int]:
    """get_memory_info's keys (newer: bytes_*, older: kb_free/kb_total)."""
    if "bytes_used" in info:
        fields = {"bytes_in_use": int(info["bytes_used"]), "bytes_limit": int(info["bytes_limit"])}
        if "peak_bytes_used" in info:
            fields["peak_bytes_in_use"] = int(info["peak_bytes_used"])
        return fields
    total, free = int(info["kb_total"]) * 1024, int(info["kb_free"]) * 1024
    return {"bytes_in_use": total - free, "bytes_limit": total}


def _not_exposed(backend: str) -> list[str]:
    if backend == "CPU":
        return [
            "bytes in use, limit and peak: xm.get_memory_info is UNIMPLEMENTED on the CPU",
            "allocator events: PyTorch/XLA's profiler records none on the CPU",
            "buffer addresses: the CPU client's buffers are not read (no pool to map)",
        ]
    return [
        "allocator events: not read from PyTorch/XLA's profiler by this version",
        "buffer addresses: not read",
    ]
