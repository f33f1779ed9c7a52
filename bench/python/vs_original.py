#!/usr/bin/env python3
"""nansense beside the original it ports: `nansense` 0.4.0 from PyPI (pure
Python). The same model and loop run under both, each configuration in a
fresh process per side, and every figure is a ratio to a plain loop measured
in the same run:

  plain          no debugger (the baseline of every row but Lightning's)
  enabled=False  start(..., enabled=False)
  detached       a live session, no UI, detached, the numerical checks off
  guard          detached with the checks on every batch (ours: the default
                 DebugSettings; the original's: set_debug_settings(interval=1))
  guard, defaults  each side's default checks: ours every batch, the
                 original's every 100th (ours is the guard row's figure; 100
                 timed batches after 10 warm-up hold exactly one of its checks)
  3 watched      checks off, 3 watched layers collecting statistics and a
                 publish every batch (watch, set_stats_scope("watched"),
                 set_update_frequency(unit="batch", n=1)), never pausing: ours
                 in run() (our detached loop collects nothing), the
                 original's detached (its detach still collects)
  lightning      Trainer.fit with each side's NansenseCallback (its defaults,
                 detached at fit start), against a plain fit without one

    PYTHONPATH=build/python .venv/bin/python bench/python/vs_original.py [--quick]

The model is the demo's CNN (batch 64, 28x28 random images, SGD with
momentum, seed 0, one torch thread). Each process trains warm-up batches
first and times the rest (its CPU time, every thread counted; --clock wall
for the wall clock); rounds interleave every configuration and side,
and each figure is the median over the rounds (ms per batch, and the
per-round ratio to that round's plain loop).

The original goes into its own venv (default build/bench-original-venv,
--venv to choose): made with this Python's `venv`, a .pth file pointing at
this environment's site-packages so the same torch and lightning are used
(nothing large is downloaded), and `pip install nansense==0.4.0 --no-deps`
(its web UI's dependencies, which an unserved session never imports, are
left out). That needs PyPI once; later runs reuse the venv.

Ours is the `nansense` this Python imports (PYTHONPATH as above). Every
process runs in an empty temporary directory, removed afterwards, with
glibc's malloc thresholds fixed (FIXED_MALLOC; --default-malloc leaves them).
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ORIGINAL = "0.4.0"
LAYERS = ("features.0", "features.3", "classifier.1")
CONFIGS = ("plain", "enabled=False", "detached", "guard", "guard, defaults", "3 watched", "lightning")
# The configurations each side runs in its own process; "guard, defaults" is
# the guard row's measurement on our side (our default checks every batch).
RUNS = {"ours": ("enabled=False", "detached", "guard", "3 watched", "lightning"),
        "theirs": ("enabled=False", "detached", "guard", "guard, defaults", "3 watched", "lightning")}


# ---------------------------------------------------------------- worker side

def cnn():
    """The demo's CNN (examples/python/fashion_mnist.py), written out here:
    importing the demo would import a nansense into the plain loop too."""
    import torch.nn.functional as F
    from torch import nn

    class FashionCnn(nn.Module):
        def __init__(self):
            super().__init__()
            self.features = nn.Sequential(
                nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2))
            self.classifier = nn.Sequential(
                nn.Flatten(), nn.Linear(32 * 7 * 7, 64), nn.ReLU(), nn.Dropout(0.25), nn.Linear(64, 10))

        def forward(self, x):
            return F.log_softmax(self.classifier(self.features(x)), dim=1)

    return FashionCnn()


def make_batches(n, batch_size=64):
    import torch
    g = torch.Generator().manual_seed(0)
    return [(torch.randn(batch_size, 1, 28, 28, generator=g), torch.randint(0, 10, (batch_size,), generator=g))
            for _ in range(n)]


def start_session(side, config, model, optimizer):
    """The session a configuration trains under, in each side's API."""
    import nansense
    if config == "enabled=False":
        return nansense.start(model, optimizer=optimizer, enabled=False)
    session = nansense.start(model, optimizer=optimizer)
    checks = config in ("guard", "guard, defaults")
    if side == "ours":
        if not checks:
            session.set_debug_settings(nansense.DebugSettings(enabled=False))
    elif not checks:
        session.set_debug_settings(enabled=False)
    elif config == "guard":
        session.set_debug_settings(interval=1)
    if config == "3 watched":
        for layer in LAYERS:
            if not session.watch(layer):
                raise RuntimeError(f"{side}: watch({layer!r}) refused; layers: {session.layer_names}")
        session.set_stats_scope("watched")
        session.set_update_frequency(unit="batch", n=1)
        if side == "ours":
            # Our detached loop collects and publishes nothing; run() never
            # pauses on the way either. The original's detach still does both.
            session.run()
            return session
    session.detach()  # unserved: never pause
    return session


