#!/usr/bin/env python3
"""The BERT case study against PyTorch + transformers on this machine, side by side:

  throughput  strata_bert and torch_bert.py --mode throughput, alternating, `--rounds`
              times: training and inference sequences/s (median, min-max) and the ratios
  finetune    examples/bert_finetune and torch_bert.py --mode finetune, once each: the dev
              accuracy after every epoch

Run from the repository root with the anchors' virtual environment (benchmarks/anchors/run
makes it; this needs `transformers` in it too) after building the strata programs:

    cmake --build build --target strata_bert bert_finetune
    build/anchors/venv/bin/python benchmarks/anchors/bert.py throughput [--rounds 3] [--dtype fp32|bf16]
    build/anchors/venv/bin/python benchmarks/anchors/bert.py finetune [--epochs 3] [--dtype fp32|bf16]

--dtype bf16 runs strata's MixedPrecision (bf16 products where the CPU has AVX512_BF16)
against PyTorch under torch.autocast("cpu", dtype=torch.bfloat16).
"""
import argparse
import json
import os
import pathlib
import platform
import re
import statistics
import subprocess
import sys

from cpu_kind import cpu_kind

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]


def last_json(text):
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")][-1]


def run(command):
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(map(str, command))} failed:\n{done.stderr[-3000:]}")
    return done.stdout


def spread(values):
    return f"{statistics.median(values):,.1f} ({min(values):,.1f}-{max(values):,.1f})"


def throughput(args):
    strata = [str(ROOT / "build/benchmarks/strata_bert"), "--steps", str(args.steps), "--precision", args.dtype]
    torch = [sys.executable, str(HERE / "torch_bert.py"), "--mode", "throughput", "--steps", str(args.steps),
             "--threads", str(os.cpu_count()), "--dtype", args.dtype]
    results = {"strata": [], "torch": []}
    for r in range(args.rounds):
        for name, command in (("strata", strata), ("torch", torch)) if r % 2 == 0 else (("torch", torch), ("strata", strata)):
            results[name].append(last_json(run(command)))
            print(f"round {r + 1} {name}: {json.dumps(results[name][-1])}", flush=True)
    print(f"\nBERT case study throughput, {platform.processor() or platform.machine()}, {cpu_kind()}, "
          f"{os.cpu_count()} cores, {args.dtype}, {args.rounds} rounds, batch 32, length 64\n")
    print("| system | training sequences/s | inference sequences/s |")
    print("|---|---|---|")
    for name in ("strata", "torch"):
        rows = results[name]
        print(f"| {name} | {spread([x['train_sequences_per_s'] for x in rows])} | "
              f"{spread([x['inference_sequences_per_s'] for x in rows])} |")
    for key in ("train_sequences_per_s", "inference_sequences_per_s"):
        ratio = statistics.median(x[key] for x in results["strata"]) / statistics.median(x[key] for x in results["torch"])
        print(f"strata / torch, {key}: {ratio:.2f}x")
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(results, indent=1))


def finetune(args):
    out = run([str(ROOT / "build/examples/bert_finetune"), "--epochs", str(args.epochs), "--precision", args.dtype])
    strata = [float(x) for x in re.findall(r"epoch \d+: dev_accuracy=([0-9.]+)", out)]
    print("\n".join(line for line in out.splitlines() if not line.startswith("\r") and "ETA" not in line))
    torch_out = run([sys.executable, str(HERE / "torch_bert.py"), "--mode", "finetune", "--epochs", str(args.epochs),
                     "--threads", str(os.cpu_count()), "--dtype", args.dtype])
    torch_epochs = last_json(torch_out)["epochs"]
    strata_rates = [float(x) for x in re.findall(r"epoch \d+: dev_accuracy=[0-9.]+, ([0-9.]+) sequences/s", out)]
    print("| epoch | strata dev accuracy | PyTorch dev accuracy | strata sequences/s | PyTorch sequences/s |")
    print("|---|---|---|---|---|")
    for i, (a, b) in enumerate(zip(strata, torch_epochs)):
        rate = strata_rates[i] if i < len(strata_rates) else float("nan")
        print(f"| {i + 1} | {a:.4f} | {b['dev_accuracy']:.4f} | {rate:.1f} | {b['sequences_per_s']:.1f} |")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["throughput", "finetune"])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32")
    parser.add_argument("--json")
    args = parser.parse_args()
    throughput(args) if args.mode == "throughput" else finetune(args)


if __name__ == "__main__":
    main()
