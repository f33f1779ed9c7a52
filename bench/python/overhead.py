#!/usr/bin/env python3
"""What nansense costs a Python training loop, as ratios to a plain loop
measured in the same run (the demo CNN, batch 64, one thread, 28x28 random
images), beside what Python users do today to find a NaN:

  disabled      nansense.start(..., enabled=False)         target <= 1.01
  detached      a live session, detached, checks off        target <= 1.02
  guard         detached with the guard and flight recorder target <= 1.01 over detached
  root cause    op-level tracing of every batch              target <= 1.15
  anomaly       torch.autograd.detect_anomaly()
  isfinite      forward hooks calling torch.isfinite on every module output

    PYTHONPATH=build/python .venv/bin/python bench/python/overhead.py [--batches 60] [--rounds 5]

Variants run interleaved, round after round; each ratio is the median of
the per-round ratios to the plain loop of the same round.
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


def train(batches, wrap=None, context=None, hooks=False):
    torch.manual_seed(0)
    model = FashionCnn()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    session = wrap(model, optimizer) if wrap else None
    handles = []
    if hooks:
        def check(module, inputs, output):
            if isinstance(output, torch.Tensor) and not bool(torch.isfinite(output).all()):
                raise FloatingPointError(f"non-finite output in {type(module).__name__}")
        handles = [m.register_forward_hook(check) for m in model.modules()]
    loop = session.batches(batches, phase="train") if session else batches
    start = time.perf_counter()
    with context() if context else _nothing():
        for x, y in loop:
            optimizer.zero_grad()
            F.nll_loss(model(x), y).backward()
            optimizer.step()
    elapsed = time.perf_counter() - start
    for h in handles:
        h.remove()
    if session:
        session.close()
    return elapsed


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def live(debug):
    def wrap(model, optimizer):
        session = nansense.start(model, optimizer=optimizer)
        session.set_debug_settings(debug)
        session.detach()
        return session
    return wrap


VARIANTS = {
    "disabled": dict(wrap=lambda m, o: nansense.start(m, optimizer=o, enabled=False)),
    "detached": dict(wrap=live(nansense.DebugSettings(enabled=False))),
    "guard": dict(wrap=live(nansense.DebugSettings())),
    "root cause": dict(wrap=live(nansense.DebugSettings(trace_interval=1))),
    "anomaly": dict(context=torch.autograd.detect_anomaly),
    "isfinite": dict(hooks=True),
}


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--batches", type=int, default=60)
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args()
    torch.set_num_threads(1)
    batches = make_batches(args.batches)
    train(batches[:5])  # warm-up
    ratios = {name: [] for name in VARIANTS}
    for _ in range(args.rounds):
        plain = train(batches)
        for name, kwargs in VARIANTS.items():
            ratios[name].append(train(batches, **kwargs) / plain)
    print(f"python overhead: demo CNN, batch 64, 1 thread, {args.batches} batches x {args.rounds} rounds")
    for name, values in ratios.items():
        print(f"  {name:<11} {statistics.median(values):.3f}  (range {min(values):.3f}..{max(values):.3f})")
    guard_over_detached = [g / d for g, d in zip(ratios["guard"], ratios["detached"])]
    print(f"  guard / detached {statistics.median(guard_over_detached):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
