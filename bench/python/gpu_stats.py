#!/usr/bin/env python3
"""On a CUDA device: what the statistics and the live view cost when the
layers' tensors stay on the device, as ratios to a plain CUDA loop that
never syncs (and, beside it, one that reads loss.item() every batch). The
demo's CNN (batch 64, 28x28 random images on the device, SGD with
momentum), every loop in this process, rounds interleaved; each ratio is the
median of the per-round ratios to the never-syncing loop of the same round.

  item() each batch        the plain loop reading loss.item() every batch
  guard                    nansense detached, its default checks
  3 watched                3 watched layers folded every batch (activations
                           and gradients, Min/Max patches), the live view at
                           its default cadence; checks off
  3 watched, publish each  the same, captured and published every batch
  every layer              scope "all", folded every batch; checks off
  capture every batch      scope "none", captured and published every batch

The statistics fold on the device (sums, extremes, counts, histograms,
patches as tensor ops): a batch only collected copies nothing to the host;
a publish makes one batched copy. Exits 0 with a note when no CUDA device is
present.

    PYTHONPATH=build/python python3 bench/python/gpu_stats.py [--batches 100] [--rounds 5]
"""

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from vs_original import LAYERS, cnn  # noqa: E402

VARIANTS = ("no sync", "item() each batch", "guard", "3 watched", "3 watched, publish each", "every layer",
            "capture every batch")


def sync():
    if torch.cuda.is_available():
        torch.cuda.synchronize()


class Loop:
    def __init__(self, variant, device):
        import nansense
        torch.manual_seed(0)
        self.net = cnn().to(device)
        self.optimizer = torch.optim.SGD(self.net.parameters(), lr=0.01, momentum=0.9)
        self.sync = variant == "item() each batch"
        self.session = None
        if variant in ("no sync", "item() each batch"):
            return
        s = self.session = nansense.start(self.net, optimizer=self.optimizer)
        if variant == "guard":
            s.detach()
            return
        s.set_debug_settings(nansense.DebugSettings(enabled=False))
        if variant.startswith("3 watched"):
            for layer in LAYERS:
                s.watch(layer)
            s.set_stats_scope("watched")
        else:
            s.set_stats_scope("all" if variant == "every layer" else "none")
        if variant in ("3 watched, publish each", "capture every batch"):
            s.set_update_frequency(unit="batch", n=1)
        s.run()  # unserved: never pauses; a detached loop would collect nothing

    def round(self, data):
        loop = self.session.batches(data, phase="train") if self.session else data
        sync()
        start = time.perf_counter()
        for x, y in loop:
            self.optimizer.zero_grad(set_to_none=True)
            loss = F.nll_loss(self.net(x), y)
            loss.backward()
            self.optimizer.step()
            if self.sync:
                loss.item()
        sync()
        return time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--device", default="cuda", help="cpu checks the script itself where no GPU is")
    args = parser.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        print("gpu_stats: no CUDA device; nothing measured")
        return
    g = torch.Generator(device=args.device).manual_seed(0)
    data = [(torch.randn(64, 1, 28, 28, device=args.device, generator=g),
             torch.randint(0, 10, (64,), device=args.device, generator=g)) for _ in range(args.batches)]
    loops = {v: Loop(v, args.device) for v in VARIANTS}
    for loop in loops.values():
        loop.round(data[:10])
    times = {v: [] for v in VARIANTS}
    for r in range(args.rounds):
        for v in VARIANTS[r % len(VARIANTS):] + VARIANTS[:r % len(VARIANTS)]:
            times[v].append(loops[v].round(data))
    base = times["no sync"]
    name = torch.cuda.get_device_name() if args.device == "cuda" else args.device
    print(f"demo CNN on {name}: no sync {statistics.median(base) / args.batches * 1e3:.3f} "
          f"ms a batch; {args.rounds} rounds of {args.batches} batches")
    for v in VARIANTS[1:]:
        ratios = [t / b for t, b in zip(times[v], base)]
        print(f"  {v:26} {statistics.median(ratios):.3f} x [{min(ratios):.3f}-{max(ratios):.3f}]")
    for v, loop in loops.items():
        if loop.session is None:
            continue
        errors = loop.session.internal_errors
        if v.startswith("3 watched") and not {l for l, _, _ in loop.session.watch_snapshot().stats} >= set(LAYERS):
            errors = errors + ["the watched layers' statistics were not collected"]
        loop.session.close()
        if errors:
            print(f"  {v}: {errors}")


if __name__ == "__main__":
    main()
