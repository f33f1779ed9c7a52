#!/usr/bin/env python3
"""nansense's statistics beside what users run today to watch layers: the
same model and loop under TensorBoard's add_histogram, wandb.watch (offline)
and nansense, one process per configuration, rounds interleaved, every
figure a ratio to a plain loop measured in the same round.

  plain              no instrumentation (the baseline)
  tensorboard        SummaryWriter.add_histogram of the 3 layers' activations
                     (forward hooks) and of their gradients (hooks on those
                     outputs): 6 histograms a batch, every value of each
                     tensor binned (exact)
  wandb              wandb.watch(model, log="all", log_freq=1) offline, with
                     wandb.log({"loss": ...}) every batch (what commits the
                     histograms): every layer's parameters and parameter
                     gradients, 64 bins each; no activations
  nansense           3 watched layers, scope "watched", checks off, run():
                     every batch folds the layers' activations and gradients
                     into exact running statistics (counts, sum, sum of
                     squares, min, max, NaN/Inf counts, dead channels; the
                     histograms bin a 16k-value sample a tensor) and the
                     Min/Max patches; the live view at its default cadence
                     (a capture and publish every 2 s)
  nansense publishing every batch
                     the same with set_update_frequency(unit="batch", n=1):
                     every batch also captured whole and published

The model is the demo's CNN (bench/python/vs_original.py's copy: batch 64,
28x28 random images, SGD with momentum, seed 0, one torch thread). Each
process trains --warmup batches, then times --batches more: its CPU time
(every thread counted) and its wall time. wandb's own service process and
TensorBoard's writer thread do part of their work off the training thread;
the wall clock counts what that costs a 2-core machine, the CPU clock only
the process's own threads, so both are printed.

TensorBoard and wandb come from bench/python/requirements.txt, not the
package's requirements. A venv for them that reuses the project's torch:

    python3 -m venv /tmp/peers-venv
    echo $PWD/.venv/lib/python3.11/site-packages > /tmp/peers-venv/lib/python3.11/site-packages/project.pth
    /tmp/peers-venv/bin/pip install -r bench/python/requirements.txt
    PYTHONPATH=build/python /tmp/peers-venv/bin/python bench/python/stats_peers.py [--rounds 5]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from vs_original import FIXED_MALLOC, LAYERS, cnn, make_batches  # noqa: E402

CONFIGS = ("plain", "tensorboard", "wandb", "nansense", "nansense publishing every batch")


def instrument(config, model, optimizer, workdir):
    """Sets the configuration up; returns (a per-batch callback taking the
    loss, a final check, a close, the nansense session to loop over)."""
    if config == "tensorboard":
        from torch.utils.tensorboard import SummaryWriter
        writer = SummaryWriter(log_dir=os.path.join(workdir, "tb"))
        step = [0]
        modules = dict(model.named_modules())

        def watch(name):
            def forward(module, args, output):
                writer.add_histogram(f"{name}/activation", output, step[0])
                if output.requires_grad:
                    output.register_hook(lambda g: writer.add_histogram(f"{name}/gradient", g, step[0]))
            return forward

        for name in LAYERS:
            modules[name].register_forward_hook(watch(name))

        def after(loss):
            step[0] += 1

        def check():
            if step[0] == 0:
                raise RuntimeError("tensorboard: nothing was written")

        return after, check, writer.close, None
    if config == "wandb":
        import wandb
        run = wandb.init(project="nansense-peers", mode="offline", dir=workdir, settings=wandb.Settings(silent=True))
        wandb.watch(model, log="all", log_freq=1)
        logged = [0]

        def after(loss):
            run.log({"loss": loss.item()})
            logged[0] += 1

        def check():
            if logged[0] == 0:
                raise RuntimeError("wandb: nothing was logged")

        return after, check, run.finish, None
    if config.startswith("nansense"):
        import nansense
        session = nansense.start(model, optimizer=optimizer)
        session.set_debug_settings(nansense.DebugSettings(enabled=False))
        for layer in LAYERS:
            if not session.watch(layer):
                raise RuntimeError(f"watch({layer!r}) refused; layers: {session.layer_names}")
        session.set_stats_scope("watched")
        if config == "nansense publishing every batch":
            session.set_update_frequency(unit="batch", n=1)
        session.run()  # unserved: never pauses; a detached loop would collect nothing

        def check():
            collected = {layer for layer, _, _ in session.watch_snapshot().stats}
            if not set(LAYERS) <= collected:
                raise RuntimeError(f"nansense: statistics were not collected for {LAYERS}: {sorted(collected)}")

        return None, check, session.close, session
    raise ValueError(config)


def time_loop(config, n, warmup):
    import torch
    import torch.nn.functional as F
    torch.set_num_threads(1)
    batches = make_batches(n + warmup)
    torch.manual_seed(0)
    model = cnn()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    workdir = tempfile.mkdtemp(prefix="stats-peers-")
    after, check, close, session = None, None, None, None
    if config != "plain":
        after, check, close, session = instrument(config, model, optimizer, workdir)
    loop = session.batches(batches, phase="train") if session else batches
    start = None
    for i, (x, y) in enumerate(loop):
        if i == warmup:
            start = (time.process_time(), time.perf_counter())
        optimizer.zero_grad()
        loss = F.nll_loss(model(x), y)
        loss.backward()
        optimizer.step()
        if after:
            after(loss)
    end = (time.process_time(), time.perf_counter())
    if check:
        check()
    if close:
        close()
    return {"cpu": (end[0] - start[0]) / n * 1e3, "wall": (end[1] - start[1]) / n * 1e3}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--batches", type=int, default=200,
                    help="timed batches a process (200: two or more of the default live view's 2 s periods)")
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--configs", default=",".join(CONFIGS), help="comma-separated subset of " + ", ".join(CONFIGS))
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(time_loop(args.worker, args.batches, args.warmup)))
        return
    configs = [c.strip() for c in args.configs.split(",")]
    for c in configs:
        if c not in CONFIGS:
            ap.error(f"unknown configuration {c!r}; known: {', '.join(CONFIGS)}")
    if "plain" not in configs:
        configs.insert(0, "plain")
    env = dict(os.environ, **FIXED_MALLOC, WANDB_MODE="offline", WANDB_SILENT="true", OMP_NUM_THREADS="1")
    results = {c: [] for c in configs}
    print(f"demo CNN, batch 64, one torch thread; {args.rounds} rounds of {args.batches} timed batches "
          f"(+{args.warmup} warm-up), one process per configuration, order rotated each round", flush=True)
    for r in range(args.rounds):
        order = configs[r % len(configs):] + configs[:r % len(configs)]
        for c in order:
            out = subprocess.run([sys.executable, __file__, "--worker", c, "--batches", str(args.batches),
                                  "--warmup", str(args.warmup)], env=env, capture_output=True, text=True)
            if out.returncode != 0:
                sys.exit(f"{c} failed:\n{out.stderr[-3000:]}")
            results[c].append(json.loads(out.stdout.strip().splitlines()[-1]))
        print(f"round {r + 1}: " + ", ".join(f"{c} {results[c][-1]['wall']:.1f}" for c in configs) + " ms wall",
              flush=True)

    def ratios(c, clock):
        return [m[clock] / p[clock] for m, p in zip(results[c], results["plain"])]

    def spread(xs):
        xs = sorted(xs)
        return f"{statistics.median(xs):.2f} [{xs[0]:.2f}, {xs[-1]:.2f}]"

    print(f"\n{'configuration':32} {'ms/batch CPU':>12} {'x plain CPU [min, max]':>24} {'x plain wall [min, max]':>24}")
    for c in configs:
        ms = statistics.median(m["cpu"] for m in results[c])
        print(f"{c:32} {ms:12.2f} {spread(ratios(c, 'cpu')):>24} {spread(ratios(c, 'wall')):>24}")


if __name__ == "__main__":
    main()
