"""`tpumem fit --gpu`'s run of a PyTorch script: every tensor it makes is a fake
one (PyTorch's FakeTensorMode: shapes, dtypes and strides, no memory, nothing
computed), so a model of any size runs its steps here in seconds, and each
storage PyTorch's ops make is an allocation of its exact bytes, at the user's
line, freed when PyTorch drops the storage.

The fake tensors are CPU tensors (fake CUDA tensors fail in backward without a
GPU), so what the same ops would do differently on CUDA is put back here:
- cuBLAS's workspaces: the first matrix product of the script's thread, and the
  first of autograd's backward (its own thread on CUDA), each allocate cuBLAS's
  workspace, and the first addmm of a thread cuBLASLt's (tpumem/analysis/gpus.py),
  held to the end;
- each storage is a block of the caching allocator: its bytes rounded up to
  512 (trace/cuda_blocks.py), the size asked for kept beside;
- the optimizers' defaults: torch.optim picks its `foreach` implementation for
  CUDA tensors (lists of temporaries as large as the parameters), the
  single-tensor one for CPU ones; here it picks as on CUDA;
- a script written for a GPU (`.cuda()`, `device="cuda"`, `torch.autocast("cuda")`)
  runs on the CPU's fake tensors (fake_cuda.py);
- attention: `scaled_dot_product_attention` on the CPU takes its math path where
  there is dropout or a mask (the whole sequence-by-sequence matrix, a
  GPT-style model's largest activations); CUDA takes its flash kernel (half
  precision, no mask) or its memory-efficient one, neither of which holds that
  matrix. Here it takes CUDA's.
The caching allocator's segments are modeled by the analysis from these
allocations (analysis/allocators/caching_allocator.py).

What fake tensors cannot give: their values. Where the script asks for one
(`loss.item()`, `if found_nan.any()`), it gets a stand-in (stand_ins.py): what
it prints is not the model's. An op whose output's size depends on values
(`nonzero`) fails, and the script's line is said.

The run stops after the optimizer's steps asked for (StepsDone): from the
second step on, a step's memory repeats.
"""

from __future__ import annotations

import math
import sys
import time
import weakref
from collections.abc import Callable
from typing import Any

from tpumem.adapters.book_rows import OUTPUT, BookRows, shape_text
from tpumem.adapters.call_stacks import CallStacks
from tpumem.adapters.torch import fake_cuda
from tpumem.adapters.torch.stand_ins import StandIns
from tpumem.trace.cuda_blocks import block_size
from tpumem.trace.writer import TraceWriter

DEVICE = "GPU:0"
WORKSPACE = "workspace"  # the region of cuBLAS's workspace
# Where the made-up addresses begin: each storage gets its own range, never
# reused, so that a told row names one storage.
_FIRST_ADDRESS = 1 << 32
_ROWS_PER_WRITE = 20_000

# The matrix products that call cuBLAS on CUDA (aten's names).
MATMULS = frozenset(
    (
        "mm",
        "addmm",
        "bmm",
        "baddbmm",
        "addbmm",
        "mv",
        "addmv",
        "dot",
        "vdot",
        "_addmm_activation",
        "_scaled_mm",
        "_int_mm",
    )
)
# The products PyTorch may run through cuBLASLt (a bias added in the product).
LT_MATMULS = frozenset(("addmm", "_addmm_activation"))


class StepsDone(SystemExit):
    """Raised as the last optimizer step asked for ends: the run has shown its
    steps. A SystemExit of status 0, which an `except Exception` lets by."""

    def __init__(self, steps: int) -> None:
        super().__init__(0)
        self.steps = steps


