"""What the Keras and PyTorch anchors share: Debian's Fashion-MNIST files, the benchmarked
model's sizes and hyper-parameters, and the one JSON line every anchor prints."""

import gzip
import json
import resource

import numpy as np

DATA_DIR = "/usr/share/datasets/fashion-mnist"  # Debian's dataset-fashion-mnist
BATCH = 256  # global batch, all replicas together
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
    if not 1 <= steps <= len(x) // BATCH:
        raise SystemExit(f"--steps {steps} must be in [1, {len(x) // BATCH}]")
    return x[:n], y[:n]


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux reports KiB


def report(system: str, version: str, samples: int, epoch_seconds, test_accuracy: float, **extra):
    print(json.dumps({"system": system, "version": version, "samples_per_epoch": samples,
                      "epoch_seconds": list(epoch_seconds), "test_accuracy": float(test_accuracy),
                      "peak_rss_mb": peak_rss_mb(), **extra}), flush=True)
