"""The allocators' models: BFC's (its bins, chunks and regions) and PyTorch's CUDA
caching allocator, replayed over a run's events; and what a capacity would hold."""
