"""The Python benches that run on a CPU, each in a smoke form (one round of
a few batches): they print figures rather than assert them, so what is
checked here is that each still runs against the package as built and
prints every row it measures. The full runs are in docs/benchmarks.md.

bench/python/stats_peers.py's own check reads the statistics when the loop
ends: with the default live view (a publish every 2 s), a short run shows
them only because the end of a phase's loop publishes them."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "python"
RATIO = r"\d+\.\d+"


def run_bench(script, *args):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    out = subprocess.run([sys.executable, str(BENCH / script), *args], env=env, capture_output=True, text=True,
                         timeout=150)
    assert out.returncode == 0, f"{script} exited {out.returncode}:\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}"
    return out.stdout


def test_stats_peers_times_nansense_beside_the_plain_loop():
    # The peers (TensorBoard, wandb) come from bench/python/requirements.txt,
    # not the package's venv: the nansense configurations only.
    out = run_bench("stats_peers.py", "--configs", "nansense,nansense publishing every batch", "--rounds", "1",
                    "--batches", "5", "--warmup", "2")
    for config in ("plain", "nansense", "nansense publishing every batch"):
        assert re.search(rf"^{re.escape(config)}\s+{RATIO}\s+{RATIO} \[", out, re.M), out


def test_stats_peers_refuses_an_unknown_configuration():
    out = subprocess.run([sys.executable, str(BENCH / "stats_peers.py"), "--configs", "tensorbord"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert "unknown configuration 'tensorbord'" in out.stderr


@pytest.mark.parametrize("script, rows", [
    ("gpu_stats.py", ("guard", "3 watched", "3 watched, publish each", "every layer", "capture every batch")),
    ("overhead.py", ("guard", "root cause", "anomaly", "isfinite")),
])
def test_the_cpu_benches_print_every_row(script, rows):
    args = ["--batches", "4", "--rounds", "1"] + (["--device", "cpu"] if script == "gpu_stats.py" else [])
    out = run_bench(script, *args)
    for row in rows:
        assert re.search(rf"^\s*{re.escape(row)}\s+{RATIO}", out, re.M), f"{row!r} missing:\n{out}"
