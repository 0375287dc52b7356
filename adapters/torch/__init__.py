"""The plain PyTorch adapter (adapter.py): every allocation of PyTorch's CPU
allocator, from its profiler's memory events, with the user's line that made it
and its kind from PyTorch's own objects (modules, optimizers)."""
