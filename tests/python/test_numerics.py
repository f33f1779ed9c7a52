"""The guard, root cause and NaN capsules on NaNs made by Python code."""

import copy
import json
import os

import pytest
import torch
import torch.nn.functional as F

import nansense
from conftest import Api, Mlp, TrainingThread


def per_class_loss(logits, y):
    """The mean loss of each class, summed: a class missing from the batch
    divides by a zero count."""
    nll = F.cross_entropy(logits, y, reduction="none")
    total = logits.new_zeros(())
    for c in range(3):
        mask = (y == c).float()
        total = total + (nll * mask).sum() / mask.sum()
    return total


def class_batches(n=5):
    g = torch.Generator().manual_seed(2)
    out = []
    for i in range(n):
        y = torch.tensor([0, 1, 1, 0]) if i == 2 else torch.tensor([0, 1, 2, 2])
        out.append((torch.randn(4, 4, generator=g), y))
    return out


def test_a_division_by_a_zero_count_pauses_before_the_step_and_names_the_producer(tmp_path):
    torch.manual_seed(1)
    model = Mlp()
    # With momentum: the untraced first run of the tripped batch must not
    # leave NaN in state the engine cannot restore (a Python optimizer's).
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    data = class_batches()
    session = nansense.start(model, optimizer=optimizer, port=0, open_browser=False)
    session.set_debug_settings(nansense.DebugSettings(capsule_dir=str(tmp_path)))
    session.detach()
    before, bodies = {}, []

    def loop():
        for x, y in session.batches(data, phase="train"):
            before.update({n: p.detach().clone() for n, p in model.named_parameters()})
            bodies.append(len(bodies))
            optimizer.zero_grad()
            per_class_loss(model(x), y).backward()
            optimizer.step()
        session.close()

    thread = TrainingThread(loop)
    assert session.wait_until_stopped(60) == nansense.RunState.PAUSED
    # Batch 2 ran untraced, tripped, and ran again traced: 2 + 2 bodies.
    assert len(bodies) == 4
    error = session.debug_error
    assert error is not None
    assert error.position.batch_idx == 2
    assert "nan" in error.reasons
    cause = error.root_cause
    assert cause["status"] == "found", cause["summary"]
    producer = cause["producer"]
    assert producer["op"] == "aten::div"
    assert producer["pass"] == "forward"
    assert producer["layer"] is None  # the loss, outside the model
    assert producer["inputs"][1]["max"] == 0.0  # the class count
    assert "aten::div in the forward" in cause["summary"]
    # Paused inside backward, before the step: weights are still pre-step.
    for name, p in model.named_parameters():
        assert torch.equal(p.detach(), before[name]), name
    tripped_from = {name: t.clone() for name, t in before.items()}
    assert not torch.isfinite(model.fc1.weight.grad).all()
    for p in model.parameters():
        assert torch.isfinite(optimizer.state[p]["momentum_buffer"]).all(), "the first run's step poisoned momentum"
    assert "fc1" in [row.layer for row in error.layers]
    assert error.capsule and os.path.exists(error.capsule)
    # The same report over HTTP.
    report = Api(session.url).get("/api/debug")
    assert report["error"]["root_cause"]["producer"]["op"] == "aten::div"

    # Replay the capsule into a fresh model: the same NaN gradients, bit for bit.
    capsule_path = error.capsule
    session.detach()
    thread.join()
    fresh = Mlp()
    capsule = nansense.replay_capsule(capsule_path, fresh)
    assert capsule.position.batch_idx == 2
    for name, p in fresh.named_parameters():
        assert torch.equal(p.detach(), tripped_from[name]), name
    x, y = capsule.batch
    assert torch.equal(x, data[2][0]) and torch.equal(y, data[2][1])
    fresh.zero_grad()
    per_class_loss(fresh(x), y).backward()
    match, difference = capsule.gradients_match()
    assert match, difference
    assert not all(torch.isfinite(g).all() for g in capsule.gradients.values())
    # Other gradients (a healthy batch's) do not match.
    fresh.zero_grad()
    per_class_loss(fresh(data[0][0]), data[0][1]).backward()
    match, difference = capsule.gradients_match()
    assert not match and difference


class GradLog(torch.autograd.Function):
    """Identity forward; the backward scales the gradient by log(x): NaN
    wherever x is negative, made in backward only."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * torch.log(x)


class LogGradNet(Mlp):
    def forward(self, x):
        return self.fc2(self.act(GradLog.apply(self.fc1(x))))


def test_log_of_a_negative_value_in_backward_is_found_in_the_backward_pass(tmp_path):
    torch.manual_seed(3)
    model = LogGradNet()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    data = [(torch.randn(4, 4), torch.tensor([0, 1, 2, 0])) for _ in range(3)]
    session = nansense.start(model, optimizer=optimizer, port=0, open_browser=False)
    session.set_debug_settings(nansense.DebugSettings(capsule_dir=str(tmp_path)))
    session.detach()
    losses = []

    def loop():
        for x, y in session.batches(data, phase="train"):
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x), y)
            losses.append(loss.item())
            loss.backward()
            optimizer.step()
        session.close()

    thread = TrainingThread(loop)
    assert session.wait_until_stopped(60) == nansense.RunState.PAUSED
    error = session.debug_error
    assert error is not None and error.position.batch_idx == 0
    # The forward was finite: only the gradients are not.
    assert all(map(lambda v: v == v, losses))
    cause = error.root_cause
    assert cause["status"] == "found", cause["summary"]
    producer = cause["producer"]
    assert producer["op"] == "aten::log"
    assert producer["pass"] == "backward"
    assert producer["inputs"][0]["min"] < 0
    assert "aten::log in the backward" in cause["summary"]
    assert json.dumps(cause)  # plain data, as the UI and MCP get it
    session.detach()
    thread.join()


def bits(t):
    """A tensor's bits, so that NaN payloads compare too."""
    return t.detach().contiguous().view(torch.int32 if t.dtype == torch.float32 else torch.int64)


