#!/usr/bin/env python3
"""The convolutional example against PyTorch: the model of TensorFlow's "Distributed training
with Keras" tutorial (Conv2D(32, 3x3), ReLU, MaxPool 2, Dense(5408, 64), ReLU, Dense(64, 10)),
Adam 1e-3, global batch 64, every epoch one pass over Debian's 60,000 Fashion-MNIST training
images followed by an evaluation of the 10,000 test images, as examples/fashion_mnist_cnn.cpp
does with Trainer<Mirrored<2>>. PyTorch runs the same in one process on all cores (its
intra-op threads), NCHW. The systems alternate, in a freshly shuffled order every round; an
epoch's time is training and evaluation, and the first epoch of every run is left out
(warm-up). Prints a Markdown table: the median epoch over the rounds, with min-max.

    build/anchors/venv/bin/python benchmarks/anchors/cnn.py [--rounds 3] [--epochs 3] [--precision fp32|bf16]

Needs `cmake --build build --target fashion_mnist_cnn` and torch in the venv that
benchmarks/anchors/run makes. Not part of CI.
"""
import argparse
import os
import pathlib
import random
import statistics
import subprocess
import sys
import time

import fashion

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "build" / "examples" / "fashion_mnist_cnn"
BATCH, LR = 64, 1e-3


def strata_run(epochs, precision):
    out = subprocess.run([str(EXAMPLE), "--epochs", str(epochs), "--precision", precision], check=True,
                         capture_output=True, text=True).stdout
    seconds = next(line for line in out.splitlines() if line.startswith("epoch_seconds="))
    accuracy = next(line for line in out.splitlines() if line.startswith("test_accuracy="))
    return [float(s) for s in seconds.split("=")[1].split(",")], float(accuracy.split("=")[1])


def torch_run(epochs, precision):
    out = subprocess.run([sys.executable, __file__, "--torch-child", "--epochs", str(epochs), "--precision", precision],
                         check=True, capture_output=True, text=True).stdout.splitlines()
    return [float(s) for s in out[-2].split(",")], float(out[-1])


def torch_child(epochs, precision):
    import torch
    import torch.nn.functional as F

    torch.set_num_threads(os.cpu_count() or 1)
    x, y = (torch.from_numpy(a) for a in fashion.load("train"))
    x_test, y_test = (torch.from_numpy(a) for a in fashion.load("test"))
    x, x_test = x.view(-1, 1, 28, 28), x_test.view(-1, 1, 28, 28)
    torch.manual_seed(fashion.SEED)
    model = torch.nn.Sequential(torch.nn.Conv2d(1, 32, 3), torch.nn.ReLU(), torch.nn.MaxPool2d(2), torch.nn.Flatten(),
                                torch.nn.Linear(5408, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
    optimizer = torch.optim.Adam(model.parameters(), lr=LR)
    order = torch.Generator().manual_seed(fashion.SEED)
    autocast = precision == "bf16"
    seconds = []
    for _ in range(epochs):
        start = time.perf_counter()
        permutation = torch.randperm(len(x), generator=order)
        for first in range(0, len(x), BATCH):
            index = permutation[first:first + BATCH]
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                loss = F.cross_entropy(model(x[index]), y[index])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            correct = sum((model(x_test[i:i + BATCH]).argmax(1) == y_test[i:i + BATCH]).sum().item()
                          for i in range(0, len(x_test), BATCH))
        seconds.append(time.perf_counter() - start)
    print(",".join(f"{s:.4f}" for s in seconds))
    print(correct / len(x_test))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    parser.add_argument("--torch-child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.torch_child:
        return torch_child(args.epochs, args.precision)
    if args.epochs < 2:
        raise SystemExit("--epochs must be at least 2: the first epoch of every run is left out")
    systems = {"strata Trainer<Mirrored<2>>": strata_run, "PyTorch, one process": torch_run}
    epochs = {name: [] for name in systems}
    accuracy = {name: [] for name in systems}
    for r in range(args.rounds):
        names = list(systems)
        random.shuffle(names)
        for name in names:
            seconds, acc = systems[name](args.epochs, args.precision)
            median = statistics.median(seconds[1:])
            epochs[name].append(median)
            accuracy[name].append(acc)
            print(f"round {r + 1}: {name}: {median:.3f} s an epoch ({seconds}), test accuracy {acc:.4f}",
                  file=sys.stderr, flush=True)
    print(f"| system ({args.precision}) | seconds an epoch, median (min-max) of {args.rounds} rounds | samples/s | test accuracy |")
    print("|---|---|---|---|")
    for name in systems:
        m = statistics.median(epochs[name])
        print(f"| {name} | {m:.3f} ({min(epochs[name]):.3f}-{max(epochs[name]):.3f}) | {60000 / m:,.0f} | "
              f"{statistics.median(accuracy[name]):.4f} |")
    ratio = statistics.median(epochs["PyTorch, one process"]) / statistics.median(epochs["strata Trainer<Mirrored<2>>"])
    print(f"\nstrata / PyTorch speed: {ratio:.2f}x")


if __name__ == "__main__":
    main()
