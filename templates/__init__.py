"""Jinja templates and CUDA headers, shipped as package data (kernelgen.templates)."""
