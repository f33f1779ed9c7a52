#!/usr/bin/env python3
"""What nansense's per-batch coordination costs a 2-rank DDP run (Gloo, CPU,
loopback), as ratios to a plain DDP step measured in the same run:

  detached   nansense.start() on every rank, detached, checks off         target <= 1.01
  guard      the same with the numerical checks (guard) on                 target <= 1.03
  served     the guard on, rank 0 serving its UI, live updates off         target <= 1.03
  live       the same with the default live updates (a capture every 2 s)  (no target)

In the first two nothing can stop rank 0 inside a batch (no checks, or no UI
a trip could pause for), so rank 0 lets the followers past each boundary a
batch ahead: a store key from rank 0 per batch, fetched by a thread, none
from the followers unless they have news. Served with the guard on, a NaN
could pause rank 0 until its batch's backward is checked; once it is
checked clean, rank 0 sends the next boundary's decision (while the
followers make their optimizer step), so they again pass without waiting.
"live" adds what a served session costs in any run, distributed or not: a
snapshot captured every 2 seconds for the UI (bench/stats measures it alone).

The guard's own work is no coordination: on a DDP rank, one |g| sum of every
gradient as the rank computed them and one of the averaged gradients, after
each backward. Each rank measures it first without a process group, the
same model single-process (plain vs guard on with the second check, as a
DDP rank runs it, interleaved; the one-check figure beside it), and the
figure is printed as a share of the DDP step, beside the ratios. The model: an MLP
512-1024-1024-10, 64 samples per rank, one thread per rank (a
parameter-heavy step: the worst case for the guard).

    PYTHONPATH=build/python .venv/bin/python bench/python/ddp.py [--batches 200] [--rounds 9]

Variants run interleaved, round after round; each ratio is the median of
the per-round ratios (rank 0's wall time) to the plain loop of the same round.
"""

import argparse
import os
import socket
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

import nansense


def make_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1024),
                               torch.nn.ReLU(), torch.nn.Linear(1024, 10))


def train(rank, batches, debug=None, served=False, live=True, distributed=True, twice=False):
    model = make_model()
    ddp = torch.nn.parallel.DistributedDataParallel(model) if distributed else model
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.01, momentum=0.9)
    session = None
    loop = batches
    if debug is not None:
        session = nansense.start(ddp, optimizer=optimizer, port=0 if served and rank == 0 else None,
                                 open_browser=False)
        session.set_debug_settings(debug)
        if twice:
            session._engine.check_after_reduction(True)  # what every DDP rank runs
        if not live:
            session.set_update_frequency(unit="epoch", n=1000)  # never within the run
        session.detach()
        loop = session.batches(batches, phase="train")
    if distributed:
        dist.barrier()
    start = time.perf_counter()
    for x, y in loop:
        optimizer.zero_grad()
        F.cross_entropy(ddp(x), y).backward()
        optimizer.step()
    elapsed = time.perf_counter() - start
    if session:
        session.close()
    return elapsed


def worker(rank, world, port, args, out):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(rank)
    batches = [(torch.randn(64, 512, generator=g), torch.randint(0, 10, (64,), generator=g))
               for _ in range(args.batches)]
    # The guard's own cost, every rank at once (the load of the DDP run),
    # before there is a process group: no coordination at all.
    train(rank, batches[:5], distributed=False)
    single = {"plain": [], "guard": [], "twice": []}
    for _ in range(args.rounds):
        single["plain"].append(train(rank, batches, distributed=False))
        single["guard"].append(train(rank, batches, nansense.DebugSettings(), distributed=False))
        single["twice"].append(train(rank, batches, nansense.DebugSettings(), distributed=False, twice=True))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    variants = {"detached": (nansense.DebugSettings(enabled=False), False, True),
                "guard": (nansense.DebugSettings(), False, True), "served": (nansense.DebugSettings(), True, False),
                "live": (nansense.DebugSettings(), True, True)}
    train(rank, batches[:5])  # warm-up
    ratios = {name: [] for name in variants}
    plain_times = []
    for _ in range(args.rounds):
        plain = train(rank, batches)
        plain_times.append(plain)
        for name, (debug, served, live) in variants.items():
            ratios[name].append(train(rank, batches, debug, served, live) / plain)
    if rank == 0:
        out.put((ratios, plain_times, single))
    dist.destroy_process_group()


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--batches", type=int, default=200)
    p.add_argument("--rounds", type=int, default=9)
    args = p.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    out = ctx.SimpleQueue()
    mp.start_processes(worker, args=(2, port, args, out), nprocs=2, start_method="spawn")
    ratios, plain_times, single = out.get()
    step_ms = statistics.median(plain_times) / args.batches * 1e3
    def own_ms(kind):
        return statistics.median(g - p for g, p in zip(single[kind], single["plain"])) / args.batches * 1e3
    once_ms, guard_ms = own_ms("guard"), own_ms("twice")
    print(f"ddp coordination: 2 ranks (Gloo, CPU), MLP 512-1024-1024-10, 64 samples per rank, 1 thread per rank, "
          f"{args.batches} batches x {args.rounds} rounds; a plain DDP step takes {step_ms:.2f} ms; the guard's own "
          f"work (single-process, no coordination) as a DDP rank runs it (its own and the averaged gradients) "
          f"{guard_ms:.2f} ms a batch = {guard_ms / step_ms:.3f} of the DDP step (one check: {once_ms:.2f} ms)")
    for name, values in ratios.items():
        target = {"detached": "target <= 1.01", "guard": "target <= 1.03", "served": "target <= 1.03",
                  "live": "plus live updates every 2 s"}[name]
        own = "" if name == "detached" else f"; less the guard's own work {statistics.median(values) - guard_ms / step_ms:.3f}"
        print(f"  {name:<9} {statistics.median(values):.3f}  (range {min(values):.3f}..{max(values):.3f}; "
              f"{target}{own})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
