"""PyTorch's CUDA memory snapshots (`torch.cuda.memory._dump_snapshot`) read into traces."""
