"""The PyTorch/XLA adapter's package: adapter.py (the adapter: op mode, sync
hook), tensor_book.py (materialized tensors' buffers), op_stacks.py (PyTorch's
own capture of an op's call stack), graph_ends.py (when a graph's run ends),
debug_log.py (PyTorch/XLA's graph analysis, read from its debug output),
optimizer_steps.py (torch.optim steps, run outside the op mode),
training_steps.py (its training steps) and framework.py (what tpumem knows of
PyTorch/XLA, as plain data). Importing the package loads none of them, and
never torch."""
