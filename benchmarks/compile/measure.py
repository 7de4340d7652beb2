#!/usr/bin/env python3
"""Compile-time benchmarks (issue 6, item 3), in the manner of Boost.Hana's: wall time and
peak memory of the compiler on generated translation units that instantiate

  baseline     nothing: strata.hpp included, an empty main
  config_1     one trainer configuration: Trainer<OneDevice>::fit on the MLP 784-1024-1024-10
  config_N     the first N of the 18 configurations of the matrix (N = 18: all of them):
               {OneDevice, Mirrored<2>, Mirrored<4>} x {FullPrecision, MixedPrecision,
               MixedPrecisionFp16} x {GradAccum<1>, GradAccum<4>}
  depth_N      Trainer<OneDevice>::fit on a Sequential of N layers (Dense<32, 32> and Relu alternating)

and prints one Markdown table (median, min-max over the repetitions, peak resident memory
from /usr/bin/time) and writes the raw figures as JSON for benchmarks/plots.py. Not part of CI.

  benchmarks/compile/measure.py [--reps 3] [--cxx g++] [--opt -O2] [--configs 1,6,18]
                                [--depths 10,50,200] [--json build/compile.json]
"""
import argparse
import datetime
import itertools
import json
import os
import pathlib
import statistics
import subprocess
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[2]

STRATEGIES = ["strata::OneDevice", "strata::Mirrored<2>", "strata::Mirrored<4>"]
PRECISIONS = ["strata::FullPrecision", "strata::MixedPrecision", "strata::MixedPrecisionFp16"]
ACCUMULATIONS = ["strata::GradAccum<1>", "strata::GradAccum<4>"]

PRELUDE = """#include <strata.hpp>
template <class Model, class... Policies>
void instantiate(strata::Dataset const& data) {
  Model model(1);
  strata::Trainer<Policies...> trainer;
  trainer.fit(model, strata::Sgd{.lr = 0.01f, .momentum = 0.9f}, strata::SoftmaxCrossEntropy{}, data, {.batch_size = 256});
}
using Mlp = strata::Sequential<strata::Dense<784, 1024>, strata::Relu, strata::Dense<1024, 1024>, strata::Relu,
                               strata::Dense<1024, 10>>;
"""


def unit(body, extra=""):
    return PRELUDE + extra + "int main() {\n  strata::Dataset data(strata::Matrix::Zero(784, 8), std::vector<std::int32_t>(8, 1));\n" + body + "}\n"


def units(configs, depths):
    out = {"baseline": PRELUDE + "int main() {}\n"}
    matrix = list(itertools.product(STRATEGIES, PRECISIONS, ACCUMULATIONS))
    for n in configs:
        out[f"config_{n}"] = unit("".join(f"  instantiate<Mlp, {s}, {p}, {a}>(data);\n" for s, p, a in matrix[:n]))
    for n in depths:
        layers = ", ".join(["strata::Dense<784, 32>"] + ["strata::Relu" if i % 2 else "strata::Dense<32, 32>"
                                                          for i in range(1, n - 1)] + ["strata::Dense<32, 10>"])
        out[f"depth_{n}"] = unit("  instantiate<Deep, strata::OneDevice>(data);\n",
                                 f"using Deep = strata::Sequential<{layers}>;\n")
    return out


def compile_once(cxx, opt, source, workdir):
    cmd = ["/usr/bin/time", "-f", "%e %M", cxx, "-std=c++20", opt, f"-I{ROOT / 'include'}", "-isystem",
           "/usr/include/eigen3", "-c", str(source), "-o", str(workdir / "unit.o")]
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"{source.name} did not compile:\n{result.stderr[-3000:]}")
    seconds, kilobytes = result.stderr.strip().splitlines()[-1].split()
    return float(seconds), int(kilobytes) / 1024.0


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--cxx", default="g++")
    parser.add_argument("--opt", default="-O2")
    parser.add_argument("--configs", default="1,18")
    parser.add_argument("--depths", default="10,50,200")
    parser.add_argument("--json", default=str(ROOT / "build" / "compile.json"))
    args = parser.parse_args()
    configs = [int(c) for c in args.configs.split(",")]
    depths = [int(d) for d in args.depths.split(",")]
    if not configs or min(configs) < 1 or max(configs) > 18:
        raise SystemExit(f"--configs {args.configs}: every count must be in [1, 18]")
    sources = units(configs, depths)
    times = {name: [] for name in sources}
    memory = {name: [] for name in sources}
    with tempfile.TemporaryDirectory() as tmp:
        workdir = pathlib.Path(tmp)
        for name, text in sources.items():
            (workdir / f"{name}.cpp").write_text(text)
        for rep in range(args.reps):  # interleaved: every unit once per round
            for name in sources:
                s, mb = compile_once(args.cxx, args.opt, workdir / f"{name}.cpp", workdir)
                times[name].append(s)
                memory[name].append(mb)
                print(f"# round {rep + 1}: {name} {s:.2f} s {mb:.0f} MB", flush=True)
    version = subprocess.run([args.cxx, "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    print(f"\n{version}, {args.opt}, {os.cpu_count()} cores ({cpu}), {args.reps} interleaved rounds\n")
    print("| unit | wall s, median (min–max) | peak memory, median |")
    print("|---|---|---|")
    median = {n: statistics.median(t) for n, t in times.items()}
    for name in sources:
        print(f"| `{name}` | {median[name]:.2f} ({min(times[name]):.2f}–{max(times[name]):.2f}) | "
              f"{statistics.median(memory[name]):.0f} MB |")
    print()
    for a, b in zip(configs, configs[1:]):
        per_config = (median[f"config_{b}"] - median[f"config_{a}"]) / (b - a)
        print(f"configurations {a} -> {b}: {per_config:.2f} s per extra configuration")
    print(f"first configuration over the bare include: {median[f'config_{configs[0]}'] - median['baseline']:.2f} s")
    for a, b in zip(depths, depths[1:]):
        slope = (median[f"depth_{b}"] - median[f"depth_{a}"]) / (b - a)
        print(f"depth {a} -> {b}: {slope * 1000:.1f} ms per extra layer")
    path = pathlib.Path(args.json)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"compiler": version, "opt": args.opt, "machine": f"{cpu}, {os.cpu_count()} cores",
                                "date": datetime.date.today().isoformat(), "reps": args.reps,
                                "seconds": times, "peak_mb": memory}, indent=1))
    print(f"raw figures: {path}")


if __name__ == "__main__":
    main()
