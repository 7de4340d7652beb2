#!/usr/bin/env python3
"""Renders benchmark figures to PNG under docs/img/ (shown in docs/benchmarks.md):

  --anchors FILE   anchors.py's JSON -> docs/img/anchors.png: samples/s of every system,
                   median with min-max whiskers, and the two-thread GEMM bound of the step
  --compile FILE   compile/measure.py's JSON -> docs/img/compile-time.png: compile time
                   against the number of configurations and against model depth

Needs matplotlib (benchmarks/anchors/run installs it in its virtual environment).
"""
import argparse
import json
import pathlib
import re
import statistics

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]


def anchors(path, out):
    data = json.loads(pathlib.Path(path).read_text())
    rows = sorted(data["systems"], key=lambda r: r["median"])
    labels = [r["system"] for r in rows]
    medians = [r["median"] for r in rows]
    low = [r["median"] - min(r["samples_per_second"]) for r in rows]
    high = [max(r["samples_per_second"]) - r["median"] for r in rows]
    colors = ["tab:blue" if r["name"].startswith("strata") else "tab:gray" for r in rows]
    best = data["gemm_best_two_thread"]  # the fastest engine's two-thread rate, e.g. "OpenBLAS/2"
    bound = statistics.median(data["gemm_gflops"][best]) * 1e9 / data["flops_per_sample"]

    fig, ax = plt.subplots(figsize=(9, 0.55 * len(rows) + 1.6))
    ax.barh(labels, medians, xerr=[low, high], color=colors, capsize=3)
    ax.axvline(bound, color="tab:red", linestyle="--", label=f"the step's GEMMs alone, two threads, {best.split('/')[0]} ({bound:,.0f} samples/s)")
    for y, (m, h) in enumerate(zip(medians, high)):
        ax.text(m + h, y, f"  {m:,.0f}", va="center", ha="left", fontsize=8)
    ax.set_xlabel("samples/s (median of rounds, min-max whiskers)")
    ax.set_title(f"MLP 784-1024-1024-10, batch 256, Fashion-MNIST\n{data['machine'].split(',')[0]}, "
                 f"{data['date']}", fontsize=10)
    ax.set_xlim(0, max(bound, max(m + h for m, h in zip(medians, high))) * 1.18)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print(f"wrote {out}")


def compile_time(path, out):
    data = json.loads(pathlib.Path(path).read_text())
    seconds = data["seconds"]

    def series(prefix):
        points = sorted((int(re.sub(r"\D", "", name)), values) for name, values in seconds.items()
                        if name.startswith(prefix))
        xs = [x for x, _ in points]
        return xs, [statistics.median(v) for _, v in points], [min(v) for _, v in points], [max(v) for _, v in points]

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for ax, prefix, xlabel in ((axes[0], "config_", "trainer configurations in one translation unit"),
                               (axes[1], "depth_", "layers in the Sequential")):
        xs, med, lo, hi = series(prefix)
        ax.plot(xs, med, "o-", color="tab:blue", label="median")
        ax.fill_between(xs, lo, hi, color="tab:blue", alpha=0.2, label="min-max")
        ax.axhline(statistics.median(seconds["baseline"]), color="gray", linestyle=":", label="bare #include")
        ax.set_xlabel(xlabel)
        ax.set_ylabel("wall seconds")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"{data['compiler'].split(' (')[0]} {data['opt']}, {data['machine'].split(',')[0]}, {data['date']}",
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print(f"wrote {out}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--anchors")
    parser.add_argument("--compile")
    parser.add_argument("--out", default=str(ROOT / "docs" / "img"))
    args = parser.parse_args()
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.anchors:
        anchors(args.anchors, out / "anchors.png")
    if args.compile:
        compile_time(args.compile, out / "compile-time.png")
    if not (args.anchors or args.compile):
        parser.error("give --anchors FILE and/or --compile FILE")


if __name__ == "__main__":
    main()
