"""Prints the nccl-tests-style table of scripts/allreduce-bench from Google Benchmark JSON.

algbw = bytes per rank / median time; busbw = algbw * 2(n-1)/n; GB = 1e9 bytes.
"""
import json
import re
import sys
from collections import defaultdict
from statistics import median

times = defaultdict(list)  # (name, bytes) -> seconds of each repetition
wrong = defaultdict(float)
context = {}
for path in sys.argv[1:]:
    data = json.load(open(path))
    context = context or data["context"]
    for b in data["benchmarks"]:
        if b.get("run_type") != "iteration":
            continue
        m = re.match(r"(.+)/(\d+)/iterations", b["name"])
        name, size = m.group(1), int(m.group(2))
        unit = {"us": 1e-6, "ms": 1e-3, "ns": 1e-9, "s": 1.0}[b["time_unit"]]
        times[(name, size)].append(b["real_time"] * unit)
        wrong[(name, size)] = max(wrong[(name, size)], b.get("wrong", 0))


def bw(name, size, stat=median):
    t = times.get((name, size))
    return size / stat(t) / 1e9 if t else float("nan")


def bus(name, size, ranks):
    return bw(name, size) * 2 * (ranks - 1) / ranks


sizes = sorted({s for (_, s) in times})
print(f"# {context.get('host_name', '')}, {context.get('num_cpus')} CPUs, {context.get('date', '')}")
print("# median algbw (GB/s) over repetitions; busbw = algbw*2(n-1)/n; wrong = elements off in the check")
header = ("size", "memcpy", "fused2", "thr2 alg", "thr2 bus", "thr2/fused", "thr4 alg", "thr4 bus",
          "mpi raw", "MpiComm", "MpiC/raw", "unverif", "unv/raw", "thr2/mpi", "wrong")
print("| " + " | ".join(header) + " |")
print("|" + "---|" * len(header))
for s in sizes:
    label = f"{s >> 20} MiB" if s >= 1 << 20 else f"{s >> 10} KiB"
    row = [label, bw("Memcpy", s), bw("FusedSum/2", s), bw("ThreadCommunicator/2", s),
           bus("ThreadCommunicator/2", s, 2), bw("ThreadCommunicator/2", s) / bw("FusedSum/2", s),
           bw("ThreadCommunicator/4", s), bus("ThreadCommunicator/4", s, 4), bw("MPI_Allreduce", s),
           bw("MpiCommunicator", s), bw("MpiCommunicator", s) / bw("MPI_Allreduce", s),
           bw("MpiCommunicator/unverified", s), bw("MpiCommunicator/unverified", s) / bw("MPI_Allreduce", s),
           bw("ThreadCommunicator/2", s) / bw("MPI_Allreduce", s),
           int(sum(w for (n, z), w in wrong.items() if z == s))]
    print("| " + " | ".join(f"{v:.2f}" if isinstance(v, float) else str(v) for v in row) + " |")

# The spread behind the medians: algbw min-max over the repetitions, for the columns the targets compare.
spread_columns = ("FusedSum/2", "ThreadCommunicator/2", "MPI_Allreduce", "MpiCommunicator")
print("\n| size | " + " | ".join(f"{c} min–max" for c in spread_columns) + " |")
print("|" + "---|" * (len(spread_columns) + 1))
for s in sizes:
    label = f"{s >> 20} MiB" if s >= 1 << 20 else f"{s >> 10} KiB"
    cells = [f"{bw(c, s, max):.2f}–{bw(c, s, min):.2f}" if (c, s) in times else "—" for c in spread_columns]
    print(f"| {label} | " + " | ".join(cells) + " |")
