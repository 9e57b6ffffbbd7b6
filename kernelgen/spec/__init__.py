"""YAML specs -> frozen, typed Variants (pure): parsing with file:line:col errors, the variant model."""