def test_a_capsule_replays_an_adam_step_bit_for_bit(tmp_path):
    torch.manual_seed(5)
    model = Mlp()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    data = class_batches()
    session = nansense.start(model, optimizer=optimizer)
    session.set_debug_settings(nansense.DebugSettings(capsule_dir=str(tmp_path)))
    session.detach()
    bodies = []
    for x, y in session.batches(data, phase="train"):
        state_before = copy.deepcopy(optimizer.state_dict())
        optimizer.zero_grad()
        per_class_loss(model(x), y).backward()
        # None on the untraced first run of the tripping batch (the engine drops them).
        grads = {n: None if p.grad is None else p.grad.clone() for n, p in model.named_parameters()}
        optimizer.step()
        bodies.append({"x": x, "state": state_before, "grads": grads,
                       "after": {n: p.detach().clone() for n, p in model.named_parameters()}})
    session.close()
    error = session.debug_error
    assert error is not None and error.position.batch_idx == 2 and error.capsule
    tripped = [b for b in bodies if torch.equal(b["x"], data[2][0])][-1]
    assert tripped["state"]["state"], "Adam had state before the tripping batch"

    fresh = Mlp()
    fresh_optimizer = torch.optim.Adam(fresh.parameters(), lr=0.5)
    capsule = nansense.replay_capsule(error.capsule, fresh, optimizer=fresh_optimizer)
    # The optimizer's state as the tripping batch began (lr included).
    restored = fresh_optimizer.state_dict()
    assert restored["param_groups"][0]["lr"] == 0.01
    for index, entry in tripped["state"]["state"].items():
        for key, value in entry.items():
            assert torch.equal(bits(restored["state"][index][key]), bits(value)), (index, key)
    x, y = capsule.batch
    fresh_optimizer.zero_grad()
    per_class_loss(fresh(x), y).backward()
    match, difference = capsule.gradients_match()
    assert match, difference
    for name, p in fresh.named_parameters():
        assert torch.equal(bits(p.grad), bits(tripped["grads"][name])), name
    fresh_optimizer.step()
    # The very update the recorded run made, NaN payloads included.
    for name, p in fresh.named_parameters():
        assert torch.equal(bits(p), bits(tripped["after"][name])), name
    assert not all(torch.isfinite(p).all() for p in fresh.parameters())


def test_a_capsule_refuses_an_optimizer_of_another_type(tmp_path):
    torch.manual_seed(5)
    model = Mlp()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    session = nansense.start(model, optimizer=optimizer)
    session.set_debug_settings(nansense.DebugSettings(capsule_dir=str(tmp_path)))
    session.detach()
    for x, y in session.batches(class_batches(), phase="train"):
        optimizer.zero_grad()
        per_class_loss(model(x), y).backward()
        optimizer.step()
    session.close()
    fresh = Mlp()
    before = {n: p.detach().clone() for n, p in fresh.named_parameters()}
    with pytest.raises(nansense.CapsuleError, match="python:Adam"):
        nansense.replay_capsule(session.debug_error.capsule, fresh, optimizer=torch.optim.SGD(fresh.parameters(), lr=1))
    for name, p in fresh.named_parameters():
        assert torch.equal(p.detach(), before[name]), name
    with pytest.raises(TypeError, match="optimizer must be a torch.optim.Optimizer"):
        nansense.replay_capsule(session.debug_error.capsule, fresh, optimizer="adam")


class _MaskedClassifier(torch.nn.Module):
    """PyTorch's own transformer encoder with a boolean padding mask passed
    as a model input, pooled over the unpadded tokens: a fully padded
    sample divides 0 by 0."""

    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(50, 16)
        layer = torch.nn.TransformerEncoderLayer(16, 2, 32, batch_first=True)
        self.enc = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = torch.nn.Linear(16, 3)

    def forward(self, ids, pad):
        h = self.enc(self.emb(ids), src_key_padding_mask=pad)
        keep = (~pad).unsqueeze(-1).float()
        return self.head((h * keep).sum(1) / keep.sum(1))


def test_masks_and_token_ids_never_turn_a_check_off(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    model = _MaskedClassifier()
    optimizer = torch.optim.Adam(model.parameters(), 1e-3)
    g = torch.Generator().manual_seed(0)
    batches = []
    for b in range(8):
        pad = torch.zeros(4, 6, dtype=torch.bool)
        pad[:, 4:] = True
        if b == 6:
            pad[1, :] = True  # one sample with no token left
        batches.append((torch.randint(0, 50, (4, 6), generator=g), pad, torch.randint(0, 3, (4,), generator=g)))
    session = nansense.start(model, optimizer=optimizer)
    session.set_stats_scope(nansense.StatsScope.ALL)
    session.detach()
    for ids, pad, y in session.batches(batches, phase="train"):
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(ids, pad), y).backward()
        optimizer.step()
    session.close()
    # Every batch was checked: the NaN of batch 6 is caught at its division.
    assert session.internal_errors == []
    error = session.debug_error
    assert error is not None and error.position.batch_idx == 6
    assert error.root_cause["producer"]["op"] == "aten::div"