def check_watched(side, session):
    """That the statistics were collected for the watched layers (both
    sides' WatchSnapshot is keyed by (layer, phase, epoch))."""
    collected = {layer for layer, _, _ in session.watch_snapshot().stats}
    if not set(LAYERS) <= collected:
        raise RuntimeError(f"{side}: statistics were not collected for {LAYERS}: {sorted(collected)}")


def clock():
    """(the process's CPU seconds, wall seconds): CPU time, every thread
    counted, is what the figures use by default; on a shared machine wall
    time also holds the time other processes took the core."""
    return time.process_time(), time.perf_counter()


def since(start, end=None):
    end = end or clock()
    return end[0] - start[0], end[1] - start[1]


def time_loop(side, config, batches, warmup):
    import torch
    import torch.nn.functional as F
    torch.manual_seed(0)
    model = cnn()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    session = None if config == "plain" else start_session(side, config, model, optimizer)
    loop = session.batches(batches, phase="train") if session else batches
    start = None
    for i, (x, y) in enumerate(loop):
        if i == warmup:
            start = clock()
        optimizer.zero_grad()
        F.nll_loss(model(x), y).backward()
        optimizer.step()
    elapsed = since(start)
    if config == "3 watched":
        check_watched(side, session)
    if session:
        session.close()
    return elapsed


