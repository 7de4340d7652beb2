#!/usr/bin/env python3
"""The scaling model of docs/multi_worker.md: the all-reduce of a step's gradients as
alpha + n*beta per ring step, fitted to strata's MpiCommunicator measured on this machine
(scripts/allreduce-bench's mpi.json, 2 processes), then predicted for 2..512 workers on 10,
25 and 100 Gb/s networks, with and without overlap.

    scaling_model.py MPI_JSON [--compute-ms 39.5] [--gradient-mb 7.45] [--batch-per-worker 128]
                              [--latency-us 10] [--hidden 0.5]

Ring all-reduce of n bytes over p workers (bandwidth-optimal; what NCCL and Open MPI use
for large messages): 2(p-1) steps, each moving n/p bytes and paying the per-message cost
alpha, so T(p) = 2(p-1)*alpha + 2(p-1)/p * n * beta. On this machine (p = 2, shared memory)
alpha is fitted to the small sizes and beta to the large ones. On a network beta is the
link's (1 / bandwidth) and alpha is this machine's software cost plus the wire's latency
(--latency-us, an assumption: a few microseconds with RDMA, tens with TCP).

Weak scaling: every worker trains --batch-per-worker samples per step (compute_ms, measured
with the other worker computing beside it), so ideal throughput grows with p.
  without overlap: step = compute + T(p)
  with overlap:    step = compute + max(0, T(p) - hidden * compute)
--hidden is the share of the compute the all-reduce can run under (backward after the
first bucket is ready); 0.5 is an assumption, not a measurement (see the doc).
"""
import argparse
import json
import statistics


def medians(path, family="MpiCommunicator"):
    """bytes -> median seconds of strata's verified MpiCommunicator all-reduce."""
    runs = {}
    for b in json.load(open(path))["benchmarks"]:
        parts = b["name"].split("/")
        if b.get("run_type") != "iteration" or parts[0] != family or "unverified" in b["name"]:
            continue
        scale = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}[b["time_unit"]]
        runs.setdefault(int(parts[1]), []).append(b["real_time"] * scale)
    return {n: statistics.median(t) for n, t in sorted(runs.items())}


def fit_line(points):
    """Least squares t = a + b*n."""
    xs, ys = zip(*points)
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    b = sum((x - mx) * (y - my) for x, y in points) / sum((x - mx) ** 2 for x in xs)
    return my - b * mx, b


def ring(p, n, alpha, beta):
    return 2 * (p - 1) * alpha + 2 * (p - 1) / p * n * beta


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("mpi_json")
    parser.add_argument("--compute-ms", type=float, default=39.5)
    parser.add_argument("--gradient-mb", type=float, default=7.45)
    parser.add_argument("--batch-per-worker", type=int, default=128)
    parser.add_argument("--latency-us", type=float, default=10.0)
    parser.add_argument("--hidden", type=float, default=0.5)
    args = parser.parse_args()

    t = medians(args.mpi_json)
    small = [(n, s) for n, s in t.items() if n <= 64 << 10]
    large = [(n, s) for n, s in t.items() if n >= 16 << 20]
    a, _ = fit_line(small)
    _, beta_here = fit_line(large)
    alpha_here = a / 2  # p = 2: two ring steps
    n = args.gradient_mb * 1e6
    compute = args.compute_ms / 1e3
    print(f"fitted on this machine (2 processes, shared memory): alpha = {alpha_here * 1e6:.2f} us per message, "
          f"beta = {beta_here * 1e9:.3f} ns/byte ({1 / beta_here / 1e9:.2f} GB/s)")
    print(f"predicted all-reduce of {args.gradient_mb} MB here: {ring(2, n, alpha_here, beta_here) * 1e3:.2f} ms\n")

    alpha = alpha_here + args.latency_us * 1e-6
    print(f"on a network: alpha = {alpha * 1e6:.1f} us ({alpha_here * 1e6:.1f} measured + {args.latency_us:g} assumed "
          f"latency), beta = 1 / link bandwidth; compute {args.compute_ms} ms per step of {args.batch_per_worker} "
          f"samples per worker; overlap hides up to {args.hidden:.0%} of the compute\n")
    print("| workers | network | all-reduce | step, no overlap | efficiency | step, overlap | efficiency | samples/s (overlap) |")
    print("|---|---|---|---|---|---|---|---|")
    for gbit in (10, 25, 100):
        beta = 8 / (gbit * 1e9)
        for p in (2, 8, 32, 128, 512):
            ar = ring(p, n, alpha, beta)
            plain = compute + ar
            hidden = compute + max(0.0, ar - args.hidden * compute)
            print(f"| {p} | {gbit} Gb/s | {ar * 1e3:.1f} ms | {plain * 1e3:.1f} ms | {compute / plain:.0%} | "
                  f"{hidden * 1e3:.1f} ms | {compute / hidden:.0%} | {p * args.batch_per_worker / hidden:,.0f} |")


if __name__ == "__main__":
    main()
