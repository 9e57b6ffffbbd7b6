"""Markdown tables from `kernelgen bench --json` files: one row per variant, us / TB/s / % of roofline per N.

    python tools/bench_tables.py .device_run/bench_*_prefill.json .device_run/bench_*_decode.json

`tools/evidence.py` puts the same tables into `evidence/<gpu>.md`."""
from __future__ import annotations

import json
import sys


def table_of(data: dict) -> str:
    """The table of one bench JSON's contents (`kernelgen bench --json`: `workload`, `gpu`, `roofline_gbs`,
    `floor_us` and `rows` of `variant`, `tokens`, `us`, `tbps`, `roofline_pct`)."""
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


def table(path: str) -> str:
    with open(path) as f:
        return table_of(json.load(f))


if __name__ == "__main__":
    print("\n".join(table(p) for p in sys.argv[1:]))
