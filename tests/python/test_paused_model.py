"""What the paused Python model offers: snapshots the user cannot corrupt,
exact module scopes after a forward that raised, the input transform,
experiments that call the Python model, serve()'s thread, and Ctrl-C."""

import json
import os
import signal
import struct
import subprocess
import sys
import threading
import zlib

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import nansense
from conftest import Api, SmallCnn, TrainingThread, make_data, make_loader


def train_one_epoch(session, model, optimizer, loader):
    for x, y in session.batches(loader, phase="train"):
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()
    session.close()


def test_snapshot_tensors_are_copies_a_user_edit_cannot_change():
    model = SmallCnn()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    session = nansense.start(model, optimizer=optimizer, port=0, open_browser=False)
    loop = TrainingThread(lambda: train_one_epoch(session, model, optimizer, make_loader(make_data(16))))
    assert session.wait_until_stopped(60) == nansense.RunState.PAUSED
    first = session.snapshot
    kept = {name: t.clone() for name, t in first.activations.items()}
    weight = first.weights["features.0.weight"].clone()
    for t in first.activations.values():
        t.fill_(7.0)
    first.weights["features.0.weight"].zero_()
    first.inputs[0].zero_()
    # The engine's snapshot, the model and the served summary are untouched.
    again = session.snapshot
    for name, t in kept.items():
        assert torch.equal(again.activations[name], t), name
    assert torch.equal(again.weights["features.0.weight"], weight)
    assert torch.equal(model.features[0].weight.detach(), weight)
    assert not torch.equal(again.inputs[0], torch.zeros_like(again.inputs[0]))
    layer = next(layer for layer in Api(session.url).get("/api/snapshot")["layers"] if layer["name"] == "classifier.3")
    assert layer["activation"]["max"] == pytest.approx(kept["classifier.3"].max().item(), abs=1e-5)
    session.detach()
    loop.join()


class Refuses(nn.Module):
    """A module whose forward raises before it runs any op."""

    def forward(self, x):
        raise ValueError("refused")


class Tolerant(nn.Module):
    """Calls a submodule that raises and carries on: the raising call's
    forward hook never runs."""

    def __init__(self, flaky):
        super().__init__()
        self.fc1 = nn.Linear(4, 8)
        self.block = nn.Sequential(Refuses()) if flaky else nn.Sequential()
        self.act = nn.Tanh()
        self.fc2 = nn.Linear(8, 3)

    def forward(self, x):
        h = self.fc1(x)
        if len(self.block):
            try:
                self.block(h)
            except ValueError:
                pass
        return self.fc2(torch.relu(self.act(h)) * 2)


def layer_names_of(model, calls_before):
    torch.manual_seed(0)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    session = nansense.start(model, optimizer=optimizer)
    session.detach()
    session.refresh()  # traced, without pausing
    data = [(torch.randn(2, 4), torch.tensor([0, 1]))]
    for x, y in session.batches(data, phase="train"):
        for _ in range(calls_before):
            # A call that raises out of the model, caught by the loop.
            with pytest.raises(ValueError):
                model.block[0](x)
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()
    session.close()
    return session.layer_names


def test_a_forward_that_raised_and_was_caught_leaves_later_layer_names_exact():
    expected = layer_names_of(Tolerant(flaky=False), 0)
    assert "act" in expected and "relu" in expected and "mul" in expected, expected
    # Raised inside the model (caught by its forward) or out of it (caught by
    # the loop) before the model runs: from the next module call on, scopes
    # are exact again (relu and mul are the root's, not block.0's).
    assert layer_names_of(Tolerant(flaky=True), 0) == expected
    assert layer_names_of(Tolerant(flaky=True), 2) == expected


def rgba_pixels(png):
    """An 8-bit RGBA PNG (what the server draws) as an [H,W,4] uint8 tensor."""
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width, height = 8, b"", 0, 0
    while pos < len(png):
        length = struct.unpack(">I", png[pos:pos + 4])[0]
        kind, body = png[pos + 4:pos + 8], png[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, colour = struct.unpack(">IIBB", body[:10])
            assert (depth, colour) == (8, 6), (depth, colour)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    raw, stride = zlib.decompress(idat), width * 4
    rows, prior = [], bytearray(stride)
    for y in range(height):
        kind, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - 4] if i >= 4 else 0
            b, c = prior[i], prior[i - 4] if i >= 4 else 0
            if kind == 1:
                line[i] = (line[i] + a) & 255
            elif kind == 2:
                line[i] = (line[i] + b) & 255
            elif kind == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(bytes(line))
        prior = line
    return torch.frombuffer(bytearray(b"".join(rows)), dtype=torch.uint8).reshape(height, width, 4)


class TwoChannelNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(2, 3, 3)
        self.fc = nn.Linear(3 * 6 * 6, 4)

    def forward(self, x):
        return self.fc(torch.flatten(F.relu(self.conv(x)), 1))


