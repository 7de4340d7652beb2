"""torch's rate for the benchmarked step's eight GEMMs (batch 256), on one and on two threads:
the same shapes and transposes as benchmarks/step_benchmark's GemmOnly, each GEMM split over
the threads by torch. In float (MKL's sgemm) and in bf16 (bf16 tensors in and out: the
matmuls autocast runs, oneDNN inside the wheel).
Prints {"MKL (torch)/1": [GFLOP/s, ...], "MKL (torch)/2": [...], "torch bf16/1": [...], ...}."""
import argparse
import json
import time

import torch

import fashion

FLOPS = fashion.FLOPS_PER_SAMPLE * fashion.BATCH


def step(w1, w2, w3, x, h1, h2, d3):
    z1 = w1 @ x
    z2 = w2 @ h1
    z3 = w3 @ h2
    g3 = d3 @ h2.T
    d2 = w3.T @ d3
    g2 = d2 @ h1.T
    d1 = w2.T @ d2
    g1 = d1 @ x.T
    return z1, z2, z3, g1, g2, g3


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--repetitions", type=int, default=3)
    args = parser.parse_args()
    r = torch.randn
    floats = (r(1024, 784), r(1024, 1024), r(10, 1024), r(784, 256), r(1024, 256), r(1024, 256), r(10, 256))
    rates = {}
    for label, tensors in (("MKL (torch)", floats), ("torch bf16", tuple(t.bfloat16() for t in floats))):
        for threads in (1, 2):
            torch.set_num_threads(threads)
            step(*tensors)
            for _ in range(args.repetitions):
                start, n = time.perf_counter(), 0
                while time.perf_counter() - start < 0.5:
                    step(*tensors)
                    n += 1
                rates.setdefault(f"{label}/{threads}", []).append(FLOPS * n / (time.perf_counter() - start) / 1e9)
    print(json.dumps(rates))


if __name__ == "__main__":
    main()
