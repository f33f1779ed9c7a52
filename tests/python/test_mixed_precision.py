"""Mixed precision under nansense: a GradScaler's own overflows are counted,
not errors; a non-finite loss or forward is an error even where the scaler
would skip it silently; a collapsing scale is an error naming the op that
overflows; capsules hold the scaler's state and replay bit for bit."""

import gc
import json
import os
import subprocess
import sys
import urllib.request

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import nansense
from conftest import TrainingThread


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.fc2 = nn.Linear(32, 4)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x)))


def loader(n=12, scale_at=None, factor=1.0):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n * 4, 16, generator=g)
    y = torch.randint(0, 4, (n * 4,), generator=g)
    if scale_at is not None:
        x[scale_at * 4:(scale_at + 1) * 4] *= factor
    return DataLoader(TensorDataset(x, y), batch_size=4, shuffle=False)


def fp16_loop(session, model, optimizer, scaler, data, loss_fn=None):
    losses = []
    for x, y in session.batches(data, phase="train"):
        with torch.autocast("cpu", dtype=torch.float16):
            out = model(x)
            loss = F.cross_entropy(out, y) if loss_fn is None else loss_fn(out, y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
        if not session.rerunning:
            losses.append(float(loss))
    return losses


def setup(tmp_path, init_scale=2.0**24, given=True, **kwargs):
    torch.manual_seed(0)
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu", init_scale=init_scale)
    session = nansense.start(model, optimizer=optimizer, open_browser=False, scaler=scaler if given else None,
                             **kwargs)
    session.set_debug_settings(nansense.DebugSettings(capsule_dir=str(tmp_path)))
    return model, optimizer, scaler, session


def status(session):
    with urllib.request.urlopen(session.url + "api/status") as r:
        return json.load(r)


def test_the_scalers_overflows_are_counted_not_errors(tmp_path, capfd):
    gc.collect()  # no other test's GradScaler left to find
    model, optimizer, scaler, session = setup(tmp_path, given=False, port=0)
    session.run()
    losses = fp16_loop(session, model, optimizer, scaler, loader())
    assert len(losses) == 12
    # Found without being given: said once, with how to pass it.
    assert "found the loop's torch.amp.GradScaler" in capfd.readouterr().err
    assert session.debug_error is None
    scale = status(session)["debug"]["loss_scale"]
    assert scale["in_use"] is True
    assert scale["skipped_steps"] >= 2  # 2^24 overflows on the first steps
    assert scale["skips_in_row"] == 0  # the scale settled
    assert scale["scale"] == scaler.get_scale()
    assert scale["last_skipped"]["batch_idx"] == scale["skipped_steps"] - 1
    assert scale["collapse_skips"] == 24 and scale["floor"] == 1.0
    with urllib.request.urlopen(session.url + "api/debug") as r:
        assert json.load(r)["loss_scale"]["skipped_steps"] == scale["skipped_steps"]
    # MCP (through nansense-cli, an agent's shell client): the same counts.
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    out = subprocess.run([sys.executable, "-m", "nansense_cli", "--url", session.url, "get_debug_report"],
                         capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["loss_scale"]["skipped_steps"] == scale["skipped_steps"]
    assert session.loss_scale.skipped_steps == scale["skipped_steps"]
    session.close()
    # The Stats page's series, as published (close publishes the last batch).
    with urllib.request.urlopen(session.url + "api/metrics") as r:
        series = {s["name"]: s["points"] for s in json.load(r)["series"]}
    assert series["loss_scale"][0]["value"] == pytest.approx(2.0**23, rel=1e-5)  # halved after batch 0's overflow
    assert series["skipped_steps"][-1]["value"] == scale["skipped_steps"]


def test_a_nan_loss_with_finite_gradients_is_an_error(tmp_path):
    torch.manual_seed(0)
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    session = nansense.start(model, optimizer=optimizer)
    session.set_debug_settings(nansense.DebugSettings(capsule_dir=str(tmp_path)))
    step = -1
    for x, y in session.batches(loader(4), phase="train"):
        if not session.rerunning:  # the traced re-run sees the same batch again
            step += 1
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        if step == 1:
            loss = torch.log(loss - 100.0)  # NaN; d/dx log(x) = 1/x stays finite
        loss.backward()
        assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
        optimizer.step()
    error = session.debug_error
    assert error is not None
    assert error.position.batch_idx == 1
    assert "nan" in error.reasons
    assert [layer.layer for layer in error.layers] == ["loss"]
    assert error.layers[0].sources == ("loss",)
    assert error.root_cause["status"] == "found"
    assert error.root_cause["producer"]["op"] == "aten::log"
    session.close()


@pytest.mark.parametrize("scaled", [True, False])
def test_only_a_loss_multiplied_by_a_scale_is_taken_for_an_unknown_scalers(tmp_path, capfd, scaled):
    # A hand-rolled scale (loss * a one-element tensor) may be a loss scaler
    # nansense does not know, and a trip says how to pass it; a loss divided
    # by a tensor, as the Hugging Face losses divide by the token count, is
    # not, and the trip says nothing of scalers.
    gc.collect()  # no other test's GradScaler left to find
    torch.manual_seed(0)
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    session = nansense.start(model, optimizer=optimizer)
    session.set_debug_settings(nansense.DebugSettings(capsule_dir=str(tmp_path)))
    factor = torch.tensor(8.0)
    step = -1
    for x, y in session.batches(loader(3), phase="train"):
        if not session.rerunning:
            step += 1
        optimizer.zero_grad()
        out = model(x)
        if step == 1:
            out = out * float("nan")
        loss = F.cross_entropy(out, y)
        (loss * factor if scaled else loss / factor).backward()
        optimizer.step()
    session.close()
    assert session.debug_error is not None and session.debug_error.position.batch_idx == 1
    said = "was multiplied by a tensor, as a loss scaler does" in capfd.readouterr().err
    assert said == scaled


def test_a_nan_forward_under_the_scaler_is_an_error_not_an_overflow(tmp_path):
    model, optimizer, scaler, session = setup(tmp_path, init_scale=2.0**8)

    def loss_fn(out, y):
        return F.cross_entropy(out, y) + torch.sqrt(out.float().mean() - 1e4)  # NaN

    data = loader(3)
    losses = []
    step = -1
    for x, y in session.batches(data, phase="train"):
        if not session.rerunning:
            step += 1
        with torch.autocast("cpu", dtype=torch.float16):
            out = model(x)
            loss = loss_fn(out, y) if step == 2 else F.cross_entropy(out, y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)  # never "No inf checks were recorded"
        scaler.update()
        optimizer.zero_grad()
        if not session.rerunning:
            losses.append(float(loss))
    error = session.debug_error
    assert error is not None and error.position.batch_idx == 2
    assert error.root_cause["producer"]["op"] == "aten::sqrt"
    assert error.loss_scale is None if hasattr(error, "loss_scale") else True
    assert error.capsule
    # The capsule holds the scaler's state as the batch began.
    capsule_scaler = torch.amp.GradScaler("cpu", init_scale=1.0)
    fresh = Net()
    fresh_optimizer = torch.optim.SGD(fresh.parameters(), lr=0.1)
    capsule = nansense.replay_capsule(error.capsule, fresh, fresh_optimizer, scaler=capsule_scaler)
    assert capsule_scaler.get_scale() == 2.0**8
    x, y = capsule.batch
    with torch.autocast("cpu", dtype=torch.float16):
        out = fresh(x)
        loss = loss_fn(out, y)
    capsule_scaler.scale(loss).backward()
    matched, where = capsule.gradients_match()
    assert matched, where
    session.close()


def test_a_collapsing_scale_is_an_error_naming_the_op_that_overflows(tmp_path):
    # From batch 2 a backward function makes every scaled gradient overflow
    # whatever the scale, while the forward and the loss stay finite: the
    # scaler skips step after step and halves its scale each time.
    model, optimizer, scaler, session = setup(tmp_path, init_scale=4.0)

    class Blowup(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x

        @staticmethod
        def backward(ctx, g):
            return g * 1e30  # overflows whatever the scale

    losses = []
    for x, y in session.batches(loader(8), phase="train"):
        with torch.autocast("cpu", dtype=torch.float16):
            out = model(x)
            if len(losses) >= 2:
                out = Blowup.apply(out)
            loss = F.cross_entropy(out, y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
        if not session.rerunning:
            losses.append(float(loss))
    assert len(losses) == 8
    error = session.debug_error
    assert error is not None
    # 4 -> 2 -> 1 -> 0.5: the step run at a scale below 1 trips.
    assert error.position.batch_idx == 5, error.position
    assert error.loss_scale and "below 1" in error.loss_scale
    producer = error.root_cause["producer"]
    assert producer["pass"] == "backward", error.root_cause
    status = session.loss_scale
    assert status.skipped_steps == 6 and status.skips_in_row == 6
    session.close()
