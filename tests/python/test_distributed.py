"""DDP runs under nansense: real torch.distributed processes (Gloo, loopback),
started the way torchrun starts them, rank 0's UI driven over HTTP."""

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import nansense
from conftest import RankRun

WORKER = Path(__file__).with_name("ddp_worker.py")
TIMEOUT = 4  # NANSENSE_DDP_TIMEOUT in the workers: a lost rank is named within it


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Run(RankRun):
    """world worker processes of one DDP run in folder."""

    def __init__(self, folder, world, hosts=None, **opts):
        """`hosts`: per rank, (command prefix, address, interface) — the
        rank's "host" (a network namespace) and the address rank 0's store
        listens on; default: every rank on loopback."""
        self.folder = Path(folder)
        self.world = world
        port = free_port()
        self.procs = []
        for rank in range(world):
            prefix, master, extra = [], "127.0.0.1", {}
            if hosts:
                prefix, master, interface = hosts[rank][0], hosts[0][1], hosts[rank][2]
                extra = {"GLOO_SOCKET_IFNAME": interface, "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1",
                         "GROUP_RANK": str(rank)}
            env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank),
                       MASTER_ADDR=master, MASTER_PORT=str(port), NANSENSE_DDP_TIMEOUT=str(TIMEOUT),
                       OMP_NUM_THREADS="1")
            env.update(extra)
            self.procs.append(subprocess.Popen(prefix + [sys.executable, str(WORKER), json.dumps(opts)], cwd=folder,
                                               env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))

    def until(self, condition, what, timeout=60):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = condition()
            if value:
                return value
            if any(p.poll() not in (None, 0) for p in self.procs) and not getattr(self, "dying", False):
                pytest.fail(f"a rank failed while waiting for {what}:\n{self.output()}")
            time.sleep(0.05)
        pytest.fail(f"timed out waiting for {what}:\n{self.output()}")

    def wait(self, timeout=60):
        for p in self.procs:
            p.wait(timeout=timeout)
        return [p.returncode for p in self.procs]

    def finish(self, api):
        """Detach rank 0 (again at each later pause: the NaN weights trip
        the checks once more) until every rank has exited 0."""
        def ended():
            if all(p.poll() is not None for p in self.procs):
                return True
            try:
                if api.get("/api/status")["state"] == "paused":
                    api.post("/api/run", {"detach": True})
            except OSError:
                pass  # rank 0 exited meanwhile
            return False
        self.until(ended, "every rank to finish")
        assert [p.returncode for p in self.procs] == [0] * self.world, self.output()

    def output(self):
        out = []
        for r, p in enumerate(self.procs):
            if p.poll() is not None:
                out.append(f"--- rank {r} (exit {p.returncode}):\n{p.stdout.read()}")
        return "\n".join(out)

    def kill(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait()


@pytest.fixture
def run(tmp_path, rank_runs):
    def make(world=2, **opts):
        rank_runs.append(Run(tmp_path, world, **opts))
        return rank_runs[-1]

    return make


def paused_at(status):
    p = status["live_position"]
    return p["epoch"], p["batch_idx"]


@pytest.mark.parametrize("world", [2, 4])
def test_every_rank_follows_rank_0_pause_step_and_run(run, world):
    r = run(world, epochs=2, batches=3)
    api = r.api()
    # Served, the run pauses after its first batch: on every rank.
    status = r.until(lambda: (s := api.get("/api/status"))["state"] == "paused" and s, "the first pause")
    assert paused_at(status) == (0, 0)
    r.until(lambda: r.all_done((0, 0)), "every rank to finish batch 0")
    status = api.post("/api/step", {"unit": "batch", "timeout_seconds": 30})
    assert status["state"] == "paused" and paused_at(status) == (0, 1)
    r.until(lambda: r.all_done((0, 1)), "every rank to finish batch 1")
    for rank in range(world):
        assert r.last(rank, "begin") == (0, 1), f"rank {rank} went past rank 0's pause: {r.events(rank)}"
    # Run: to the last batch of the run, where every rank stands too.
    status = api.post("/api/run", {"timeout_seconds": 30})
    assert status["state"] == "paused" and paused_at(status) == (1, 2)
    r.until(lambda: r.all_done((1, 2)), "every rank to finish the last batch")
    api.post("/api/run", {"detach": True})
    assert r.wait() == [0] * world, r.output()
    batches = [[tuple(e["done"]) for e in r.events(rank) if "done" in e] for rank in range(world)]
    assert all(b == batches[0] for b in batches) and len(batches[0]) == 6
    # The followers served nothing and printed nothing.
    outputs = [p.stdout.read() for p in r.procs]
    assert all("[nansense]" not in out for out in outputs[1:]), outputs


def held_before_the_step(r, api, where):
    """Every rank holds the update of batch `where` inside its backward,
    before its optimizer step (rank 0 allows skipping it once every
    follower said it holds it)."""
    r.until(lambda: api.get("/api/debug")["skip_refused"] is None, "every rank to hold the update")
    for rank in range(r.world):
        assert r.last(rank, "begin") == where, (rank, r.events(rank))
        assert (r.last(rank, "stepping") or (-1, -1)) < where, f"rank {rank} made the poisoned step: {r.events(rank)}"


def weights_after_each_batch(r, rank):
    return [(tuple(e["done"]), e["weights"]) for e in r.events(rank) if "done" in e]


# DDP's static_graph=True reduces its first batch's gradients in a delayed
# final callback of its own: the check of the averaged ones still runs after it.
@pytest.mark.parametrize("static_graph, nan_batch", [(False, 2), (True, 0)])
def test_a_nan_on_rank_1_holds_every_rank_before_its_step_and_skipping_it_keeps_the_replicas_finite(
        run, tmp_path, static_graph, nan_batch):
    r = run(2, epochs=1, batches=4, nan_rank=1, nan_batch=nan_batch, static_graph=static_graph)
    api = r.api()
    if nan_batch:
        r.until(lambda: api.get("/api/status")["state"] == "paused", "the first pause")
        api.post("/api/run", {"detach": True})
    # Rank 1's own gradients trip; DDP's averaging carries the NaN into
    # every rank's, so each stops in that batch's backward, before its
    # optimizer step. Rank 0 pauses there and names the rank it came from
    # (rank 1's note may come first: its report holds once rank 0's own
    # check of the averaged gradients held the update).
    report = r.until(lambda: (d := api.get("/api/debug")).get("error") and "rank 1 at" in
                     ((d["error"].get("root_cause") or {}).get("summary") or "") and
                     d["error"].get("update") == "held" and d, "rank 0 to hold the update, naming rank 1")
    error = report["error"]
    assert error["position"]["batch_idx"] == nan_batch and error["update"] == "held", error
    summary = error["root_cause"]["summary"]
    assert f"The checks tripped on rank 1 of 2: rank 1 at epoch 0 | train batch {nan_batch}" in summary, summary
    assert "rank 0 at" not in summary and error["root_cause"]["status"] == "from_outside", summary
    assert "own gradients were finite" in summary, summary
    status = api.get("/api/status")
    assert status["state"] == "paused" and paused_at(status) == (0, nan_batch), status
    held_before_the_step(r, api, (0, nan_batch))
    capsules = {rank: sorted((tmp_path / "nansense_capsules" / f"rank_{rank}").glob("*")) for rank in (0, 1)}
    assert capsules[1] and not capsules[0], capsules  # rank 0's own batch was finite
    assert str(capsules[1][0].name) in summary
    # Skipped on rank 0, skipped on every rank: the replicas stay equal and
    # finite, and train on.
    assert api.post("/api/debug/choose_update", {"action": "skip"})["error"]["update"] == "held"
    api.post("/api/run", {"detach": True})
    assert r.wait() == [0, 0], r.output()
    weights = [weights_after_each_batch(r, rank) for rank in (0, 1)]
    assert [w[0] for w in weights[0]] == [(0, b) for b in range(4)], weights[0]
    assert weights[0] == weights[1]
    assert all(torch.isfinite(torch.tensor(w[1])).all() for w in weights[0]), weights[0]
    # The tripped batch's update was skipped: its weights are the ones before it.
    if nan_batch:
        assert weights[0][nan_batch][1] == weights[0][nan_batch - 1][1]
    else:
        start = [e["weights"] for e in r.events(0) if "epoch" in e][0]
        assert sum(weights[0][0][1]) == pytest.approx(start, abs=1e-9)

    # Rank 1's capsule alone (no process group) reproduces its NaN.
    torch.manual_seed(0)
    fresh = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    capsule = nansense.replay_capsule(str(capsules[1][0]), fresh)
    x, y = capsule.batch
    loss = F.cross_entropy(fresh(x), y)
    loss.backward()
    assert not torch.isfinite(loss)
    assert capsule.gradients_match() == (True, "")


def test_a_nan_on_rank_0_holds_every_rank_past_the_groups_timeout_and_skip_skips_everywhere(run):
    # Every rank checks its gradients again once DDP's final callback has
    # averaged them (the collectives are over): rank 0 pauses there with its
    # own NaN, rank 1 waits there for rank 0's choice, for longer than the
    # process group's timeout, and skipping the update skips it on both.
    r = run(2, epochs=1, batches=4, nan_rank=0, nan_batch=2, pg_timeout=3)
    api = r.api()
    r.until(lambda: api.get("/api/status")["state"] == "paused", "the first pause")
    api.post("/api/run", {"detach": True})
    # Rank 1's note of the averaged NaN may be recorded first; rank 0's own
    # finding takes its place and holds.
    error = r.until(lambda: (e := api.get("/api/debug").get("error")) and e["update"] == "held" and e,
                    "the NaN on rank 0 held")
    assert error["position"]["batch_idx"] == 2, error
    assert error["root_cause"]["status"] != "from_outside" and error["capsule"], error  # rank 0's own
    held_before_the_step(r, api, (0, 2))
    time.sleep(4)  # the pause outlasts the process group's timeout (3 s)
    assert api.get("/api/status")["debug"]["error"]["skip_refused"] is None
    assert api.post("/api/debug/choose_update", {"action": "skip"})["error"]["update"] == "held"
    api.post("/api/run", {"detach": True})
    assert r.wait() == [0, 0], r.output()
    weights = [weights_after_each_batch(r, rank) for rank in (0, 1)]
    assert [w[0] for w in weights[0]] == [(0, b) for b in range(4)] and weights[0] == weights[1], weights
    assert weights[0][2][1] == weights[0][1][1] and all(torch.isfinite(torch.tensor(w[1])).all() for w in weights[0])


def test_skipping_is_refused_while_a_rank_whose_checks_are_off_made_its_step(run):
    # Rank 1 does not check: it makes the poisoned step and waits at the
    # boundary, so skipping rank 0's update alone would split the replicas.
    r = run(2, epochs=1, batches=4, nan_rank=0, nan_batch=2, checks_off_rank=1)
    api = r.api()
    r.until(lambda: api.get("/api/status")["state"] == "paused", "the first pause")
    api.post("/api/run", {"detach": True})
    error = r.until(lambda: (d := api.get("/api/debug")).get("error") and d["error"], "the NaN on rank 0")
    assert error["position"]["batch_idx"] == 2 and error["update"] == "held", error
    r.until(lambda: r.last(1, "done") == (0, 2), "rank 1 to make its step")
    assert r.last(0, "begin") == (0, 2) and r.last(0, "stepping") == (0, 1), r.events(0)
    # The UI knows (its Skip button is off and says why).
    assert "distributed run" in (api.get("/api/debug")["skip_refused"] or "")
    assert "distributed run" in (api.get("/api/status")["debug"]["error"]["skip_refused"] or "")
    code, body, _ = api.request("POST", "/api/debug/choose_update", {"action": "skip"})
    assert code == 409 and b"distributed run" in body and b"time travel" in body, (code, body)
    assert api.post("/api/debug/choose_update", {"action": "apply"})["error"]["update"] == "held"
    r.finish(api)
    for rank in (0, 1):
        assert [tuple(e["done"]) for e in r.events(rank) if "done" in e] == [(0, b) for b in range(4)], r.events(rank)


def test_a_follower_holding_its_update_never_blocks_a_collective_rank_0_makes_before_its_step(run):
    # No UI: rank 0 cannot pause, and its loop all-reduces the loss between
    # backward and the optimizer step. Rank 1 holds its tripped update until
    # rank 0's checks of that batch are over (not until rank 0's next
    # boundary, which lies past that collective): every rank finishes, well
    # within the process group's timeout.
    r = run(2, epochs=1, batches=4, nan_rank=1, nan_batch=1, unserved=True, sum_losses=True, pg_timeout=20)
    assert r.wait(timeout=60) == [0, 0], r.output()
    for rank in (0, 1):
        assert [tuple(e["done"]) for e in r.events(rank) if "done" in e] == [(0, b) for b in range(4)], r.events(rank)
    # Rank 1 held its update and applied it as rank 0 did.
    assert [e["update"] for e in r.events(1) if "update" in e] == ["applied"], r.events(1)


def test_a_follower_holding_its_update_is_answered_when_rank_0s_checks_are_off(run):
    # The same loop with rank 0's own checks off (as its UI's settings may
    # leave them): nothing on rank 0 decides its update after backward, yet
    # rank 1, tripped, holds its own until told. Rank 0 says "applied" when
    # its unchecked batch begins; before, rank 1 waited for rank 0's next
    # boundary while rank 0 waited for rank 1 in the all-reduce, until the
    # process group's timeout ended both.
    r = run(2, epochs=1, batches=4, nan_rank=1, nan_batch=1, unserved=True, sum_losses=True, pg_timeout=20,
            checks_off_rank=0)
    assert r.wait(timeout=60) == [0, 0], r.output()
    for rank in (0, 1):
        assert [tuple(e["done"]) for e in r.events(rank) if "done" in e] == [(0, b) for b in range(4)], r.events(rank)
    assert [e["update"] for e in r.events(1) if "update" in e] == ["applied"], r.events(1)


def test_a_jump_from_a_followers_trip_is_made_before_the_next_batch(run):
    # Rank 1's batch tripped: every rank holds it, and a jump asked for
    # there is made at the boundary after it, before any rank begins the
    # next batch on the poisoned weights.
    r = run(2, epochs=2, batches=4, nan_rank=1, nan_batch=2, time_travel=True)
    api = r.api()
    r.until(lambda: api.get("/api/status")["state"] == "paused", "the first pause")
    api.post("/api/run", {"detach": True})
    r.until(lambda: (d := api.get("/api/debug")).get("error") and "rank 1 at" in
            ((d["error"].get("root_cause") or {}).get("summary") or ""), "the report naming rank 1")
    status = r.until(lambda: (s := api.get("/api/status"))["state"] == "paused" and s, "the pause at the boundary")
    assert paused_at(status) == (0, 2), status
    status = api.post("/api/time_travel", {"epoch": 0, "timeout_seconds": 30})
    assert status["state"] == "paused" and paused_at(status) == (0, 0), status
    r.until(lambda: r.all_done((0, 0)), "every rank to run epoch 0's first batch again")
    for rank in (0, 1):
        begun = [tuple(e["begin"]) for e in r.events(rank) if "begin" in e]
        assert begun == [(0, 0), (0, 1), (0, 2), (0, 0)], (rank, begun)
    r.finish(api)


def test_check_settings_from_rank_0s_ui_stay_rank_0s_own(run):
    r = run(2, epochs=1, batches=2)
    api = r.api()
    r.until(lambda: api.get("/api/status")["state"] == "paused", "the first pause")
    # The UI asks for the traced re-run: rank 0 keeps its rank_0 capsule
    # folder and no re-run (it would run one more backward than the
    # followers, and DDP's collectives would pair the wrong batches).
    code, body, _ = api.request("POST", "/api/debug/settings", {"rerun_to_trace": True})
    assert code == 200, body
    settings = json.loads(body)["settings"]
    assert settings["rerun_to_trace"] is False, settings
    assert settings["capsule_dir"].endswith("rank_0"), settings
    r.finish(api)


def test_a_trip_on_a_follower_alone_pauses_every_rank(run):
    # Rank 0's own checks off: only rank 1's news of its NaN can pause the
    # run (rank 0's engine records that trip as well, which must not pass for
    # rank 0's own). Rank 0 lets the followers a batch ahead meanwhile, so
    # the pause comes at the first boundary where it waits again.
    r = run(2, epochs=1, batches=6, nan_rank=1, nan_batch=2, checks_off_rank=0)
    api = r.api()
    r.until(lambda: api.get("/api/status")["state"] == "paused", "the first pause")
    api.post("/api/run", {})
    status = r.until(lambda: (s := api.get("/api/status"))["state"] == "paused" and paused_at(s) != (0, 0) and s,
                     "the pause for rank 1's trip")
    where = paused_at(status)
    assert (0, 2) <= where <= (0, 4), status
    r.until(lambda: r.all_done(where), f"every rank to finish {where}")
    assert r.last(0, "begin") == where and r.last(1, "begin") == where
    error = api.get("/api/debug")["error"]
    summary = error["root_cause"]["summary"]
    assert "rank 1 at epoch 0 | train batch 2" in summary and "rank 0 at" not in summary, summary
    assert error["position"]["batch_idx"] == 2, error  # the batch rank 1 tripped on
    r.finish(api)


def test_a_rank_killed_in_a_pause_is_named_and_rank_0_stops(run):
    r = run(2, epochs=1, batches=4, hold_on_error=True)
    api = r.api()
    r.until(lambda: api.get("/api/status")["state"] == "paused", "the first pause")
    r.until(lambda: r.all_done((0, 0)), "every rank to finish batch 0")
    r.dying = True
    killed = time.monotonic()
    r.procs[1].send_signal(signal.SIGKILL)
    # Rank 0's loop ends with the error; its UI (kept up by the worker) says why.
    r.until(lambda: (r.folder / "failed").exists(), "rank 0's loop to end with an error", timeout=TIMEOUT + 20)
    assert time.monotonic() - killed < TIMEOUT + 20
    status = api.get("/api/status")
    assert status["state"] == "lost", status
    assert "rank 1 of 2" in status["lost_reason"], status["lost_reason"]
    (r.folder / "release").touch()
    assert r.procs[0].wait(timeout=30) != 0
    out = r.procs[0].stdout.read()
    assert "DistributedError" in out and "rank 1 of 2" in out, out


def test_rank_0_killed_in_a_pause_ends_the_followers_with_an_error(run):
    r = run(2, epochs=1, batches=4)
    api = r.api()
    r.until(lambda: api.get("/api/status")["state"] == "paused", "the first pause")
    r.until(lambda: r.all_done((0, 0)), "every rank to finish batch 0")
    r.dying = True
    r.procs[0].send_signal(signal.SIGKILL)
    assert r.procs[1].wait(timeout=TIMEOUT + 20) != 0
    out = r.procs[1].stdout.read()
    assert "DistributedError" in out, out


def test_start_on_only_some_ranks_is_refused(run):
    r = run(2, epochs=1, batches=2, no_start_rank=1)
    r.dying = True
    assert r.procs[0].wait(timeout=TIMEOUT + 30) != 0
    out = r.procs[0].stdout.read()
    assert "nansense.start() ran on rank(s) 0 but not on rank(s) 1" in out, out


def test_a_jump_rewinds_every_rank_in_lockstep(run):
    r = run(2, epochs=3, batches=2, time_travel=True)
    api = r.api()
    r.until(lambda: api.get("/api/status")["state"] == "paused", "the first pause")
    status = api.post("/api/run_until", {"phase": "train", "epoch": 2, "batch": 0, "timeout_seconds": 30})
    assert paused_at(status) == (2, 0)
    status = api.post("/api/time_travel", {"epoch": 1, "timeout_seconds": 30})
    assert status["state"] == "paused" and paused_at(status) == (1, 0)
    r.until(lambda: r.all_done((1, 0)) and all(len([e for e in r.events(k) if "epoch" in e]) == 4 for k in (0, 1)),
            "every rank to run epoch 1 again")
    r.finish(api)
    for rank in (0, 1):
        starts = [(e["epoch"], e["weights"]) for e in r.events(rank) if "epoch" in e]
        assert [s[0] for s in starts] == [0, 1, 2, 1, 2], (rank, starts)
        # Each rank's own checkpoint restored the weights epoch 1 began with.
        assert starts[3][1] == starts[1][1], (rank, starts)
    assert (Path(r.folder) / ".nansense_cache" / "rank_1").is_dir()


def test_a_jump_to_an_epoch_a_rank_lacks_is_refused_for_every_rank(run):
    # Rank 1 cannot make its checkpoint folder: its time travel is off.
    r = run(2, epochs=3, batches=2, time_travel=True, bad_cache_rank=1)
    api = r.api()
    r.until(lambda: api.get("/api/status")["state"] == "paused", "the first pause")
    status = api.post("/api/run_until", {"phase": "train", "epoch": 2, "batch": 0, "timeout_seconds": 30})
    assert paused_at(status) == (2, 0)
    # Rank 0 has the checkpoint; rank 1 does not: refused, naming rank 1,
    # its folder and why, before any rank moved.
    code, body, _ = api.request("POST", "/api/time_travel", {"epoch": 1, "timeout_seconds": 30})
    assert code in (400, 409), (code, body)
    message = json.loads(body)["error"]
    assert "rank 1 has no checkpoint of epoch 1" in message and "blocker/cache" in message, message
    assert "refused for all" in message, message
    status = api.get("/api/status")
    assert status["state"] == "paused" and paused_at(status) == (2, 0)
    r.finish(api)
    for rank in (0, 1):
        starts = [e["epoch"] for e in r.events(rank) if "epoch" in e]
        assert starts == [0, 1, 2], (rank, starts)


@pytest.mark.parametrize("checks", ["off", "on", "on, averaged by hand"])
def test_a_free_running_run_pauses_and_jumps_with_every_rank_at_one_boundary(run, checks):
    # Detached, checks off: nothing can stop rank 0 inside a batch, so it
    # lets the followers past each boundary a batch ahead. Checks on (rank 0
    # served): a NaN could pause it until its batch's backward is checked
    # clean, from which moment it lets them past the next boundary (under
    # DDP its own check of the averaged gradients says so for every rank; a
    # loop that averages them itself waits for every rank's word). Either
    # way a jump and a pause asked for meanwhile still find every rank at
    # one boundary, and the followers seldom wait for rank 0.
    r = run(2, epochs=3, batches=150, time_travel=True, checks_off=checks == "off", by_hand="by hand" in checks)
    api = r.api()
    r.until(lambda: api.get("/api/status")["state"] == "paused", "the first pause")
    api.post("/api/run", {"detach": True})
    r.until(lambda: (r.last(0, "done") or (0, 0))[0] >= 1, "rank 0 to reach epoch 1")
    status = api.post("/api/time_travel", {"epoch": 0, "timeout_seconds": 30})
    assert status["state"] == "paused" and paused_at(status) == (0, 0), status
    r.until(lambda: r.all_done((0, 0)) and all(len([e for e in r.events(k) if "epoch" in e]) >= 3 for k in (0, 1)),
            "every rank to run epoch 0 again")
    for rank in (0, 1):
        assert r.last(rank, "begin") == (0, 0), f"rank {rank} went past rank 0's pause: {r.last(rank, 'begin')}"
        starts = [(e["epoch"], e["weights"]) for e in r.events(rank) if "epoch" in e]
        assert [s[0] for s in starts][-1] == 0 and starts[-1][1] == starts[0][1], (rank, starts)
    api.post("/api/run", {"detach": True})
    r.until(lambda: (r.last(0, "done") or (0, 0)) >= (0, 20), "rank 0 to run on")
    api.post("/api/pause")
    status = r.until(lambda: (s := api.get("/api/status"))["state"] == "paused" and s, "the pause")
    where = paused_at(status)
    r.until(lambda: r.all_done(where), f"every rank to finish {where}")
    for rank in (0, 1):
        assert r.last(rank, "begin") == where, f"rank {rank} went past rank 0's pause at {where}: {r.last(rank, 'begin')}"
    r.finish(api)
    counts = [e for e in r.events(1) if "waited" in e][-1]
    assert counts["boundaries"] > 450, counts
    if checks == "off":
        # Rank 0 lets the follower past as each batch begins: the follower
        # waits only in the last epoch's 150 batches (a jump asked for in its
        # last batch would find no boundary after it) and around the pauses
        # and the jump, and is never asked to report its batches.
        assert counts["waited"] < 150 + (counts["boundaries"] - 150) / 10 and counts["cleans"] == 0, counts
    else:
        # Rank 0 sent decisions once its batch (by hand: every rank's)
        # checked clean (how many came before the follower reached the
        # boundary is a matter of timing: bench/python/ddp.py measures what
        # it saves). By hand it asked for word of every batch checked clean
        # and had it; under DDP it asked for none.
        sent = [e for e in r.events(0) if "sent_clean" in e][-1]["sent_clean"]
        assert sent > 0, sent
        if "by hand" in checks:
            assert counts["cleans"] > 0.9 * counts["boundaries"], counts
        else:
            assert counts["cleans"] == 0, counts


def test_a_followers_own_underflow_stops_every_rank_at_one_boundary(run):
    # Under DDP rank 0 lets the followers past a boundary once its own check
    # of the averaged gradients passes. Rank 1's own gradients of batch 2
    # are subnormal (an underflow trip) while the averaged ones are not:
    # rank 1 holds its update until rank 0 says (applied, as rank 0's was),
    # and rank 0 stops every rank at one boundary, that batch's or the next.
    r = run(2, epochs=1, batches=8, tiny_rank=1, tiny_batch=2)
    api = r.api()
    r.until(lambda: api.get("/api/status")["state"] == "paused", "the first pause")
    api.post("/api/run", {"detach": True})
    report = r.until(lambda: (d := api.get("/api/debug")).get("error") and "rank 1 at" in
                     ((d["error"].get("root_cause") or {}).get("summary") or "") and d, "the report naming rank 1")
    error = report["error"]
    assert error["position"]["batch_idx"] == 2 and "underflow" in error["reasons"], error
    status = r.until(lambda: (s := api.get("/api/status"))["state"] == "paused" and s, "the pause at a boundary")
    where = paused_at(status)
    assert where in ((0, 2), (0, 3)), status  # the end of batch 2 or 3
    r.until(lambda: r.all_done(where), f"every rank to finish {where}")
    for rank in (0, 1):
        assert r.last(rank, "begin") == where, f"rank {rank} went past rank 0's pause at {where}: {r.events(rank)}"
    r.finish(api)
    assert [e["update"] for e in r.events(1) if "update" in e] == ["applied"], r.events(1)


# Free-running (checks off), rank 0 lets rank 1 past its last boundary a
# batch ahead, and rank 1 says nothing there; served with the checks on, the
# decision comes once rank 0's batch checked clean, so rank 1 often
# reaches that boundary first and posts its word (without its end) there.
@pytest.mark.parametrize("checks_off", [True, False])
def test_a_follower_with_a_longer_loop_than_rank_0s_is_not_left_hanging(run, checks_off):
    # Rank 1 runs one batch more and waits inside DDP's collective. Rank 0
    # waits for its last news no longer than for a lost rank, says which
    # rank did not end, and closes; rank 1 then fails.
    r = run(2, epochs=1, batches=3, checks_off=checks_off, longer_rank=1)
    api = r.api()
    r.until(lambda: api.get("/api/status")["state"] == "paused", "the first pause")
    api.post("/api/run", {"detach": True})
    r.dying = True
    codes = r.wait(timeout=TIMEOUT + 30)
    out = r.output()
    assert codes[0] == 0 and codes[1] != 0, out
    assert "rank(s) 1 did not reach the end of the loop with rank 0" in out, out


def single_process_stats(world, epochs, batches):
    """The worker's run in one process over the global batches (no DDP):
    the statistics the ranks' shards must add up to."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(1)
    data = [(torch.randn(4 * world, 4, generator=g), torch.randint(0, 2, (4 * world,), generator=g))
            for _ in range(batches)]
    session = nansense.start(model, epochs=epochs, phases={"train": batches}, optimizer=optimizer, port=None,
                             open_browser=False)
    session.set_stats_scope("all")
    for epoch in range(epochs):
        for x, y in session.batches(data, phase="train", epoch=epoch):
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
            optimizer.step()
    session.close()
    return {f"{layer}/{phase}/{epoch}": b for (layer, phase, epoch), b in session.watch_snapshot().stats.items()}


@pytest.mark.parametrize("world", [2, 4])
def test_statistics_add_up_across_ranks_to_the_global_batch(run, world):
    # Only rank 0 sets the scope: the followers collect what rank 0 collects.
    r = run(world, epochs=2, batches=3, scope="all", dump_stats=True)
    api = r.api()
    r.until(lambda: api.get("/api/status")["state"] == "paused", "the first pause")
    # Paused after batch 0: the followers' shards of it are added as each
    # comes (stats.ranks says the run's size from the first one on).
    status = r.until(lambda: (s := api.get("/api/status"))["stats"]["ranks"] == world and s, "the followers' statistics")
    assert paused_at(status) == (0, 0)
    want = world * 4 * 8  # the global batch: world ranks x 4 samples x 8 features
    first = r.until(lambda: (f := api.get("/api/stats/history?layer=0&phase=train")["phases"]["train"][0])
                    ["activation"]["n"] == want and f, f"every rank's shard of batch 0 ({want} values)")
    assert first["epoch"] == 0 and first["batches"] == 1
    assert paused_at(api.get("/api/status")) == (0, 0)
    api.post("/api/run", {"detach": True})
    assert r.wait() == [0] * world, r.output()

    got = json.loads((Path(r.folder) / "stats.json").read_text())
    assert got["ranks"] == world
    want = single_process_stats(world, epochs=2, batches=3)
    assert set(got["buckets"]) == set(want), (sorted(got["buckets"]), sorted(want))
    for key, bucket in want.items():
        mine = got["buckets"][key]
        a, b = mine["activation"], bucket.activations
        assert a["n"] == b.n, key
        assert a["sum"] == pytest.approx(b.sum, rel=1e-5, abs=1e-5), key
        assert a["min"] == pytest.approx(b.min, abs=1e-6) and a["max"] == pytest.approx(b.max, abs=1e-6), key
        if b.hist is not None:
            # The same values in the same bins (a value on a bin edge may
            # round to its neighbour).
            assert sum(a["hist"]) == sum(b.hist), key
            assert sum(abs(x - y) for x, y in zip(a["hist"], b.hist)) <= 2, key
        # Each rank's activation gradients are of its own mean loss: the
        # same count, world times the single process's.
        assert a["dead"] == b.dead_channel_count, key
        assert a["median"] == pytest.approx(b.median, rel=0.2, nan_ok=True), key  # the same bin, or its neighbour
        if bucket.gradients is None:  # the model input's
            assert mine["gradient"] is None, key
            continue
        assert mine["gradient"]["n"] == bucket.gradients.n, key
        assert mine["gradient"]["sum"] == pytest.approx(world * bucket.gradients.sum, rel=1e-4, abs=1e-6), key


@pytest.fixture
def second_host():
    """A second "host" on this machine: a network namespace of its own, linked
    to this one by a veth pair (10.231.<k>.1 here, .2 there), made and removed
    by the test. Needs root (CAP_NET_ADMIN) and iproute2: skipped otherwise."""
    import shutil
    if os.geteuid() != 0 or not shutil.which("ip"):
        pytest.skip("a network namespace needs root and iproute2 (ip)")
    k = os.getpid() % 250
    ns, here, there = f"nansense-host-{os.getpid()}", f"nsv{os.getpid() % 100000}a", f"nsv{os.getpid() % 100000}b"

    def ip(*args, inside=False):
        cmd = (["ip", "netns", "exec", ns] if inside else []) + ["ip", *args]
        return subprocess.run(cmd, capture_output=True, text=True)

    made = ip("netns", "add", ns)
    if made.returncode != 0:
        pytest.skip(f"no network namespace here: {made.stderr.strip()}")
    try:
        for args, inside in [(("link", "add", here, "type", "veth", "peer", "name", there), False),
                             (("link", "set", there, "netns", ns), False),
                             (("addr", "add", f"10.231.{k}.1/30", "dev", here), False),
                             (("link", "set", here, "up"), False),
                             (("addr", "add", f"10.231.{k}.2/30", "dev", there), True),
                             (("link", "set", there, "up"), True),
                             (("link", "set", "lo", "up"), True)]:
            done = ip(*args, inside=inside)
            assert done.returncode == 0, (args, done.stderr)
        yield [([], f"10.231.{k}.1", here), (["ip", "netns", "exec", ns], f"10.231.{k}.2", there)]
    finally:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        subprocess.run(["ip", "link", "del", here], capture_output=True)


def test_two_hosts_pause_step_and_a_nan_on_the_second_pauses_both(run, second_host, tmp_path):
    # Two "hosts" (rank 1 in a network namespace of its own, over a veth
    # link): rank 0's store and Gloo's connections cross the link, not
    # loopback, as in a two-node torchrun (--nnodes=2, one process each).
    r = run(2, hosts=second_host, epochs=1, batches=4, nan_rank=1, nan_batch=2)
    api = r.api()
    status = r.until(lambda: (s := api.get("/api/status"))["state"] == "paused" and s, "the first pause")
    assert paused_at(status) == (0, 0)
    # Rank 1 runs on the other network stack (`ip netns exec` execs it).
    assert os.readlink(f"/proc/{r.procs[1].pid}/ns/net") != os.readlink("/proc/self/ns/net")
    status = api.post("/api/step", {"unit": "batch", "timeout_seconds": 30})
    assert status["state"] == "paused" and paused_at(status) == (0, 1)
    r.until(lambda: r.all_done((0, 1)), "both hosts to finish batch 1")
    assert r.last(1, "begin") == (0, 1), r.events(1)
    api.post("/api/run", {"detach": True})
    report = r.until(lambda: (d := api.get("/api/debug")).get("error") and "rank 1 at" in
                     ((d["error"].get("root_cause") or {}).get("summary") or "") and
                     d["error"].get("update") == "held" and d, "rank 0 to hold the update, naming rank 1")
    assert report["error"]["position"]["batch_idx"] == 2
    status = api.get("/api/status")
    assert status["state"] == "paused" and paused_at(status) == (0, 2), status
    held_before_the_step(r, api, (0, 2))
    assert sorted((tmp_path / "nansense_capsules" / "rank_1").glob("*")), "rank 1 wrote no capsule"
    r.finish(api)
