#!/usr/bin/env python3
"""Compile-time benchmarks (issue 6, item 3), in the manner of Boost.Hana's: wall time and
peak memory of the compiler on generated translation units that instantiate

  baseline     nothing: strata.hpp included, an empty main
  config_1     one trainer configuration: Trainer<OneDevice>::fit on the MLP 784-1024-1024-10
  config_18    all 18 of the configuration matrix: {OneDevice, Mirrored<2>, Mirrored<4>} x
               {FullPrecision, MixedPrecision, MixedPrecisionFp16} x {GradAccum<1>, GradAccum<4>}
  depth_N      Trainer<OneDevice>::fit on a Sequential of N layers (Dense<32, 32> and Relu alternating)

and prints one Markdown table (median, min-max over the repetitions, peak resident memory
from /usr/bin/time). Not part of CI.

  benchmarks/compile/measure.py [--reps 3] [--cxx g++] [--opt -O2] [--depths 10,50,200]
"""
import argparse
import itertools
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


def units(depths):
    out = {"baseline": PRELUDE + "int main() {}\n"}
    out["config_1"] = unit("  instantiate<Mlp, strata::OneDevice>(data);\n")
    matrix = itertools.product(STRATEGIES, PRECISIONS, ACCUMULATIONS)
    out["config_18"] = unit("".join(f"  instantiate<Mlp, {s}, {p}, {a}>(data);\n" for s, p, a in matrix))
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
    parser.add_argument("--depths", default="10,50,200")
    args = parser.parse_args()
    depths = [int(d) for d in args.depths.split(",")]
    sources = units(depths)
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
    per_config = (median["config_18"] - median["config_1"]) / 17
    print(f"\nmarginal cost of one more configuration: ({median['config_18']:.2f} - {median['config_1']:.2f}) / 17 "
          f"= {per_config:.2f} s")
    print(f"one configuration over the bare include: {median['config_1'] - median['baseline']:.2f} s")
    for a, b in zip(depths, depths[1:]):
        slope = (median[f"depth_{b}"] - median[f"depth_{a}"]) / (b - a)
        print(f"depth {a} -> {b}: {slope * 1000:.1f} ms per extra layer")


if __name__ == "__main__":
    main()