class FakeRun:
    def __init__(
        self,
        torch: Any,
        writer: TraceWriter,
        stacks: CallStacks,
        gpu: str,
        workspace_bytes: tuple[int, int],
        guarded: Callable[[Callable[..., Any]], Callable[..., Any]],
    ) -> None:
        self.torch = torch
        self._writer = writer
        self._stacks = stacks
        self._gpu = gpu
        self._workspace_bytes, self._lt_workspace_bytes = workspace_bytes
        self._guarded = guarded
        self._rows = BookRows()
        from torch.utils.weak import WeakIdKeyDictionary

        self._storages: Any = WeakIdKeyDictionary()  # storage -> (address, bytes)
        self._refs: dict[int, weakref.ref] = {}  # buffer id -> the storage's weak reference
        self._next_id = 0
        self._next_address = _FIRST_ADDRESS
        self._workspaces: set[str] = set()  # the threads (as on CUDA) that have one
        self._origin = writer.start_time_ns
        self._last_ns = 0
        self.stand_ins = StandIns(torch)
        self.loaders = 0  # DataLoaders whose workers were made in the process
        from tpumem.adapters.base import Patches

        self.patches = Patches()

    def start(self) -> None:
        from torch._subclasses.fake_tensor import FakeTensorMode

        self.before_op = self._guarded(self._before_op)
        self.after_op = self._guarded(self._after_op)
        # (apart: a failure of one leaves the other's work done)
        self.values_after = self._guarded(self.stand_ins.after)
        fake = FakeTensorMode(allow_non_fake_inputs=True)
        fake.__enter__()
        mode = _allocations_mode(self.torch, self)
        mode.__enter__()  # (both stay entered for the process's life: the script's run)
        functional = self.torch.nn.functional
        attention = _attention_as_on_cuda(self.torch, functional.scaled_dot_product_attention)
        # (Where the script and torch's own modules look it up, PyTorch's
        # MultiheadAttention too: the module's global, read at each call.)
        self.patches.replace(functional, "scaled_dot_product_attention", attention)
        self._optimizers_as_on_cuda()
        self._loaders_in_process()
        fake_cuda.install(self.torch, self.patches, self._gpu)

    def _optimizers_as_on_cuda(self) -> None:
        """torch.optim's default implementation, chosen as for CUDA tensors:
        `foreach` (CPU tensors get the single-tensor one). Each optimizer's module
        holds the chooser by its own name."""
        torch = self.torch
        from torch.optim import optimizer

        chooser = optimizer._default_to_fused_or_foreach

        def as_on_cuda(params: Any, differentiable: bool, use_fused: bool = False) -> Any:
            fused, _ = chooser(params, differentiable, use_fused)
            if differentiable or torch.jit.is_scripting():
                return False, False
            return fused, not fused

        for name, module in list(sys.modules.items()):
            if (
                name.startswith("torch.optim")
                and getattr(module, "_default_to_fused_or_foreach", None) is chooser
            ):
                self.patches.replace(module, "_default_to_fused_or_foreach", as_on_cuda)

    def _loaders_in_process(self) -> None:
        """A DataLoader's workers made in the script's process: fake tensors do not
        cross processes (nor does their memory count on the GPU); nor pinned,
        which needs a GPU."""
        loader = self.torch.utils.data.DataLoader
        original = loader.__init__
        run = self

        def in_process(self: Any, *args: Any, **kwargs: Any) -> None:
            original(self, *args, **kwargs)
            if self.num_workers or self.pin_memory:
                run.loaders += 1
                self.num_workers, self.pin_memory = 0, False

        self.patches.replace(loader, "__init__", in_process)

    # -- allocations -------------------------------------------------------------

    def _now(self) -> int:
        """Trace time, never twice the same: an allocation and a free keep their order."""
        now = max(time.time_ns() - self._origin, self._last_ns + 1)
        self._last_ns = now
        return now

    def _before_op(self, name: str, frame: Any) -> None:
        if name in MATMULS:
            self._matmul(name, frame)

    def _after_op(self, name: str, out: Any, frame: Any) -> None:
        """The storages an op's outputs hold that no tensor held before: allocated."""
        torch = self.torch
        for value in out if isinstance(out, (tuple, list)) else (out,):
            if not isinstance(value, torch.Tensor):
                continue
            storage = value.untyped_storage()
            if storage in self._storages:
                continue
            size = storage.nbytes()
            if not size:  # (CUDA's allocator hands out nothing for none)
                continue
            self._allocate(
                size,
                (
                    name,
                    OUTPUT,
                    str(value.dtype).removeprefix("torch."),
                    shape_text(value.shape),
                    self._stacks(frame),
                ),
                storage,
            )

    def _allocate(self, size: int, label: tuple[Any, ...], storage: Any) -> None:
        buffer_id, address, block = self._next_id, self._next_address, block_size(size)
        self._next_id += 1
        self._next_address += block
        self._rows.alloc(self._now(), DEVICE, buffer_id, address, block, size, label)
        if storage is not None:
            self._storages[storage] = (address, size)
            self._refs[buffer_id] = weakref.ref(storage, self._on_free(buffer_id, address, block))
        if len(self._rows.made) >= _ROWS_PER_WRITE:
            self.write_rows()

    def _on_free(self, buffer_id: int, address: int, size: int) -> Callable[[Any], None]:
        """The callback for a storage's weak reference: its free, as it dies."""
        return lambda _: self._freed(buffer_id, address, size)

    def _freed(self, buffer_id: int, address: int, size: int) -> None:
        self._refs.pop(buffer_id, None)
        self._rows.free(self._now(), DEVICE, buffer_id, address, size)

    def _matmul(self, name: str, frame: Any) -> None:
        """cuBLAS's workspaces, where CUDA would allocate them: the first product
        of the script's thread and of autograd's backward, and their first addmm."""
        thread = "backward" if self.torch._C._current_autograd_node() is not None else "forward"
        if thread not in self._workspaces:
            self._workspaces.add(thread)
            self._workspace("cuBLAS workspace", self._workspace_bytes, frame)
        if name in LT_MATMULS and thread + " Lt" not in self._workspaces:
            self._workspaces.add(thread + " Lt")
            self._workspace("cuBLASLt workspace", self._lt_workspace_bytes, frame)

    def _workspace(self, name: str, size: int, frame: Any) -> None:
        """An allocation of region WORKSPACE: the region is its kind (kinds.py)."""
        if size > 0:
            self._allocate(size, (name, WORKSPACE, None, None, self._stacks(frame)), None)

    def storage(self, tensor: Any) -> tuple[int, int] | None:
        """(address, bytes) of the storage a fake tensor views, as recorded."""
        try:
            return self._storages.get(tensor.untyped_storage())
        except Exception:  # (no storage: a subclass, a sparse tensor)
            return None

    def write_rows(self) -> None:
        made = self._rows.take()
        if made:
            self._writer.write_columns(*self._rows.columns(made))


