"""What the Keras and PyTorch anchors share: Debian's Fashion-MNIST files, the benchmarked
model's sizes and hyper-parameters, and the one JSON line every anchor prints."""

import gzip
import json
import resource

import numpy as np

DATA_DIR = "/usr/share/datasets/fashion-mnist"  # Debian's dataset-fashion-mnist
BATCH = 256  # global batch, all replicas together
MAX_STEPS = 60000 // BATCH  # full global batches in the training set
# Multiply-adds of one step per sample, times 2 (forward, weight gradients, input gradients
# but the first layer's), as benchmarks/mlp_step.hpp counts them.
FLOPS_PER_SAMPLE = 2.0 * (3.0 * (784 * 1024 + 1024 * 1024 + 1024 * 10) - 784 * 1024)
LR, MOMENTUM = 0.01, 0.9
SEED = 7


def load(split: str):
    """Images as float32 in [0, 1], shape (n, 784), and labels as int64, from the idx files."""
    prefix = "train" if split == "train" else "t10k"
    with gzip.open(f"{DATA_DIR}/{prefix}-images-idx3-ubyte.gz") as f:
        images = np.frombuffer(f.read(), dtype=np.uint8, offset=16)
    with gzip.open(f"{DATA_DIR}/{prefix}-labels-idx1-ubyte.gz") as f:
        labels = np.frombuffer(f.read(), dtype=np.uint8, offset=8)
    return (images.reshape(-1, 784).astype(np.float32) / 255.0), labels.astype(np.int64)


def training_set(steps: int):
    """Exactly `steps` full global batches of the training set: no partial last batch."""
    x, y = load("train")
    n = steps * BATCH
    if not 1 <= steps <= MAX_STEPS:
        raise SystemExit(f"--steps {steps} must be in [1, {MAX_STEPS}]")
    return x[:n], y[:n]


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux reports KiB


def report(system: str, version: str, samples: int, epoch_seconds, test_accuracy: float, **extra):
    print(json.dumps({"system": system, "version": version, "samples_per_epoch": samples,
                      "epoch_seconds": list(epoch_seconds), "test_accuracy": float(test_accuracy),
                      "peak_rss_mb": peak_rss_mb(), **extra}), flush=True)
