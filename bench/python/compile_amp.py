#!/usr/bin/env python3
"""What nansense costs a torch.compile'd loop and an fp16 loop with a
GradScaler, as ratios to the same plain loop measured in the same run (the
demo CNN, batch 64, one thread, 28x28 random images):

  compiled   torch.compile(model):
    detached   a live session, checks off                    target <= 1.02
    guarded    detached, the guard and flight recorder on    target <= 1.02
  amp        fp16 autocast + GradScaler (init scale 2^20: the first steps overflow):
    guarded    detached, the guard on, the scaler given      (reported)

and the first compile's extra time (the first batch, compiled, against the
first batch eager). Variants run interleaved, round after round; each ratio
is the median of the per-round ratios to the plain loop of the same round.

    PYTHONPATH=build/python .venv/bin/python bench/python/compile_amp.py [--batches 40] [--rounds 5]
"""

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples" / "python"))
from fashion_mnist import FashionCnn  # noqa: E402

import nansense  # noqa: E402


def make_batches(n, batch_size=64):
    g = torch.Generator().manual_seed(0)
    return [(torch.randn(batch_size, 1, 28, 28, generator=g), torch.randint(0, 10, (batch_size,), generator=g))
            for _ in range(n)]


class Loop:
    """One model and optimizer, kept across rounds (a compiled model keeps
    its compiled code), trained for a round of batches at a time."""

    def __init__(self, kind, nansense_mode):
        torch.manual_seed(0)
        self.kind = kind
        self.model = FashionCnn()
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.01, momentum=0.9)
        self.forward = torch.compile(self.model) if kind == "compiled" else self.model
        self.scaler = torch.amp.GradScaler("cpu", init_scale=2.0**20) if kind == "amp" else None
        self.session = None
        if nansense_mode is not None:
            self.session = nansense.start(self.forward, optimizer=self.optimizer,
                                          **({"scaler": self.scaler} if self.scaler else {}))
            self.session.detach()
            if nansense_mode == "detached":
                self.session.set_debug_settings(enabled=False)

    def step(self, x, y):
        self.optimizer.zero_grad()
        if self.scaler is not None:
            with torch.autocast("cpu", dtype=torch.float16):
                loss = F.nll_loss(self.forward(x), y)
            self.scaler.scale(loss).backward()
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            F.nll_loss(self.forward(x), y).backward()
            self.optimizer.step()

    def round(self, batches):
        loop = self.session.batches(batches, phase="train") if self.session else batches
        start = time.perf_counter()
        for x, y in loop:
            self.step(x, y)
        return time.perf_counter() - start


def first_batch_seconds(compiled, batch):
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = FashionCnn()
    forward = torch.compile(model) if compiled else model
    start = time.perf_counter()
    F.nll_loss(forward(batch[0]), batch[1]).backward()
    return time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    batches = make_batches(args.batches)
    eager_first = first_batch_seconds(False, batches[0])
    compiled_first = first_batch_seconds(True, batches[0])
    torch._dynamo.reset()
    variants = {
        "compiled plain": Loop("compiled", None),
        "compiled detached": Loop("compiled", "detached"),
        "compiled guarded": Loop("compiled", "guarded"),
        "amp plain": Loop("amp", None),
        "amp guarded": Loop("amp", "guarded"),
    }
    for loop in variants.values():  # warm up: compile, first allocations
        loop.round(batches[:4])
    times = {name: [] for name in variants}
    for _ in range(args.rounds):
        for name, loop in variants.items():
            times[name].append(loop.round(batches))
    print(f"first batch: eager {eager_first:.2f} s, compiled {compiled_first:.2f} s "
          f"(the first compile adds {compiled_first - eager_first:.2f} s)")
    for kind, targets in (("compiled", {"detached": 1.02, "guarded": 1.02}), ("amp", {"guarded": None})):
        plain = times[f"{kind} plain"]
        print(f"{kind} plain: {statistics.median(plain) / args.batches * 1e3:.2f} ms a batch")
        for mode, target in targets.items():
            ratios = [t / p for t, p in zip(times[f"{kind} {mode}"], plain)]
            note = f"(target <= {target})" if target else ""
            print(f"  {kind} {mode}: {statistics.median(ratios):.3f} x plain "
                  f"[rounds {min(ratios):.3f}-{max(ratios):.3f}] {note}")
    amp = variants["amp guarded"].session.loss_scale
    print(f"amp: the scaler skipped {amp.skipped_steps} steps (counted, no error), scale now {amp.scale}")
    for loop in variants.values():
        if loop.session:
            loop.session.close()


if __name__ == "__main__":
    main()
