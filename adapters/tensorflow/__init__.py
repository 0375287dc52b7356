"""The TensorFlow adapter's package: adapter.py (the adapter),
allocator_stacks.py (call stacks for TF's allocator events), host_transfers.py
(host data in TF tensors) and framework.py (what tpumem knows of TensorFlow,
as plain data). Importing the package loads none of them, and never TensorFlow."""
