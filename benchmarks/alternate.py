#!/usr/bin/env python3
"""Before/after on a shared, noisy machine: runs Google Benchmark programs in alternating
rounds (the order reversed every other round), so that both see the same minutes, and prints
the median and the minimum of every repetition per program and benchmark.

  benchmarks/alternate.py ROUNDS FILTER PROGRAM... [-- BENCHMARK_FLAGS...]

e.g. an old tree's build against this one:
  benchmarks/alternate.py 8 'Trainer/OneDevice' /tmp/old/build/benchmarks/step_benchmark_dnnl \\
      build/benchmarks/step_benchmark_dnnl
Default flags: --benchmark_min_time=0.5 --benchmark_repetitions=3.
"""
import collections
import json
import statistics
import subprocess
import sys


def main(argv):
    if len(argv) < 4:
        sys.exit(__doc__)
    flags = ['--benchmark_min_time=0.5', '--benchmark_repetitions=3']
    if '--' in argv:
        at = argv.index('--')
        argv, flags = argv[:at], argv[at + 1:]
    rounds, pattern, programs = int(argv[1]), argv[2], argv[3:]
    times = collections.defaultdict(list)
    for r in range(rounds):
        for program in programs if r % 2 == 0 else programs[::-1]:
            out = subprocess.run([program, f'--benchmark_filter={pattern}', '--benchmark_format=json', *flags],
                                 capture_output=True, text=True, check=True).stdout
            for b in json.loads(out)['benchmarks']:
                if b.get('run_type') == 'iteration':
                    times[(b['run_name'], program)].append(b['real_time'] * {'ns': 1e-6, 'us': 1e-3, 'ms': 1.0}[b['time_unit']])
    for (name, program), t in sorted(times.items()):
        print(f'{name:48s} {program:44s} median {statistics.median(t):8.3f} ms  min {min(t):8.3f}  n={len(t)}')


if __name__ == '__main__':
    main(sys.argv)
