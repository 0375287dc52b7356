"""The TensorFlow adapter's package: adapter.py (the adapter),
allocator_stacks.py (call stacks for TF's allocator events), host_transfers.py
(host data in TF tensors) and memory_settings.py (how TF's allocator is set, as
plain data). Importing the package loads none of them, and never TensorFlow."""
