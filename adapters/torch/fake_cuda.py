"""`tpumem fit --gpu`'s run: what the script asks of CUDA, answered on the CPU's
fake tensors (fake_tensors.py), so that a script written for a GPU runs here.
Its own choice stays: `torch.cuda.is_available()` is False, so a script that
asks picks the CPU, and one that names CUDA outright gets the CPU for it:
- a factory's `device="cuda"` (and `with torch.device("cuda")`): the CPU (the
  dispatch mode rewrites the argument: `on_the_cpu`);
- `tensor.cuda()`, `tensor.to("cuda")`, `module.cuda()`, `module.to(device)`,
  `tensor.pin_memory()`: the tensor or module, on the CPU, as it is;
- `torch.autocast("cuda", dtype)` (and `torch.cuda.amp.autocast`): the CPU's
  autocast with that dtype (CUDA's default: float16), so that a mixed-precision
  step's activations are in half precision as on the GPU; the CPU's list of
  the ops it casts is PyTorch's for the CPU, close to CUDA's;
- `torch.cuda.synchronize()`: nothing to wait for; `set_device`, `current_device`
  and `get_device_name` answer as one GPU would; a GradScaler is on.
Every tensor is then counted as the GPU's, the host's too (a dataset held in
tensors): the report says so.
"""

from __future__ import annotations

from typing import Any

from tpumem.adapters.base import Patches

DEVICES = ("cpu", "cuda")  # (what a move names that is the CPU here)


def install(torch: Any, patches: Patches, gpu: str) -> None:
    """The patches, for a run as on `gpu` (its name, as the script may ask it)."""
    cpu = torch.device("cpu")
    parse = torch._C._nn._parse_to
    to = torch.Tensor.to

    def to_the_cpu(self: Any, *args: Any, **kwargs: Any) -> Any:
        # (`copy` is Tensor.to's own: PyTorch's parser of a move refuses it, as a
        # keyword or as the bool after non_blocking)
        rest = dict(kwargs)
        copy = bool(rest.pop("copy", False))
        moved = list(args)
        if len(moved) >= 3 and isinstance(moved[-1], bool) and isinstance(moved[-2], bool):
            copy = moved.pop()
        try:
            device, dtype, non_blocking, memory_format = parse(*moved, **rest)
        except Exception:  # (not a form PyTorch parses: its own error, from its own call)
            return to(self, *args, **kwargs)
        if device is None or device.type != "cuda":
            return to(self, *args, **kwargs)
        return to(
            self,
            cpu,
            dtype,
            non_blocking=non_blocking,
            copy=copy,
            memory_format=memory_format or torch.preserve_format,
        )

    def as_it_is(self: Any, *args: Any, **kwargs: Any) -> Any:
        return self

    module_to = torch.nn.Module.to

    def module_to_the_cpu(self: Any, *args: Any, **kwargs: Any) -> Any:
        # A move alone changes nothing here (every tensor is on the CPU), and
        # PyTorch's swap of a fake parameter a deep copy made fails (its weak
        # reference): a module moved to a device is itself.
        try:
            device, dtype, _, memory_format = parse(*args, **kwargs)
        except Exception:
            return module_to(self, *args, **kwargs)
        if dtype is None and memory_format is None and (device is None or device.type in DEVICES):
            return self
        return module_to(self, *args, **kwargs)

    swap = torch.utils.swap_tensors

    def swapped(first: Any, second: Any) -> None:
        # (A dtype change still swaps: where the weak reference refuses it, the
        # first takes the second's data, which is what Module._apply keeps.)
        try:
            swap(first, second)
        except RuntimeError:
            with torch.no_grad():
                first.data = second.data

    patches.replace(torch.nn.Module, "to", module_to_the_cpu)
    patches.replace(torch.nn.Module, "cuda", lambda self, device=None: self)
    patches.replace(torch.utils, "swap_tensors", swapped)
    patches.replace(torch.Tensor, "to", to_the_cpu)
    patches.replace(torch.Tensor, "cuda", as_it_is)
    patches.replace(torch.Tensor, "pin_memory", as_it_is)
    cuda = torch.cuda
    patches.replace(cuda, "synchronize", lambda device=None: None)
    patches.replace(cuda, "set_device", lambda device: None)
    patches.replace(cuda, "current_device", lambda: 0)
    patches.replace(cuda, "get_device_name", lambda device=None: gpu)
    # A GradScaler is on, as on a GPU (PyTorch turns it off where it finds none).
    import torch.cuda.amp.common as amp_common  # (the module torch.amp's GradScaler asks)

    patches.replace(amp_common, "amp_definitely_not_available", lambda: False)
    autocast = torch.amp.autocast_mode.autocast
    begin = autocast.__init__

    def on_the_cpu_for_cuda(
        self: Any, device_type: str, dtype: Any = None, *args: Any, **kwargs: Any
    ) -> None:
        if device_type == "cuda":
            device_type, dtype = "cpu", dtype or torch.float16
        begin(self, device_type, dtype, *args, **kwargs)

    patches.replace(autocast, "__init__", on_the_cpu_for_cuda)


def on_the_cpu(torch: Any, kwargs: dict) -> dict:
    """An op's keyword arguments with a CUDA device made the CPU."""
    device = kwargs.get("device")
    if device is None:
        return kwargs
    if isinstance(device, str | int):
        device = torch.device("cuda", device) if isinstance(device, int) else torch.device(device)
    if device.type != "cuda":
        return kwargs
    return {**kwargs, "device": torch.device("cpu")}
