"""Summarises build/benchmarks/overlap's JSON (--benchmark_format=json): median step times
with min-max, and the fraction of the all-reduce hidden behind backward:
hidden = (after_backward - overlapped) / all-reduce alone, each against the after_backward
of its own precision (`/mixed`: bf16 activations)."""
import json
import sys
from statistics import median

times = {}
for b in json.load(open(sys.argv[1]))["benchmarks"]:
    if b.get("run_type") == "iteration":
        times.setdefault(b["name"].replace("/real_time", ""), []).append(b["real_time"])
for name, t in sorted(times.items()):
    print(f"| {name} | {median(t):.2f} ms | {min(t):.2f}-{max(t):.2f} |")
comm = median(times["AllReduce/gradients"])
for name in sorted(n for n in times if n.startswith("Step/overlapped") or n.startswith("Step/inline")):
    mixed = "/mixed" in name  # against the after_backward of the same precision
    after = median(times["Step/after_backward" + ("/mixed" if mixed else "") + "/4194304"])
    print(f"hidden by {name}: {(after - median(times[name])) / comm:+.0%} of the all-reduce")
