"""NansenseCallback on Lightning's DDP strategy: real Lightning, real Gloo
processes on loopback, started the way a user starts them (`python
train.py`, Trainer(strategy="ddp", devices=2) launching the other rank),
rank 0's UI driven over HTTP."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

pl = pytest.importorskip("lightning.pytorch")

from conftest import RankRun  # noqa: E402

WORKER = Path(__file__).with_name("lightning_ddp_worker.py")
TIMEOUT = 4  # NANSENSE_DDP_TIMEOUT


class Run(RankRun):
    """One Lightning DDP run in folder: the script's process (rank 0) and the
    ranks Lightning starts from it, in a process group of their own."""

    def __init__(self, folder, **opts):
        self.folder = Path(folder)
        self.world = opts.setdefault("world", 2)
        env = dict(os.environ, NANSENSE_DDP_TIMEOUT=str(TIMEOUT), OMP_NUM_THREADS="1")
        for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "NODE_RANK"):
            env.pop(name, None)
        self.proc = subprocess.Popen([sys.executable, str(WORKER), json.dumps(opts)], cwd=folder, env=env,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     start_new_session=True)
        self._out = None

    def until(self, condition, what, timeout=90):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = condition()
            if value:
                return value
            if self.proc.poll() not in (None, 0):
                pytest.fail(f"the run failed while waiting for {what}:\n{self.output()}")
            time.sleep(0.05)
        self.kill()
        pytest.fail(f"timed out waiting for {what}:\n{self.output()}")

    def ended(self, rank):
        return any("fit_end" in e for e in self.events(rank))

    def wait(self, timeout=90):
        self.proc.wait(timeout=timeout)
        return self.proc.returncode

    def output(self):
        if self._out is None and self.proc.poll() is not None and not self.proc.stdout.closed:
            self._out = self.proc.stdout.read()
        return self._out or ""

    def kill(self):
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()


@pytest.fixture
def run(tmp_path, rank_runs):
    def make(**opts):
        rank_runs.append(Run(tmp_path, **opts))
        return rank_runs[-1]

    return make


def paused_at(status):
    p = status["live_position"]
    return p["phase"], p["epoch"], p["batch_idx"]


def paused(api):
    status = api.get("/api/status")
    return status["state"] == "paused" and status


def test_every_rank_follows_rank_0_pause_step_and_run_with_validation(run):
    # A process group timeout shorter than the pause: the followers wait for
    # rank 0 in nansense's exchange, not in a collective of Lightning's loop
    # (which would time out).
    r = run(served=True, epochs=2, batches=3, val=2, pg_timeout=3)
    api = r.api()
    status = r.until(lambda: paused(api), "the first pause")
    assert paused_at(status) == ("train", 0, 0)
    r.until(lambda: r.all_done((0, 0)), "every rank to finish batch 0")
    time.sleep(4)  # the pause outlasts the process group's timeout
    status = api.post("/api/step", {"unit": "batch", "timeout_seconds": 30})
    assert paused_at(status) == ("train", 0, 1)
    r.until(lambda: r.all_done((0, 1)), "every rank to finish batch 1")
    for rank in range(2):
        assert r.last(rank, "begin") == (0, 1), f"rank {rank} went past rank 0's pause: {r.events(rank)}"
    # The validation phase is stepped through in lockstep too.
    status = api.post("/api/step", {"unit": "phase", "timeout_seconds": 30})
    assert paused_at(status) == ("val", 0, 0), status
    r.until(lambda: all(r.last(k, "val") == (0, 0) for k in range(2)), "every rank's first validation batch")
    assert all(r.last(k, "done") == (0, 2) for k in range(2))
    status = api.post("/api/run", {"timeout_seconds": 30})
    assert status["state"] == "paused" and paused_at(status) == ("val", 1, 1), status
    api.post("/api/run", {"detach": True})
    assert r.wait() == 0, r.output()
    for rank in range(2):
        done = [tuple(e["done"]) for e in r.events(rank) if "done" in e]
        assert done == [(e, b) for e in range(2) for b in range(3)], (rank, done)
        assert [tuple(e["val"]) for e in r.events(rank) if "val" in e] == [(e, b) for e in range(2) for b in range(2)]
        assert r.ended(rank)
    # Rank 0 alone served the UI.
    assert r.output().count("nansense is serving the training debugger") == 1, r.output()


def test_a_nan_on_rank_1_holds_every_rank_before_its_step_and_its_capsule_replays_as_a_lightning_run(run, tmp_path, monkeypatch):
    r = run(served=True, epochs=1, batches=4, nan_rank=1, nan_batch=2)
    api = r.api()
    r.until(lambda: paused(api), "the first pause")
    api.post("/api/run", {})
    report = r.until(lambda: (d := api.get("/api/debug")).get("error") and "rank 1 at" in
                     ((d["error"].get("root_cause") or {}).get("summary") or "") and d, "the report naming rank 1")
    error = report["error"]
    assert error["position"]["batch_idx"] == 2, error
    status = r.until(lambda: paused(api), "the pause at the NaN")
    assert paused_at(status)[1:] == (0, 2), status
    # Every rank holds that batch's update inside its backward, before its
    # optimizer step (rank 0 allows skipping it once every rank said so).
    r.until(lambda: api.get("/api/debug")["skip_refused"] is None, "every rank to hold the update")
    for rank in range(2):
        assert r.last(rank, "begin") == (0, 2) and r.last(rank, "stepping") == (0, 1), (rank, r.events(rank))
    capsules = sorted((tmp_path / "nansense_capsules" / "rank_1").glob("*"))
    assert capsules and capsules[0].name in error["root_cause"]["summary"], (capsules, error)
    assert error["capsule"].endswith(capsules[0].name), error  # the capsule that replays it: rank 1's
    # Skipped on every rank: the replicas stay equal and finite.
    assert api.post("/api/debug/choose_update", {"action": "skip"})["error"]["update"] == "held"
    api.post("/api/run", {"detach": True})
    assert r.wait() == 0, r.output()
    weights = [[(tuple(e["done"]), e["weights"]) for e in r.events(rank) if "done" in e] for rank in range(2)]
    assert weights[0] == weights[1] and [w[0] for w in weights[0]] == [(0, b) for b in range(4)], weights
    assert weights[0][2][1] == weights[0][1][1], weights  # batch 2's update skipped
    assert all(torch.isfinite(torch.tensor(w[1])).all() for w in weights[0]), weights

    # Rank 1's capsule alone, in this process (no process group), replays
    # as a Lightning run entering at the tripping step: the NaN again.
    monkeypatch.chdir(tmp_path)
    from lightning_ddp_worker import Logged
    from nansense.lightning import replay_capsule
    replayed = replay_capsule(str(capsules[0]), Logged(), accelerator="cpu", devices=1)
    assert (replayed.epoch, replayed.batch_idx) == (0, 2)
    assert replayed.gradients_match() == (True, "")
    x, _ = replayed.batch
    assert torch.isnan(x).any()


def test_static_graph_a_nan_in_rank_1s_first_batch_is_named_as_rank_1s_alone(run):
    # DDPStrategy(static_graph=True): DDP averages the first batch's gradients
    # in a final callback queued as its backward starts; each rank's first
    # check still sees its own gradients (a hook on Lightning's DDP wrapper).
    r = run(served=True, epochs=1, batches=2, nan_rank=1, nan_batch=0, static_graph=True)
    api = r.api()
    # Rank 1 may note its trip before rank 0 begins that batch (DDP averages
    # it only at its end): rank 0's own check there still holds the update.
    report = r.until(lambda: (d := api.get("/api/debug")).get("error") and "rank 1 at" in
                     ((d["error"].get("root_cause") or {}).get("summary") or "") and
                     d["error"].get("update") == "held" and d, "rank 0 to hold the update, naming rank 1")
    error = report["error"]
    summary = error["root_cause"]["summary"]
    assert error["position"]["batch_idx"] == 0 and error["root_cause"]["status"] == "from_outside", error
    assert "The checks tripped on rank 1 of 2: rank 1 at epoch 0 | train batch 0" in summary, summary
    assert not list((r.folder / "nansense_capsules" / "rank_0").glob("*.capsule")), "rank 0 wrote a capsule"
    r.until(lambda: api.get("/api/debug")["skip_refused"] is None, "every rank to hold the update")
    assert error["update"] == "held" and all(r.last(rank, "stepping") is None for rank in range(2)), error
    api.post("/api/run", {"detach": True})
    assert r.wait() == 0, r.output()


def test_without_a_ui_a_nan_on_one_rank_stops_every_rank_after_the_same_batch(run):
    r = run(epochs=2, batches=8, nan_rank=1, nan_batch=1)
    assert r.wait() == 0, r.output()
    out = r.output()
    last = [r.last(rank, "done") for rank in range(2)]
    # Stopped together (DDP would hang otherwise), a few batches after the
    # NaN: rank 0 learns of rank 1's trip as it trains on.
    assert last[0] == last[1] and (0, 1) < last[0] <= (0, 5), last
    assert (f"every rank's trainer stops after train epoch 0 batch {last[0][1]}, for the NaN of train epoch 0 batch 1"
            in out), out
    assert "rank_1/nan-epoch0-train-batch1.capsule" in out, out
    assert r.ended(0) and r.ended(1)


def test_a_jump_rewinds_every_rank_into_a_new_fit_in_lockstep(run, tmp_path):
    r = run(served=True, epochs=3, batches=2, time_travel=True)
    api = r.api()
    r.until(lambda: paused(api), "the first pause")
    status = api.post("/api/run_until", {"phase": "train", "epoch": 2, "batch": 0, "timeout_seconds": 60})
    assert paused_at(status) == ("train", 2, 0)
    status = api.post("/api/time_travel", {"epoch": 1, "timeout_seconds": 60})
    assert status["state"] == "paused" and paused_at(status) == ("train", 1, 0), status
    r.until(lambda: r.all_done((1, 0)) and all(len([e for e in r.events(k) if "epoch" in e]) == 4 for k in (0, 1)),
            "every rank to enter epoch 1 again")
    api.post("/api/run", {"detach": True})
    assert r.wait() == 0, r.output()
    for rank in (0, 1):
        starts = [(e["epoch"], e["weights"]) for e in r.events(rank) if "epoch" in e]
        assert [s[0] for s in starts] == [0, 1, 2, 1, 2], (rank, starts)
        assert starts[3][1] == starts[1][1], (rank, starts)  # its own checkpoint's weights
        assert r.ended(rank)
    assert (tmp_path / ".nansense_cache" / "rank_1").is_dir()


def test_a_killed_rank_ends_the_run_instead_of_hanging(run):
    r = run(served=True, epochs=1, batches=4)
    api = r.api()
    r.until(lambda: paused(api), "the first pause")
    r.until(lambda: r.all_done((0, 0)), "every rank to finish batch 0")
    follower = int(r.until(lambda: next((e["pid"] for e in r.events(1) if "pid" in e), None), "rank 1's pid"))
    # Rank 0 killed in its pause (the script's process, which Lightning's
    # launcher ran in): the follower, waiting for rank 0's decision, ends
    # with nansense's error at once instead of waiting forever.
    os.kill(r.proc.pid, signal.SIGKILL)
    r.proc.wait(timeout=30)
    deadline = time.monotonic() + TIMEOUT + 30
    while time.monotonic() < deadline and os.path.exists(f"/proc/{follower}") and \
            not open(f"/proc/{follower}/stat").read().split()[2] == "Z":
        time.sleep(0.05)
    assert not os.path.exists(f"/proc/{follower}") or open(f"/proc/{follower}/stat").read().split()[2] == "Z", \
        "rank 1 is still running"
    out = r.proc.stdout.read()
    assert "DistributedError" in out, out


def test_a_strategy_it_cannot_follow_is_refused_with_what_to_use(run):
    r = run(served=True, epochs=1, batches=2, strategy="ddp_spawn")
    assert r.wait() != 0
    out = r.output()
    assert "NansenseCallback follows multi-process runs on Lightning's DDP strategy" in out, out
    assert "start_method='spawn'" in out, out
