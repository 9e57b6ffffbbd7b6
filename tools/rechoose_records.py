"""Re-choose the routes of tuning records from their own timings, after a change of the choice rule
(kernelgen/tune/search.py: select). Nothing is re-timed: each record's stored timings are replayed
through this checkout's rule and the records whose routes change are rewritten in place.

    python tools/rechoose_records.py cache/nvidia-h200-sm90-132sms.json [--dry-run]
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

from kernelgen.codegen.launch import resolve
from kernelgen.spec.parse import shipped_variants
from kernelgen.tune import records
from kernelgen.tune.search import select


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("path", type=Path)
    ap.add_argument("--dry-run", action="store_true", help="print the changes, write nothing")
    args = ap.parse_args(argv)
    found = records.read_file(args.path)
    if found is None:
        print(f"rechoose: {args.path} is not a tuning record file", file=sys.stderr)
        return 2
    defaults = {v.name: resolve(v).launch for v in shipped_variants()}
    changed = []
    for record in found[1].values():
        if record.variant not in defaults:
            print(f"{record.variant}: not a shipped variant, left alone")
            continue
        choice = tuple(select(record.timings, record.buckets, defaults[record.variant]))
        if choice != record.choice:
            print(f"{record.variant}: {list(record.choice)} -> {list(choice)}")
            changed.append(replace(record, choice=choice))
    if not args.dry_run:
        for record in changed:
            records.write(args.path.parent, record)  # merges with itself: same timings, the new choice
    print(f"rechoose: {len(changed)} of {len(found[1])} records {'would change' if args.dry_run else 'rewritten'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
