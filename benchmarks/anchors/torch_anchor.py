"""PyTorch's side of the anchor comparison: a plain training loop on the benchmarked MLP, in
one process, or DistributedDataParallel with gloo on `--world` processes (each takes its
share of every global batch, one thread each). The data is indexed from tensors in memory,
the fastest input path PyTorch has. Prints one JSON line per process (fashion.report).

    python torch_anchor.py [--world 1|2] [--rank R --port P] [--epochs 3] [--steps 234] [--autocast]

--autocast runs the forward pass and the loss under torch.autocast("cpu", dtype=torch.bfloat16):
PyTorch's mixed precision on the CPU (bf16 matrix products through oneDNN where the CPU has them).
"""

import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F

import fashion


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--world", type=int, default=1)
    parser.add_argument("--rank", type=int, default=0)
    parser.add_argument("--port", type=int, default=29517)
    parser.add_argument("--threads", type=int, default=0, help="intra-op threads; 0: cores / world")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--steps", type=int, default=fashion.MAX_STEPS)
    parser.add_argument("--label", default="")
    parser.add_argument("--autocast", action="store_true",
                        help='forward and loss under torch.autocast("cpu", dtype=torch.bfloat16)')
    args = parser.parse_args()

    torch.set_num_threads(args.threads or max(1, (os.cpu_count() or 1) // args.world))
    distributed = args.world > 1
    if distributed:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{args.port}", rank=args.rank,
                                world_size=args.world)
    if fashion.BATCH % args.world:
        raise SystemExit(f"--world {args.world} must divide the global batch {fashion.BATCH}")

    x, y = (torch.from_numpy(a) for a in fashion.training_set(args.steps))
    x_test, y_test = (torch.from_numpy(a) for a in fashion.load("test"))
    torch.manual_seed(fashion.SEED)  # same initial weights on every rank (DDP also broadcasts them)
    model = torch.nn.Sequential(torch.nn.Linear(784, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1024),
                                torch.nn.ReLU(), torch.nn.Linear(1024, 10))
    trained = torch.nn.parallel.DistributedDataParallel(model) if distributed else model
    optimizer = torch.optim.SGD(trained.parameters(), lr=fashion.LR, momentum=fashion.MOMENTUM)
    local = fashion.BATCH // args.world
    order = torch.Generator().manual_seed(fashion.SEED)  # same shuffle on every rank

    epoch_seconds = []
    for _ in range(args.epochs):
        start = time.perf_counter()
        permutation = torch.randperm(len(x), generator=order)
        loss_sum = torch.zeros(())
        correct = torch.zeros((), dtype=torch.int64)
        for step in range(args.steps):
            first = step * fashion.BATCH + args.rank * local
            index = permutation[first:first + local]
            inputs, labels = x[index], y[index]
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.autocast):
                logits = trained(inputs)
                loss = F.cross_entropy(logits, labels)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            with torch.no_grad():  # the running loss and accuracy every system reports
                loss_sum += loss.detach()
                correct += (logits.argmax(1) == labels).sum()
        if distributed:
            dist.barrier()
        epoch_seconds.append(time.perf_counter() - start)

    with torch.no_grad():
        accuracy = (model(x_test).argmax(1) == y_test).float().mean().item()
    name = args.label or (f"PyTorch DDP gloo, {args.world} processes" if distributed else "PyTorch, one process")
    if args.autocast and not args.label:
        name += ", autocast bf16"
    fashion.report(name, f"torch {torch.__version__}", len(x), epoch_seconds, accuracy, rank=args.rank,
                   world=args.world, threads=torch.get_num_threads())
    if distributed:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
