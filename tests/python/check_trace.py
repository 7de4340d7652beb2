#!/usr/bin/env python3
"""Checks a strata trace file (TraceWriter) with Python's own JSON parser: the Chrome
trace-event structure Perfetto and chrome://tracing read, one process per worker, a track per
replica, every replica's forward/backward/update in every step, and (--collectives) each
replica's all-reduce track, and (--steps N) N steps on each worker: a window of the run
(FitOptions::profile_steps). Prints "trace ok: N workers" on success.

With --servers S, a Trainer<ParameterServer<W, S>> trace (--workers W): one process holding
the cluster, a track per worker whose every step has, per attempt, a pull, a forward and a
backward per micro-batch (one, or K under GradAccum<K>) and a push, and a track per server
that applies every step exactly once.

    check_trace.py trace.json --workers 2 --replicas 2 [--collectives] [--steps N]
    check_trace.py trace.json --workers 2 --servers 1 [--steps N]
"""
import argparse
import collections
import json
import sys


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("trace")
    parser.add_argument("--workers", type=int, required=True)
    parser.add_argument("--replicas", type=int)
    parser.add_argument("--servers", type=int)
    parser.add_argument("--collectives", action="store_true")
    parser.add_argument("--steps", type=int, help="the steps each worker must have")
    args = parser.parse_args()

    with open(args.trace) as f:
        trace = json.load(f)
    events = trace["traceEvents"]
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    processes = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    spans = [e for e in events if e["ph"] == "X"]
    problems = []
    if args.servers is not None:
        return check_cluster(args, threads, processes, spans)
    if args.replicas is None:
        parser.error("--replicas is required without --servers")
    if sorted(processes) != list(range(args.workers)):
        problems.append(f"processes {sorted(processes)}, expected workers 0..{args.workers - 1}")
    count = collections.Counter((e["pid"], e["tid"], e["name"]) for e in spans)
    steps = {w: count[(w, 0, "step")] for w in range(args.workers)}
    for w in range(args.workers):
        if steps[w] == 0:
            problems.append(f"worker {w} has no step spans")
        if args.steps is not None and steps[w] != args.steps:
            problems.append(f"worker {w} has {steps[w]} step spans, expected {args.steps}")
        for r in range(args.replicas):
            if threads.get((w, 1 + 2 * r)) != f"replica {r}":
                problems.append(f"worker {w} has no track for replica {r}")
            for phase in ("forward", "backward", "update"):
                if count[(w, 1 + 2 * r, phase)] != steps[w]:
                    problems.append(f"worker {w} replica {r}: {count[(w, 1 + 2 * r, phase)]} {phase} spans for {steps[w]} steps")
            if args.collectives:
                reduces = sum(n for (p, t, name), n in count.items() if p == w and t == 2 + 2 * r and name.startswith("all-reduce"))
                if reduces < steps[w]:
                    problems.append(f"worker {w} replica {r}: {reduces} all-reduce spans for {steps[w]} steps")
    return finish(problems, spans, f"trace ok: {args.workers} worker{'s' if args.workers != 1 else ''}, "
                                   f"{len(spans)} spans, {sum(steps.values())} steps")


def finish(problems, spans, ok):
    """Adds a span of negative time, if any, to the problems; prints them (or `ok`); the exit status."""
    negative = next((e for e in spans if e["dur"] < 0 or e["ts"] < 0), None)
    if negative:
        problems.append(f"negative time in {negative}")
    if problems:
        print("trace problems:\n  " + "\n  ".join(problems[:20]))
        return 1
    print(ok)
    return 0


def split_attempts(names):
    """The span count of each attempt when `names` is attempts of a pull, a forward and a
    backward per micro-batch (one, or K under GradAccum<K>) and a push; None otherwise."""
    counts, i = [], 0
    while i < len(names):
        start = i
        if names[i] != "pull":
            return None
        i += 1
        while i + 1 < len(names) and names[i] == "forward" and names[i + 1] == "backward":
            i += 2
        if i == start + 1 or i >= len(names) or names[i] != "push":
            return None
        i += 1
        counts.append(i - start)
    return counts or None


def check_cluster(args, threads, processes, spans):
    """A ParameterServer trace: workers' passes and servers' updates, by each span's step."""
    problems = []
    if list(processes.values()) != ["ParameterServer cluster"]:
        problems.append(f"processes {processes}, expected one ParameterServer cluster")
    passes = collections.defaultdict(list)  # step -> the worker spans of its attempts, in time order
    applied = collections.Counter()  # (server, step)
    for e in sorted(spans, key=lambda e: e["ts"]):
        if e["tid"] == 0:
            continue
        if e["name"] == "apply":
            applied[(e["tid"] - 1 - 2 * args.workers, e["args"]["step"])] += 1
        else:
            passes[e["args"]["step"]].append(e)
    for w in range(args.workers):
        if threads.get((0, 1 + 2 * w)) != f"worker {w}":
            problems.append(f"no track for worker {w}")
    for s in range(args.servers):
        if threads.get((0, 1 + 2 * args.workers + s)) != f"server {s}":
            problems.append(f"no track for server {s}")
    if args.steps is not None and len(passes) != args.steps:
        problems.append(f"{len(passes)} steps of worker spans, expected {args.steps}")
    for step, events in passes.items():
        names = [e["name"] for e in events]
        attempts = split_attempts(names)
        if attempts is None or len({e["tid"] for e in events}) != 1:
            problems.append(f"step {step}: worker spans {names} on tracks {sorted({e['tid'] for e in events})}")
        elif [e["args"]["attempt"] for e in events] != [a for a, n in enumerate(attempts) for _ in range(n)]:
            problems.append(f"step {step}: attempts numbered {[e['args']['attempt'] for e in events]}")
        for s in range(args.servers):
            if applied[(s, step)] != 1:
                problems.append(f"step {step}: server {s} applied it {applied[(s, step)]} times")
    return finish(problems, spans, f"trace ok: ParameterServer of {args.workers} worker{'s' if args.workers != 1 else ''} "
                                   f"and {args.servers} server{'s' if args.servers != 1 else ''}, {len(spans)} spans, "
                                   f"{len(passes)} steps")


if __name__ == "__main__":
    sys.exit(main())
