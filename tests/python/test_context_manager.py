"""`with nansense.start(...) as session:` closes the session however the
block ends; ended by an exception (Ctrl-C's KeyboardInterrupt included) it
also stops serving, so the port is free again, and leaves no temp file."""

import os
import signal
import socket
import subprocess
import sys
import urllib.request

import pytest
import torch
import torch.nn.functional as F

import nansense
from conftest import Api, SmallCnn, TrainingThread, make_data, make_loader


def port_of(url):
    return int(url.rstrip("/").rsplit(":", 1)[1])


def port_is_free(port):
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def test_the_block_ending_normally_closes_and_keeps_serving():
    model = SmallCnn()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with nansense.start(model, optimizer=optimizer, port=0, open_browser=False) as session:
        session.detach()
        for x, y in session.batches(make_loader(make_data(16)), phase="train"):
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
            optimizer.step()
    # Closed, and the UI still serves the run's last state (as after close()).
    assert session.state == nansense.RunState.FINISHED
    assert Api(session.url).get("/api/status")["state"] == "finished"


def test_an_exception_closes_stops_serving_and_goes_on():
    model = SmallCnn()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    session = nansense.start(model, optimizer=optimizer, port=0, open_browser=False)
    port = port_of(session.url)

    def train():
        with session:
            for i, (x, y) in enumerate(session.batches(make_loader(make_data(16)), phase="train")):
                optimizer.zero_grad()
                F.cross_entropy(model(x), y).backward()
                if i == 1:
                    raise ValueError("the user's bug")
                optimizer.step()

    loop = TrainingThread(train)
    assert session.wait_until_stopped(60) == nansense.RunState.PAUSED
    session.run()  # the second batch raises
    with pytest.raises(ValueError, match="the user's bug"):
        loop.join()
    assert session.url is None
    assert port_is_free(port)
    with pytest.raises(OSError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/api/status", timeout=5)


INTERRUPTED_SCRIPT = """
import os, socket, sys, threading, torch, nansense
torch.set_num_threads(1)
model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
batches = [(torch.randn(2, 4), torch.randint(0, 2, (2,))) for _ in range(3)]
try:
    with nansense.start(model, optimizer=optimizer, port=0, open_browser=False) as session:
        port = int(session.url.rstrip("/").rsplit(":", 1)[1])
        def announce():
            session.wait_until_stopped(60)
            print("paused", flush=True)
        threading.Thread(target=announce, daemon=True).start()
        for epoch in session.epochs(2, cache_dir="cache"):
            with session.restore_point():
                for x, y in session.batches(batches, phase="train"):
                    optimizer.zero_grad()
                    torch.nn.functional.cross_entropy(model(x), y).backward()
                    optimizer.step()
except KeyboardInterrupt:
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))  # raises when the port is still held
    print(f"interrupted; port {port} free; serving: {session.url}", flush=True)
"""


def test_ctrl_c_in_the_block_leaves_the_port_free_and_no_temp_files(tmp_path):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p), PYTHONDONTWRITEBYTECODE="1")
    script = subprocess.Popen([sys.executable, "-c", INTERRUPTED_SCRIPT], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, env=env, cwd=tmp_path)
    try:
        lines = []
        for line in script.stdout:
            lines.append(line)
            if line.strip() == "paused":
                break
        assert lines and lines[-1].strip() == "paused", "".join(lines)
        script.send_signal(signal.SIGINT)
        rest, _ = script.communicate(timeout=30)
        assert script.returncode == 0, rest
        assert "free; serving: None" in rest, rest
    finally:
        if script.poll() is None:
            script.kill()
            script.wait()
    # The epoch checkpoint it wrote stays (it is what resuming reads); no
    # temp file of an interrupted write is left beside it or anywhere else.
    files = [os.path.relpath(os.path.join(d, f), tmp_path) for d, _, names in os.walk(tmp_path) for f in names]
    assert any(f.startswith("cache") for f in files), files
    assert not [f for f in files if ".tmp" in f], files
