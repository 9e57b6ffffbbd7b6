"""Shipped YAML specs (kernelgen.specs)."""
