"""Variant -> CUDA text (pure): launch geometry, the guard table, the strict Jinja render."""