def time_lightning(side, config, batches, warmup):
    import warnings
    import lightning.pytorch as L
    import torch
    import torch.nn.functional as F
    from torch.utils.data import DataLoader, TensorDataset
    warnings.filterwarnings("ignore")

    class Cnn(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = cnn()

        def forward(self, x):
            return self.net(x)

        def training_step(self, batch, batch_idx):
            x, y = batch
            return F.nll_loss(self.net(x), y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01, momentum=0.9)

    class Timer(L.Callback):
        """Last in the callback list: from batch `warmup`'s start (the
        debugger's own start hook of that batch excluded) to the end of the
        last batch (its end hook included)."""
        start = end = None

        def on_train_batch_start(self, trainer, module, batch, batch_idx):
            if batch_idx == warmup:
                self.start = clock()

        def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
            self.end = clock()

    callbacks = []
    if config == "lightning":
        from nansense.lightning import NansenseCallback

        class Detached(NansenseCallback):
            """Each side's callback with its defaults, detached once its
            session exists so that an unserved fit never pauses."""

            def on_fit_start(self, trainer, module):
                super().on_fit_start(trainer, module)
                self.session.detach()

        callbacks.append(Detached(model="net"))
    timer = Timer()
    callbacks.append(timer)
    x = torch.cat([b[0] for b in batches])
    y = torch.cat([b[1] for b in batches])
    loader = DataLoader(TensorDataset(x, y), batch_size=batches[0][0].shape[0], shuffle=False, num_workers=0)
    torch.manual_seed(0)
    module = Cnn()
    trainer = L.Trainer(accelerator="cpu", max_epochs=1, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, callbacks=callbacks)
    trainer.fit(module, loader)
    return since(timer.start, timer.end)


def worker(args):
    import torch
    torch.set_num_threads(1)
    batches = make_batches(args.warmup + args.batches)
    if args.config in ("lightning", "lightning plain"):
        if args.config == "lightning":
            try:
                import nansense.lightning  # noqa: F401
            except ImportError as e:
                print("RESULT " + json.dumps({"unavailable": str(e)}))
                return 0
        elapsed = time_lightning(args.side, args.config, batches, args.warmup)
    else:
        elapsed = time_loop(args.side, args.config, batches, args.warmup)
    result = {"cpu": elapsed[0] / args.batches * 1000, "wall": elapsed[1] / args.batches * 1000}
    if args.config not in ("plain", "lightning plain"):
        import nansense
        result["package"] = str(Path(nansense.__file__).parent)
    print("RESULT " + json.dumps(result))
    return 0


# ---------------------------------------------------------------- driver side

def original_venv(path: Path) -> Path:
    """The venv holding the original (made on first use); its python."""
    python = path / "bin" / "python"
    probe = f"import importlib.metadata as m; assert m.version('nansense') == '{ORIGINAL}'"
    if python.exists() and subprocess.run([python, "-c", probe], capture_output=True, cwd="/",
                                          env=clean_env()).returncode == 0:
        return python
    print(f"vs_original: making {path} with nansense=={ORIGINAL} from PyPI", flush=True)
    if path.exists():
        shutil.rmtree(path)
    subprocess.run([sys.executable, "-m", "venv", path], check=True)
    site = Path(subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    # addsitedir rather than a bare path: it also reads that folder's own .pth files.
    shared = sorted({sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]})
    (site / "project-venv.pth").write_text("".join(f"import site; site.addsitedir({p!r})\n" for p in shared))
    subprocess.run([python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-deps",
                    f"nansense=={ORIGINAL}"], check=True, env=clean_env())
    return python


def absolute_pythonpath(env):
    """The environment with PYTHONPATH's entries made absolute: every
    worker runs in an empty temporary directory, where a relative entry (the
    PYTHONPATH=build/python this file's usage gives) would find nothing."""
    path = env.get("PYTHONPATH")
    if path:
        env = {**env, "PYTHONPATH": os.pathsep.join(os.path.abspath(p) if p else p for p in path.split(os.pathsep))}
    return env


def clean_env():
    """The environment without PYTHONPATH, which would put our package
    ahead of the original's."""
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    return env


# glibc's malloc gives the pages of freed big blocks back to the system and
# faults them in again on the next batch, or keeps them, depending on what
# else the process holds: in a plain loop that alone moved the per-batch time
# by 10-15% (a session that keeps a snapshot made the loop look faster than
# with no debugger at all). Fixed thresholds keep every block on the heap in
# every process, so the rows compare the work each side adds.
FIXED_MALLOC = {"MALLOC_MMAP_THRESHOLD_": str(1 << 30), "MALLOC_TRIM_THRESHOLD_": str(1 << 30)}


def run_one(python, env, side, config, args):
    if not args.default_malloc:
        env = {**env, **FIXED_MALLOC}
    with tempfile.TemporaryDirectory(prefix="nansense-vs-original-") as cwd:
        cmd = [python, __file__, "--worker", "--side", side, "--config", config,
               "--batches", str(args.batches), "--warmup", str(args.warmup)]
        proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
        left = sorted(os.listdir(cwd))
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        sys.stderr.write(proc.stdout + proc.stderr)
        raise SystemExit(f"vs_original: {side} {config!r} failed (exit {proc.returncode})")
    result = json.loads(lines[-1][len("RESULT "):])
    if left:
        raise SystemExit(f"vs_original: {side} {config!r} left files in its working directory: {left}")
    return result


def median_ratio(num, den):
    pairs = [(a, b) for a, b in zip(num, den) if a is not None and b is not None]
    return statistics.median(a / b for a, b in pairs) if pairs else None


def cell(ms, ratio):
    return "not available" if ms is None else f"{ms:.2f} ({ratio:.2f}x)"


def driver(args):
    import torch
    theirs_python = original_venv(Path(args.venv))
    ours_python, ours_env = sys.executable, absolute_pythonpath(dict(os.environ))
    sides = {"ours": (ours_python, ours_env), "theirs": (theirs_python, clean_env())}
    times = {(side, c): [] for side in ("ours", "theirs") for c in CONFIGS}
    plain = {"plain": [], "lightning plain": []}
    unavailable = {}
    packages = {}
    started = time.monotonic()
    for r in range(args.rounds):
        for base in plain:
            plain[base].append(run_one(ours_python, ours_env, "ours", base, args)[args.clock])
        for config in CONFIGS[1:]:
            # Alternate which side goes first so that drift falls on both.
            order = ("ours", "theirs") if r % 2 == 0 else ("theirs", "ours")
            for side in order:
                if config not in RUNS[side]:
                    continue
                result = run_one(*sides[side], side, config, args)
                if "unavailable" in result:
                    unavailable[side] = result["unavailable"]
                    times[(side, config)].append(None)
                    continue
                packages[side] = result["package"]
                times[(side, config)].append(result[args.clock])
        print(f"vs_original: round {r + 1}/{args.rounds} done ({time.monotonic() - started:.0f} s)", flush=True)
    times[("ours", "guard, defaults")] = times[("ours", "guard")]

    print(f"\nnansense vs the original nansense {ORIGINAL}: demo CNN, batch 64, 1 thread, "
          f"{args.batches} batches after {args.warmup} warm-up, median of {args.rounds} round(s); "
          f"torch {torch.__version__}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}, "
          f"malloc thresholds {'dynamic' if args.default_malloc else 'fixed'}, {args.clock} time")
    print(f"  ours:   {packages.get('ours', '?')}\n  theirs: {packages.get('theirs', '?')}\n")
    header = ("config", "plain ms/batch", "ours ms/batch (x plain)", "theirs ms/batch (x plain)", "ours/theirs")
    rows = [header]
    for config in CONFIGS[1:]:
        base = plain["lightning plain" if config == "lightning" else "plain"]
        ours, theirs = times[("ours", config)], times[("theirs", config)]
        ours_ms = None if None in ours else statistics.median(ours)
        theirs_ms = None if None in theirs else statistics.median(theirs)
        vs = median_ratio(ours, theirs) if ours_ms is not None and theirs_ms is not None else None
        rows.append((config, f"{statistics.median(base):.2f}",
                     cell(ours_ms, ours_ms and median_ratio(ours, base)),
                     cell(theirs_ms, theirs_ms and median_ratio(theirs, base)),
                     "-" if vs is None else f"{vs:.2f}"))
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    for i, row in enumerate(rows):
        print("| " + " | ".join(v.ljust(w) for v, w in zip(row, widths)) + " |")
        if i == 0:
            print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    if args.raw:
        print("\nms per batch, round by round:")
        for name, values in plain.items():
            print(f"  {name:<16} " + " ".join(f"{v:.2f}" for v in values))
        for (side, config), values in times.items():
            if config != "plain":
                print(f"  {side + ' ' + config:<22} " + " ".join("-" if v is None else f"{v:.2f}" for v in values))
    for side, why in unavailable.items():
        print(f"\n{side}: nansense.lightning not available ({why})")
    print(f"\n{time.monotonic() - started:.0f} s")
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="a smoke run: 8 batches after 3 warm-up, 1 round")
    p.add_argument("--batches", type=int, default=100, help="timed batches per process (default 100)")
    p.add_argument("--warmup", type=int, default=10, help="untimed batches first (default 10)")
    p.add_argument("--rounds", type=int, default=5, help="interleaved rounds (default 5)")
    p.add_argument("--venv", default=str(ROOT / "build" / "bench-original-venv"),
                   help="the original's venv, made when missing (default build/bench-original-venv)")
    p.add_argument("--clock", choices=("cpu", "wall"), default="cpu",
                   help="time the process's CPU time (default) or the wall clock")
    p.add_argument("--default-malloc", action="store_true",
                   help="leave glibc's malloc thresholds dynamic (see FIXED_MALLOC)")
    p.add_argument("--raw", action="store_true", help="also print every round's figures")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--side", choices=("ours", "theirs"), help=argparse.SUPPRESS)
    p.add_argument("--config", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        return worker(args)
    if args.quick:
        args.batches, args.warmup, args.rounds = 8, 3, 1
    return driver(args)


if __name__ == "__main__":
    sys.exit(main())
