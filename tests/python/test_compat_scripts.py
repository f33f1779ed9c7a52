"""Scripts written to the reference API alone (NaNsense 0.4.0's: its manual
loop, Lightning, DDP, custom metrics and moments, in the shapes of its
public examples; tests/python/compat/) run unchanged under nansense, both
unserved and served. Served, the test drives the live UI over the HTTP API
(the first batch paused, one step, then run on) before the script finishes;
each script prints a RESULT line with what it saw, which the test checks."""

import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from conftest import Api

COMPAT = Path(__file__).resolve().with_name("compat")
WAIT = 120  # bounds a failure; every wait ends as soon as its condition holds


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(script, tmp_path, port=None, ranks=1):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    args = [str(COMPAT / script)] + (["--port", str(port)] if port else [])
    if ranks > 1:
        command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(ranks),
                   "--master_port", str(free_port()), *args]
    else:
        command = [sys.executable, *args]
    return subprocess.Popen(command, cwd=tmp_path, env=env, text=True, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True)


def results(output):
    return [json.loads(line.split("RESULT ", 1)[1]) for line in output.splitlines() if "RESULT " in line]


def finish_unserved(proc, ranks):
    try:
        out, _ = proc.communicate(timeout=WAIT)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 0, out
    found = results(out)
    assert len(found) == ranks, out
    return found, out


SCRIPTS = {"manual_loop.py": 1, "custom_metrics.py": 1, "moments.py": 1, "lightning_fit.py": 1, "ddp.py": 2}


TESTS = {"test_manual_loop": "manual_loop.py", "test_custom_metrics": "custom_metrics.py",
         "test_moments": "moments.py", "test_lightning": "lightning_fit.py", "test_ddp": "ddp.py"}


@pytest.fixture(scope="module")
def unserved(request, tmp_path_factory):
    """The selected tests' unserved runs, started together when the first
    test needs one (they overlap the served runs): script -> its process."""
    wanted = {TESTS[item.originalname] for item in request.session.items
              if getattr(item, "originalname", None) in TESTS and "unserved" in item.name}
    procs = {}
    for script in sorted(wanted):
        if script == "lightning_fit.py" and importlib.util.find_spec("lightning") is None:
            continue
        procs[script] = launch(script, tmp_path_factory.mktemp(script.split(".")[0]), ranks=SCRIPTS[script])
    yield procs
    for proc in procs.values():
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def run_unserved(script, unserved):
    return finish_unserved(unserved[script], SCRIPTS[script])


def wait_for_api(proc, port, seen):
    """The API once the script's banner names its address (lines read are
    kept in seen)."""
    for line in proc.stdout:
        seen.append(line)
        if f"127.0.0.1:{port}" in line:
            return Api(f"http://127.0.0.1:{port}")
    raise AssertionError(f"the script ended without serving on port {port}:\n{''.join(seen)}")


def drive_training(api, proc):
    """The served UI is live: the loop paused on its first batch, a step
    moves it one batch on, then it runs to the end."""
    status = api.post("/api/pause", {"timeout_seconds": WAIT})
    assert status["state"] == "paused", status
    first = status["live_position"]
    status = api.post("/api/step", {"unit": "batch", "timeout_seconds": WAIT})
    assert status["state"] == "paused", status
    second = status["live_position"]
    assert (second["epoch"], second["phase"], second["batch_idx"]) != (first["epoch"], first["phase"],
                                                                      first["batch_idx"])
    arch = api.get("/api/architecture")
    assert {"0", "3"} <= {layer["name"] for layer in arch["layers"]}, arch
    api.post("/api/run", {"detach": True})


def finish(proc, seen, ranks=1):
    """Read until every rank reported (the post-mortem UI keeps the script
    up after that: stop() ends it as Ctrl-C does)."""
    found = results("".join(seen))
    for line in proc.stdout:
        seen.append(line)
        if "RESULT " in line:
            found.append(json.loads(line.split("RESULT ", 1)[1]))
        if len(found) == ranks:
            break
    assert len(found) == ranks, "".join(seen)
    return found, "".join(seen)


def stop(proc):
    for _ in range(3):
        if proc.poll() is not None:
            break
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            pass
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise AssertionError("the script did not end on Ctrl-C")


