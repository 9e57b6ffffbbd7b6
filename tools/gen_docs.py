"""Regenerate docs/layouts.md from the layout code (a test fails when it is out of date)."""
from __future__ import annotations

from pathlib import Path

from kernelgen.layout.doc import layouts_markdown
from kernelgen.spec.parse import shipped_variants

TARGET = Path(__file__).resolve().parents[1] / "docs" / "layouts.md"

if __name__ == "__main__":
    TARGET.write_text(layouts_markdown(shipped_variants()))
    print(f"wrote {TARGET}")
