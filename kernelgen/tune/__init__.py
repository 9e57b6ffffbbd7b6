"""Autotuning: the search space (pure), bucket search and merging (pure), the record store, the GPU runner."""