def run_served(script, tmp_path, ranks=1, drive=drive_training):
    port = free_port()
    proc = launch(script, tmp_path, port=port, ranks=ranks)
    seen: list = []
    try:
        # A watchdog: a hung script fails the test instead of blocking it.
        timer = threading.Timer(WAIT, lambda: os.killpg(proc.pid, signal.SIGKILL))
        timer.start()
        try:
            drive(wait_for_api(proc, port, seen), proc)
            return finish(proc, seen, ranks)
        finally:
            timer.cancel()
    finally:
        stop(proc)


def run(script, served, tmp_path, unserved):
    if served:
        return run_served(script, tmp_path, ranks=SCRIPTS[script])
    return run_unserved(script, unserved)


# ---- the scripts


@pytest.mark.parametrize("served", [False, True], ids=["unserved", "served"])
def test_manual_loop(tmp_path, served, unserved):
    [r], out = run("manual_loop.py", served, tmp_path, unserved)
    assert r["closed"] and r["trained"] and not r["lost"], out
    assert r["last"] == ["val", 1, 1, True], out  # the declared schedule's last batch
    assert r["phases"] == {"train": 6, "val": 2}
    assert r["pause_count"] >= 2 if served else r["pause_count"] == 0, out


@pytest.mark.parametrize("served", [False, True], ids=["unserved", "served"])
def test_custom_metrics(tmp_path, served, unserved):
    [r], out = run("custom_metrics.py", served, tmp_path, unserved)
    assert r["errors"] == {}, out
    assert r["sparsity_points"] >= 12 and r["sparsity_in_range"], out  # a point per training batch
    assert r["spread_series"] == ["range", "std"] and r["spread_epochs"] == [0, 1], out
    assert "1" in r["zscore_layers"], out
    assert "3.weight" in r["adam_update_params"], out


@pytest.mark.parametrize("served", [False, True], ids=["unserved", "served"])
def test_moments(tmp_path, served, unserved):
    def drive_showcase(api, proc):
        status = api.get("/api/status")
        assert status["locked"] is True and status["state"] != "finished", status
        code, body, _ = api.request("POST", "/api/step", {"unit": "batch"})
        assert code >= 400, body  # locked: run control is refused
        assert {"0", "3"} <= {layer["name"] for layer in api.get("/api/architecture")["layers"]}
        os.killpg(proc.pid, signal.SIGINT)  # the showcase parks until Ctrl-C

    if served:
        [r], out = run_served("moments.py", tmp_path, drive=drive_showcase)
    else:
        [r], out = run_unserved("moments.py", unserved)
    assert r["position"] == ["train", 1, 5] and r["weights_restored"], out
    assert r["watched"] == ["1"] and r["scope"] in ("none", "all"), out
    assert "1" in r["stats_layers"], out


def need_lightning():
    if importlib.util.find_spec("lightning") is None:
        pytest.skip("lightning is not installed (pip install lightning; requirements.txt has it)")


@pytest.mark.parametrize("served", [False, True], ids=["unserved", "served"])
def test_lightning(tmp_path, served, unserved):
    need_lightning()
    [r], out = run("lightning_fit.py", served, tmp_path, unserved)
    assert r["closed"] and r["last"] == ["val", 1, 1], out
    assert r["phases"] == {"train": 6, "val": 2}, out
    assert r["time_travel_epochs"] == [0, 1], out
    assert r["pause_count"] >= 2 if served else r["pause_count"] == 0, out


@pytest.mark.parametrize("served", [False, True], ids=["unserved", "served"])
def test_ddp(tmp_path, served, unserved):
    found, out = run("ddp.py", served, tmp_path, unserved)
    assert sorted(r["rank"] for r in found) == [0, 1], out
    for r in found:
        assert r["world"] == 2 and r["closed"], out
        assert r["last"] == ["val", 1, 1], out  # 3 train batches a rank, 2 val
    assert found[0]["weights"] == found[1]["weights"], "the replicas' weights differ:\n" + out
    leader = next(r for r in found if r["rank"] == 0)
    assert leader["cached_epochs"] == [0, 1], out
    assert leader["pause_count"] >= 2 if served else leader["pause_count"] == 0, out
