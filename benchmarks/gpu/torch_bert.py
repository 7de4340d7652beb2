#!/usr/bin/env python3
"""PyTorch eager on benchmarks/gpu_bert.cpp's model, for the side-by-side in docs/bert.md.

The same architecture and sizes, written with torch.nn so that the GPU machine needs no
`transformers`: word, position and token-type embeddings summed, LayerNorm (eps 1e-12),
dropout 0.1; six post-LN encoder layers (nn.TransformerEncoderLayer: hidden 384, 12 heads,
FFN 1536, exact GELU, dropout 0.1 on the attention probabilities and the hidden states; it
also drops after the GELU, which BERT does not: a little more work for PyTorch); a tanh
pooler on the first token, dropout 0.1 and a 2-class head. The same synthetic sequences
(lengths 8 to 64, padding masked), batch, AdamW, and one loss read back per step, as
strata's fit does. Inference runs in eval mode under torch.inference_mode(); in bf16 on a
bf16 copy of the model (autocast would turn off the encoder's fast path).

Prints one JSON object: per precision, training and inference sequences/s (median of three
timed epochs after a warm-up one). bf16 is torch.autocast(dtype=torch.bfloat16).

    python3 benchmarks/gpu/torch_bert.py [--samples 8192] [--batch-size 32] [--precisions fp32,bf16] [--device cuda]
"""
import argparse
import contextlib
import copy
import json
import statistics
import time

import torch

HIDDEN, HEADS, FFN, LAYERS, VOCAB, LENGTH = 384, 12, 1536, 6, 30522, 64


class MiniLM(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.word = torch.nn.Embedding(VOCAB, HIDDEN)
        self.position = torch.nn.Embedding(LENGTH, HIDDEN)
        self.segment = torch.nn.Embedding(2, HIDDEN)
        self.norm = torch.nn.LayerNorm(HIDDEN, eps=1e-12)
        self.dropout = torch.nn.Dropout(0.1)
        layer = torch.nn.TransformerEncoderLayer(HIDDEN, HEADS, FFN, dropout=0.1, activation="gelu",
                                                 layer_norm_eps=1e-12, batch_first=True, norm_first=False)
        self.encoder = torch.nn.TransformerEncoder(layer, LAYERS, enable_nested_tensor=True)
        self.pooler = torch.nn.Linear(HIDDEN, HIDDEN)
        self.head_dropout = torch.nn.Dropout(0.1)
        self.head = torch.nn.Linear(HIDDEN, 2)

    def forward(self, ids, padding):
        positions = torch.arange(ids.shape[1], device=ids.device)
        x = self.word(ids) + self.position(positions)[None] + self.segment.weight[0]
        x = self.dropout(self.norm(x))
        x = self.encoder(x, src_key_padding_mask=padding)
        return self.head(self.head_dropout(torch.tanh(self.pooler(x[:, 0]))))


def sequences(n):
    g = torch.Generator().manual_seed(11)
    lengths = torch.randint(8, LENGTH + 1, (n,), generator=g)
    ids = torch.randint(1000, 30000, (n, LENGTH), generator=g)
    ids[:, 0] = 101
    ids[torch.arange(n), lengths - 1] = 102
    padding = torch.arange(LENGTH)[None] >= lengths[:, None]
    ids[padding] = 0
    labels = torch.randint(0, 2, (n,), generator=g)
    return ids.pin_memory() if torch.cuda.is_available() else ids, padding, labels


def measure(precision, data, batch, device):
    torch.manual_seed(1)
    model = MiniLM().to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-5)
    ids, padding, labels = data
    n = ids.shape[0]
    autocast = (torch.autocast(device_type=device, dtype=torch.bfloat16) if precision == "bf16"
                else contextlib.nullcontext())
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    train_seconds, inference_seconds = [], []
    for round_ in range(4):  # round 0 warms up
        model.train()
        sync()
        start = time.perf_counter()
        for first in range(0, n, batch):
            x = ids[first:first + batch].to(device, non_blocking=True)
            mask = padding[first:first + batch].to(device, non_blocking=True)
            y = labels[first:first + batch].to(device, non_blocking=True)
            with autocast:
                loss = torch.nn.functional.cross_entropy(model(x, mask), y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            loss.item()
        sync()
        trained = time.perf_counter()
        # Inference in bf16 runs a bf16 copy of the model (PyTorch's usual way, and its
        # encoder's fast path, which does not run under autocast).
        inference = model if precision != "bf16" else copy.deepcopy(model).to(torch.bfloat16)
        inference.eval()
        sync()
        inferring = time.perf_counter()
        with torch.inference_mode():
            for first in range(0, n, batch):
                x = ids[first:first + batch].to(device, non_blocking=True)
                mask = padding[first:first + batch].to(device, non_blocking=True)
                inference(x, mask).float().sum().item()
        sync()
        evaluated = time.perf_counter()
        if round_ > 0:
            train_seconds.append(trained - start)
            inference_seconds.append(evaluated - inferring)
    return {"train_seq_per_s": n / statistics.median(train_seconds),
            "inference_seq_per_s": n / statistics.median(inference_seconds)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--samples", type=int, default=8192)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--precisions", default="fp32,bf16")
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args()
    data = sequences(args.samples)
    name = torch.cuda.get_device_name(0) if args.device == "cuda" else "cpu"
    result = {"device": name, "torch": torch.__version__, "samples": args.samples, "batch": args.batch_size,
              "length": LENGTH}
    for precision in args.precisions.split(","):
        result[precision] = measure(precision, data, args.batch_size, args.device)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