def _allocations_mode(torch: Any, run: FakeRun) -> Any:
    """The dispatch mode above the fake one: sees each aten op the script's
    calls come to (autograd's backward ops too), and its outputs."""
    from torch.utils._python_dispatch import TorchDispatchMode

    scalar = torch.ops.aten._local_scalar_dense.default

    class _Allocations(TorchDispatchMode):
        def __torch_dispatch__(
            self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None
        ) -> Any:
            if func is scalar:
                return run.stand_ins.value(args[0])
            name = func.overloadpacket.__name__
            frame = sys._getframe(1)
            run.before_op(name, frame)
            kwargs = fake_cuda.on_the_cpu(torch, kwargs or {})
            out = func(*args, **kwargs)
            run.after_op(name, out, frame)
            run.values_after(func, name, args, kwargs, out)
            return out

    return _Allocations()


def _attention_as_on_cuda(torch: Any, attention: Callable[..., Any]) -> Callable[..., Any]:
    """`scaled_dot_product_attention` with the kernel CUDA would choose for
    (batch, heads, length, dim) inputs: flash for half precision without a mask,
    else the memory-efficient one (a boolean mask given to it as the additive
    bias it takes, broadcast as a view). As it was elsewhere: other shapes, and
    grouped-query attention (which CUDA's flash takes in half precision without
    a mask: there the CPU's math path overstates the memory)."""
    flash = torch.ops.aten._scaled_dot_product_flash_attention.default
    efficient = torch.ops.aten._scaled_dot_product_efficient_attention.default
    half = (torch.float16, torch.bfloat16)

    def as_on_cuda(
        query: Any,
        key: Any,
        value: Any,
        attn_mask: Any = None,
        dropout_p: float = 0.0,
        is_causal: bool = False,
        scale: float | None = None,
        enable_gqa: bool = False,
    ) -> Any:
        def as_it_was() -> Any:
            return attention(
                query,
                key,
                value,
                attn_mask,
                dropout_p,
                is_causal,
                scale=scale,
                enable_gqa=enable_gqa,
            )

        shapes: list[Any] = [getattr(t, "shape", ()) for t in (query, key, value)]
        if enable_gqa or any(len(s) != 4 for s in shapes) or shapes[0][:2] != shapes[1][:2]:
            return as_it_was()
        try:
            if query.dtype in half and attn_mask is None:
                return flash(query, key, value, dropout_p, is_causal, False, scale=scale)[0]
            bias = attn_mask
            if bias is not None:
                if bias.dtype == torch.bool:
                    bias = torch.zeros_like(bias, dtype=query.dtype).masked_fill_(~bias, -math.inf)
                batch, heads, length, _ = shapes[0]
                bias = bias.expand(batch, heads, length, shapes[1][2])
            grad = torch.is_grad_enabled() and any(t.requires_grad for t in (query, key, value))
            return efficient(query, key, value, bias, grad, dropout_p, is_causal, scale=scale)[0]
        except Exception:  # (a case the kernel's own checks refuse: the CPU's path)
            return as_it_was()

    return as_on_cuda
