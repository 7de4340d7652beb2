#!/usr/bin/env python3
"""Reads scripts/gpu-profile's Nsight Compute CSV: kernels grouped by name (launches, total
and mean duration), largest total first, and the sum over all recorded kernels.

Usage: scripts/gpu-profile-summary.py FILE.csv [--top N]
"""
import csv
import sys
from collections import defaultdict


def main() -> None:
    path = sys.argv[1]
    top = int(sys.argv[sys.argv.index("--top") + 1]) if "--top" in sys.argv else 25
    with open(path, newline="") as f:
        rows = [line for line in f if line.startswith('"')]
    reader = csv.DictReader(rows)
    groups = defaultdict(lambda: [0, 0.0])
    total, launches = 0.0, 0
    unit = None
    for row in reader:
        value = row.get("gpu__time_duration.sum", "")
        if not value or not value.replace(".", "").replace(",", "").isdigit():
            unit = unit or value  # the units row
            continue
        ns = float(value.replace(",", ""))
        if unit in ("usecond", "us"):
            ns *= 1e3
        elif unit in ("msecond", "ms"):
            ns *= 1e6
        name = row["Kernel Name"][:90]
        groups[name][0] += 1
        groups[name][1] += ns
        total += ns
        launches += 1
    print(f"{path}: {launches} kernels, {total / 1e6:.3f} ms in all")
    print(f"{'launches':>8} {'total ms':>9} {'mean us':>8}  kernel")
    for name, (n, ns) in sorted(groups.items(), key=lambda kv: -kv[1][1])[:top]:
        print(f"{n:>8} {ns / 1e6:>9.3f} {ns / n / 1e3:>8.1f}  {name}")


if __name__ == "__main__":
    main()
