#!/usr/bin/env python3
"""PyTorch + transformers on the BERT case study, the same work as strata's: the same
all-MiniLM-L6-v2 files, the same polarity sentences and 80/20 split (strata's seeded,
stratified split, recomputed here bit for bit), maximum length 64 (padded), batch 32,
AdamW (lr 5e-5, weight decay 0.01 except biases and LayerNorm, epsilon 1e-6), linear
warm-up over 10% of the steps then linear decay to 0, BertForSequenceClassification
(BertModel, pooler, dropout 0.1, Linear(384, 2)). torch uses as many threads as cores given.

    torch_bert.py --mode finetune [--epochs 3]        dev accuracy after each epoch
    torch_bert.py --mode throughput [--steps 20]      training and inference sequences/s

Prints one JSON line per run.
"""
import argparse
import csv
import json
import os
import time

import torch
from transformers import BertForSequenceClassification, BertTokenizerFast, get_linear_schedule_with_warmup

MASK = (1 << 64) - 1


def mix64(x):
    x = (x + 0x9E3779B97F4A7C15) & MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK
    return x ^ (x >> 31)


def stratified_split(labels, dev_fraction, seed):
    """strata::data::stratified_split, the same indices."""
    train, dev = [], []
    for c in range(max(labels) + 1):
        members = [i for i, label in enumerate(labels) if label == c]
        counter = mix64(seed ^ mix64(c))  # strata::Rng(mix64(seed, c)): draws mix64(counter++)
        for i in range(len(members), 1, -1):
            r = mix64(counter)
            counter = (counter + 1) & MASK
            j = r % i
            members[i - 1], members[j] = members[j], members[i - 1]
        n_dev = int(len(members) * dev_fraction + 0.5)
        dev += members[:n_dev]
        train += members[n_dev:]
    return sorted(train), sorted(dev)


def load(model_dir, polarity, max_length):
    with open(polarity, encoding="utf-8-sig", newline="") as f:
        rows = list(csv.reader(f))
    texts = [r[1] for r in rows]
    labels = [0 if r[0] == "-1" else 1 for r in rows]
    train, dev = stratified_split(labels, 0.2, 2026)
    tokenizer = BertTokenizerFast.from_pretrained(model_dir)

    def encode(indices):
        batch = tokenizer([texts[i] for i in indices], padding="max_length", truncation=True, max_length=max_length,
                          return_tensors="pt")
        return batch["input_ids"], batch["attention_mask"], torch.tensor([labels[i] for i in indices])

    return encode(train), encode(dev), sum(dev)


def make_optimizer(model, lr, total_steps):
    no_decay = ("bias", "LayerNorm.weight")
    groups = [
        {"params": [p for n, p in model.named_parameters() if not any(k in n for k in no_decay)], "weight_decay": 0.01},
        {"params": [p for n, p in model.named_parameters() if any(k in n for k in no_decay)], "weight_decay": 0.0},
    ]
    optimizer = torch.optim.AdamW(groups, lr=lr, eps=1e-6)
    return optimizer, get_linear_schedule_with_warmup(optimizer, total_steps // 10, total_steps)


def train_step(model, data, take, optimizer, schedule, autocast):
    """One optimizer step on the samples `take` of `data`."""
    ids, mask, labels = data
    with autocast:
        loss = model(input_ids=ids[take], attention_mask=mask[take], labels=labels[take]).loss
    loss.backward()
    optimizer.step()
    schedule.step()
    optimizer.zero_grad()


def evaluate(model, data, batch):
    ids, mask, labels = data
    model.eval()
    correct = 0
    with torch.no_grad():
        for first in range(0, len(labels), batch):
            logits = model(input_ids=ids[first:first + batch], attention_mask=mask[first:first + batch]).logits
            correct += int((logits.argmax(-1) == labels[first:first + batch]).sum())
    return correct / len(labels)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--mode", choices=["finetune", "throughput"], required=True)
    parser.add_argument("--model", default="/usr/local/share/strata/all-minilm-l6-v2")
    parser.add_argument("--polarity", default="/usr/local/share/strata/sentence-polarity/polarity-en-pang&lee2.csv")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=5e-5)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(7)
    train, dev, dev_checksum = load(args.model, args.polarity, 64)
    model = BertForSequenceClassification.from_pretrained(args.model, num_labels=2, torch_dtype=torch.float32)
    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.dtype == "bf16")
    n, batch = len(train[2]), args.batch_size
    steps_per_epoch = (n + batch - 1) // batch
    result = {"system": "torch", "dtype": args.dtype, "threads": args.threads, "torch": torch.__version__,
              "train": n, "dev": len(dev[2]), "dev_index_sum": dev_checksum}

    if args.mode == "finetune":
        total = steps_per_epoch * args.epochs
        optimizer, schedule = make_optimizer(model, args.lr, total)
        generator = torch.Generator().manual_seed(7)
        result["epochs"] = []
        for epoch in range(args.epochs):
            model.train()
            order = torch.randperm(n, generator=generator)
            start = time.perf_counter()
            for first in range(0, n, batch):
                train_step(model, train, order[first:first + batch], optimizer, schedule, autocast)
            seconds = time.perf_counter() - start
            with autocast:
                accuracy = evaluate(model, dev, 64)
            result["epochs"].append({"seconds": seconds, "sequences_per_s": n / seconds, "dev_accuracy": accuracy})
            print(f"epoch {epoch + 1}: dev_accuracy={accuracy:.4f}, {n / seconds:.1f} sequences/s", flush=True)
    else:
        optimizer, schedule = make_optimizer(model, args.lr, args.steps + 1)
        model.train()
        times = []
        for step in range(args.steps + 2):  # the first two are warm-up
            start = time.perf_counter()
            train_step(model, train, torch.arange(step * batch, (step + 1) * batch) % n, optimizer, schedule, autocast)
            times.append(time.perf_counter() - start)
        times = sorted(times[2:])
        result["train_sequences_per_s"] = batch / times[len(times) // 2]
        model.eval()
        dev_ids, dev_mask, _ = dev
        infer = []
        with torch.no_grad(), autocast:
            for first in range(0, len(dev_ids), 64):
                start = time.perf_counter()
                model(input_ids=dev_ids[first:first + 64], attention_mask=dev_mask[first:first + 64])
                infer.append((min(64, len(dev_ids) - first), time.perf_counter() - start))
        infer = infer[1:]  # warm-up
        result["inference_sequences_per_s"] = sum(k for k, _ in infer) / sum(t for _, t in infer)
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