def test_input_transform_draws_a_two_channel_input_as_an_image():
    model = TwoChannelNet()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    seen, fail = [], []

    def to_rgb(sample):
        if fail:
            raise RuntimeError("no picture today")
        seen.append((threading.get_ident(), sample.clone()))
        return torch.stack([sample[0], sample[1], torch.zeros_like(sample[0])]).clamp(0, 1)

    g = torch.Generator().manual_seed(4)
    data = [(torch.rand(3, 2, 8, 8, generator=g), torch.tensor([0, 1, 2]))]
    session = nansense.start(model, optimizer=optimizer, port=0, open_browser=False, input_mean=0.5,
                             input_std=0.25, input_transform=to_rgb)
    loop = TrainingThread(lambda: train_one_epoch(session, model, optimizer, data))
    assert session.wait_until_stopped(60) == nansense.RunState.PAUSED
    api = Api(session.url)
    status, png, headers = api.request("GET", "/api/render/input?sample=1")
    assert status == 200, png[:300]
    info = json.loads(headers["X-Nansense-Render"])
    assert info["layout"] == "image", info
    assert (info["width"], info["height"]) == (8, 8)
    pixels = rgba_pixels(png)
    assert pixels.shape == (8, 8, 4)
    # What the transform returned, in 8 bits: red and green from the two channels, no blue.
    sample = (data[0][0][1] * 0.25 + 0.5).clamp(0, 1)
    assert torch.all(pixels[..., 2] == 0)
    assert (pixels[..., 0].float() - sample[0] * 255).abs().max() <= 1
    assert (pixels[..., 1].float() - sample[1] * 255).abs().max() <= 1
    # Called on a server thread with the sample as it was before normalisation.
    assert len(seen) == 1 and seen[0][0] != threading.get_ident()
    assert torch.allclose(seen[0][1], data[0][0][1] * 0.25 + 0.5, atol=1e-6)
    # A transform that raises: the request says so, training is untouched.
    fail.append(True)
    status, body, _ = api.request("GET", "/api/render/input?sample=2")
    assert status == 400
    assert b'the input transform for \\"input\\" failed' in body and b"no picture today" in body, body
    session.detach()
    loop.join()


class CountingCnn(SmallCnn):
    def __init__(self):
        super().__init__()
        self.calls = []

    def forward(self, x):
        self.calls.append(threading.get_ident())
        return super().forward(x)


def test_gradcam_runs_on_the_paused_python_model():
    model = CountingCnn()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    session = nansense.start(model, optimizer=optimizer, port=0, open_browser=False)
    loop = TrainingThread(lambda: train_one_epoch(session, model, optimizer, make_loader(make_data(16))))
    assert session.wait_until_stopped(60) == nansense.RunState.PAUSED
    training_thread = model.calls[0]
    weights = {n: p.detach().clone() for n, p in model.named_parameters()}
    rng = torch.get_rng_state()
    api = Api(session.url)
    calls = len(model.calls)
    result = api.post("/api/experiments/run", {"kind": "gradcam", "layer": "features.0",
                                               "params": {"batch": 2}, "timeout_seconds": 60})
    assert result["stage"] == "done", result
    # The Python forward ran, on the training thread, and left the model as it was.
    assert len(model.calls) > calls and set(model.calls[calls:]) == {training_thread}
    for name, p in model.named_parameters():
        assert torch.equal(p.detach(), weights[name]), name
    assert torch.equal(torch.get_rng_state(), rng)
    status, png, _ = api.request("GET", f"/api/render/experiment?seq={result['seq']}&overlay=true")
    assert status == 200 and png[:4] == b"\x89PNG"
    session.detach()
    loop.join()


def test_serve_returns_a_thread_standing_for_the_server():
    model = SmallCnn()
    session = nansense.start(model)
    server = nansense.serve(session, port=0, open_browser=False)
    assert isinstance(server, threading.Thread) and not server.daemon  # keeps the post-mortem UI up, as the reference
    assert server.is_alive()
    assert server.url == session.url and server.url.startswith("http://127.0.0.1:")
    assert Api(server.url).get("/api/status")["state"] in ("running", "paused")
    # A port already taken: one line says so, and the thread has ended.
    port = int(server.url.rsplit(":", 1)[1].strip("/"))
    other = nansense.serve(nansense.start(SmallCnn()), port=port, open_browser=False)
    other.join(10)
    assert not other.is_alive() and other.url is None
    # The thread ends with the session.
    del session
    server.join(10)
    assert not server.is_alive()
    assert nansense.serve(nansense.start(model, enabled=False), port=0) is None


PAUSED_SCRIPT = """
import threading, torch, nansense
torch.set_num_threads(1)
model = torch.nn.Linear(4, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
session = nansense.start(model, optimizer=optimizer, port=0, open_browser=False)
def announce():
    session.wait_until_stopped(60)
    print("paused", flush=True)
threading.Thread(target=announce, daemon=True).start()
batches = [torch.randn(2, 4) for _ in range(3)]
done = 0
try:
    for x in session.batches(batches, phase="train"):
        optimizer.zero_grad()
        model(x).sum().backward()
        optimizer.step()
        done += 1
except KeyboardInterrupt:
    print(f"interrupted after {done} batch(es)", flush=True)
"""


def test_ctrl_c_while_paused_raises_keyboard_interrupt():
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    script = subprocess.Popen([sys.executable, "-c", PAUSED_SCRIPT], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, env=env)
    try:
        lines = []
        for line in script.stdout:
            lines.append(line)
            if line.strip() == "paused":
                break
        assert lines and lines[-1].strip() == "paused", "".join(lines)
        script.send_signal(signal.SIGINT)
        rest, _ = script.communicate(timeout=20)
        assert script.returncode == 0, rest
        assert "interrupted after 1 batch(es)" in rest, rest
    finally:
        if script.poll() is None:
            script.kill()
            script.wait()
