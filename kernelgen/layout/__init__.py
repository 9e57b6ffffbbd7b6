"""Page byte maps (pure), the quantizers in PyTorch, and torch page I/O (allocate, read, write, decode)."""
