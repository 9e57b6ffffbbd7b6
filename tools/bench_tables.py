"""Markdown tables from `kernelgen bench --json` files: one row per variant, us / TB/s / % of roofline per N.

    python tools/bench_tables.py tools/results/h200_bench_*_prefill.json tools/results/h200_bench_*_decode.json"""
from __future__ import annotations

import json
import sys


def table(path: str) -> str:
    data = json.load(open(path))
    rows: dict[str, dict[int, dict]] = {}
    for r in data["rows"]:
        rows.setdefault(r["variant"], {})[r["tokens"]] = r
    tokens = sorted({t for v in rows.values() for t in v})
    head = (f"### {data['workload']} on {data['gpu']} (copy roofline {data['roofline_gbs']:.0f} GB/s, empty kernel "
            f"{data['floor_us']:.2f} us): us / TB/s / % of roofline\n\n")
    lines = ["| variant | " + " | ".join(f"N={t}" for t in tokens) + " |", "|---|" + "---|" * len(tokens)]
    for name, by_n in rows.items():
        cells = [f"{by_n[t]['us']:.2f} / {by_n[t]['tbps']:.2f} / {by_n[t]['roofline_pct']:.0f}%" if t in by_n else "-"
                 for t in tokens]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return head + "\n".join(lines) + "\n"


if __name__ == "__main__":
    print("\n".join(table(p) for p in sys.argv[1:]))
