#!/usr/bin/env python3
"""On a CUDA device: what the guard's one device->host copy a batch costs,
as ratios to a plain CUDA loop that never syncs and to one that reads
loss.item() every batch (what most loops do to log), and the same for an
fp16 loop with a GradScaler and a torch.compile'd loop. One model (an MLP of
4096-wide layers, batch 256), rounds interleaved; each ratio is the median
of the per-round ratios to the never-syncing loop of the same round.

    PYTHONPATH=build/python python3 bench/python/gpu_sync.py [--batches 200] [--rounds 5]
"""

import argparse
import statistics
import time

import torch
import torch.nn.functional as F
from torch import nn

import nansense


def model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(1024, 4096), nn.ReLU(), nn.Linear(4096, 4096), nn.ReLU(),
                         nn.Linear(4096, 10)).cuda()


class Loop:
    def __init__(self, kind, sync, guarded):
        self.net = model()
        self.optimizer = torch.optim.SGD(self.net.parameters(), lr=1e-3)
        self.forward = torch.compile(self.net) if kind == "compiled" else self.net
        self.scaler = torch.amp.GradScaler("cuda") if kind == "amp" else None
        self.sync = sync
        self.session = None
        if guarded:
            self.session = nansense.start(self.forward, optimizer=self.optimizer,
                                          **({"scaler": self.scaler} if self.scaler else {}))
            self.session.detach()

    def round(self, data):
        loop = self.session.batches(data, phase="train") if self.session else data
        torch.cuda.synchronize()
        start = time.perf_counter()
        for x, y in loop:
            self.optimizer.zero_grad(set_to_none=True)
            with torch.autocast("cuda", dtype=torch.float16, enabled=self.scaler is not None):
                loss = F.cross_entropy(self.forward(x), y)
            if self.scaler is not None:
                self.scaler.scale(loss).backward()
                self.scaler.step(self.optimizer)
                self.scaler.update()
            else:
                loss.backward()
                self.optimizer.step()
            if self.sync:
                loss.item()
        torch.cuda.synchronize()
        return time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("gpu_sync: no CUDA device")
    g = torch.Generator(device="cuda").manual_seed(0)
    data = [(torch.randn(256, 1024, device="cuda", generator=g), torch.randint(0, 10, (256,), device="cuda",
                                                                               generator=g))
            for _ in range(args.batches)]
    for kind in ("fp32", "amp", "compiled"):
        loops = {"no sync": Loop(kind, False, False), "item() each batch": Loop(kind, True, False),
                 "nansense guard": Loop(kind, False, True)}
        for loop in loops.values():
            loop.round(data[:10])
        times = {name: [] for name in loops}
        for _ in range(args.rounds):
            for name, loop in loops.items():
                times[name].append(loop.round(data))
        base = times["no sync"]
        print(f"{kind}: no sync {statistics.median(base) / args.batches * 1e3:.3f} ms a batch")
        for name in ("item() each batch", "nansense guard"):
            ratios = [t / b for t, b in zip(times[name], base)]
            print(f"  {name}: {statistics.median(ratios):.3f} x [{min(ratios):.3f}-{max(ratios):.3f}]")
        for loop in loops.values():
            if loop.session:
                loop.session.close()


if __name__ == "__main__":
    main()
