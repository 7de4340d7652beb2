#!/usr/bin/env python3
"""One Markdown row per benchmark of Google Benchmark JSON output (run with
--benchmark_format=json or --benchmark_out=FILE, and without
--benchmark_report_aggregates_only, so that every repetition is there): the median real
time per iteration in ms with its min-max over the repetitions, the same for each rate counter given, and the
number of repetitions. The machine, date and command go with the figures into
docs/benchmarks.md; the JSON holds the machine too (context).

    benchmarks/gbench_table.py FILE.json [--counters samples_per_second,...] [--filter REGEX]
                               [--against NAME]

--against NAME (a run name, e.g. GemmOnly/threads/2/0/real_time) adds, for every other
benchmark, NAME's time over its time: the ratio of the medians, and the median and quartiles
of the ratios round by round. With --benchmark_enable_random_interleaving, repetition i of
every benchmark runs in round i, so a round's ratio compares two runs made minutes apart at
most; their spread is the machine's noise at that scale. One file only.
"""
import argparse
import json
import re
import statistics


def spread(values, fmt):
    return f"{fmt(statistics.median(values))} ({fmt(min(values))}–{fmt(max(values))})"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("files", nargs="+")
    parser.add_argument("--counters", default="samples_per_second")
    parser.add_argument("--filter", default="")
    parser.add_argument("--against", default="")
    args = parser.parse_args()
    counters = [c for c in args.counters.split(",") if c]
    runs, unit, context = {}, {}, None
    for path in args.files:
        data = json.load(open(path))
        context = context or data["context"]
        for b in data["benchmarks"]:
            if b.get("run_type") != "iteration" or not re.search(args.filter, b["run_name"]):
                continue
            runs.setdefault(b["run_name"], []).append(b)
            unit[b["run_name"]] = b["time_unit"]
    print(f"<!-- {context.get('host_name', '')}, {context.get('num_cpus')} CPUs at {context.get('mhz_per_cpu')} MHz, "
          f"{context.get('date', '')} -->")
    header = ["benchmark", "real time per iteration, median (min–max)"] + [f"{c}, median (min–max)" for c in counters]
    print("| " + " | ".join(header + ["repetitions"]) + " |")
    print("|---" * (len(header) + 1) + "|")
    for name, reps in sorted(runs.items()):
        to_ms = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}[unit[name]]
        times = spread([r["real_time"] * to_ms for r in reps], lambda v: f"{v:,.2f}") + " ms"
        cells = [spread([r[c] for r in reps], lambda v: f"{v:,.0f}") if c in reps[0] else "—" for c in counters]
        print("| " + " | ".join([f"`{name}`", times] + cells + [str(len(reps))]) + " |")
    if args.against:
        print_ratios(runs, args.against)


def print_ratios(runs, against):
    if against not in runs:
        raise SystemExit(f"--against {against}: no such run; the runs are {', '.join(sorted(runs))}")
    reference = [r["real_time"] for r in runs[against]]
    print(f"\n| benchmark | `{against}` / it, medians | round by round: median (quartiles) | rounds |")
    print("|---|---|---|---|")
    for name, reps in sorted(runs.items()):
        if name == against:
            continue
        times = [r["real_time"] for r in reps]
        rounds = [a / b for a, b in zip(reference, times)]
        q = statistics.quantiles(rounds, n=4) if len(rounds) > 1 else [rounds[0]] * 3
        print(f"| `{name}` | {statistics.median(reference) / statistics.median(times):.3f} | "
              f"{q[1]:.3f} ({q[0]:.3f}–{q[2]:.3f}) | {len(rounds)} |")


if __name__ == "__main__":
    main()
