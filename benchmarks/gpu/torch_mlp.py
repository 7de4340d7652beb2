#!/usr/bin/env python3
"""PyTorch eager on benchmarks/gpu_mlp.cpp's wide MLP, for the side-by-side in docs/gpu.md.

Same model (1024-8192-8192-8192-10, ReLU), same batch (8192), same optimizer (SGD, momentum
0.9), same per-step work as strata's Step case: a host batch goes to the GPU, then forward,
cross-entropy, backward, update, and the loss is read back. PyTorch eager's usual loop copies
the batch (already pinned) at the start of its step; strata's fit copies the next batch into
pinned memory and to the GPU during the step.
Prints one JSON object: the median step time and samples/s per precision.

    python3 benchmarks/gpu/torch_mlp.py [--steps 30] [--precisions fp32,tf32,bf16]
"""
import argparse
import json
import statistics
import time

import torch

BATCH = 8192
WIDTHS = [1024, 8192, 8192, 8192, 10]


def step_flops():
    total = 0.0
    for i in range(len(WIDTHS) - 1):
        mac = WIDTHS[i] * WIDTHS[i + 1] * BATCH
        total += 2.0 * mac * (2.0 if i == 0 else 3.0)
    return total


def run(precision, steps):
    torch.manual_seed(1)
    layers = []
    for i in range(len(WIDTHS) - 1):
        layers.append(torch.nn.Linear(WIDTHS[i], WIDTHS[i + 1]))
        if i + 2 < len(WIDTHS):
            layers.append(torch.nn.ReLU())
    model = torch.nn.Sequential(*layers).cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-4, momentum=0.9)
    torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
    x_host = (torch.rand(BATCH, WIDTHS[0]) - 0.5).pin_memory()
    y_host = torch.randint(0, 10, (BATCH,)).pin_memory()
    loss_fn = torch.nn.CrossEntropyLoss()

    def one_step():
        x = x_host.cuda(non_blocking=True)
        y = y_host.cuda(non_blocking=True)
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=precision == "bf16"):
            loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        return loss.item()  # strata reads its loss every step too

    for _ in range(3):
        one_step()
    torch.cuda.synchronize()
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        one_step()
        times.append(time.perf_counter() - start)
    median = statistics.median(times)
    return {"median_ms": median * 1e3, "min_ms": min(times) * 1e3, "max_ms": max(times) * 1e3,
            "samples_per_s": BATCH / median, "tflops": step_flops() / median / 1e12}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--precisions", default="fp32,tf32,bf16")
    args = parser.parse_args()
    result = {"torch": torch.__version__, "device": torch.cuda.get_device_name(0), "batch": BATCH, "widths": WIDTHS}
    for precision in args.precisions.split(","):
        result[precision] = run(precision, args.steps)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
