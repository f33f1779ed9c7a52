"""The training setups PyTorch users run, each under nansense disabled,
detached and served (running, captured every batch, statistics collected):
with no NaN they train bit-identically to the plain loop and nansense never
raises into the loop; with a real NaN each is caught at its batch, the
producing op is named, and the loop runs to its end.

The setups: fp32, bf16 autocast, fp16 autocast with a GradScaler whose first
steps overflow (with Adam, and with a fused AdamW that skips inside its
kernel), torch.compile, activation checkpointing, gradient accumulation and
gradient clipping."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint
from torch.utils.data import DataLoader, TensorDataset

import nansense

SETUPS = ["fp32", "bf16", "fp16_scaler", "fp16_scaler_fused", "compile", "checkpoint", "accumulate", "clip"]
WRAPS = ["disabled", "detached", "served"]
BATCHES = 6


class Net(nn.Module):
    """A conv and two linears, as a user writes one; the samples whose
    `poison` is 1 make a NaN in the forward (log of a negative number)."""

    def __init__(self, checkpointed=False):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3)
        self.fc1 = nn.Linear(4 * 10 * 10, 32)
        self.fc2 = nn.Linear(32, 10)
        self.checkpointed = checkpointed

    def body(self, x):
        return F.relu(self.fc1(F.relu(self.conv(x)).flatten(1)))

    def forward(self, x, poison):
        h = checkpoint(self.body, x, use_reentrant=False) if self.checkpointed else self.body(x)
        # log(h + 1) where the batch is clean, log of a negative number (NaN)
        # where poisoned.
        h = torch.log(h + 1 - poison.view(-1, 1) * 1e4)
        return self.fc2(h)


def data():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(BATCHES * 4, 1, 12, 12, generator=g)
    y = torch.randint(0, 10, (BATCHES * 4,), generator=g)
    index = torch.arange(BATCHES * 4) // 4
    return DataLoader(TensorDataset(x, y, index), batch_size=4, shuffle=False)


def train(setup, wrap, poisoned=(), epochs=1):
    """Trains a fresh seeded model in `setup` under `wrap` (None: the plain
    loop); returns the losses, the weights and the session."""
    torch.manual_seed(1)
    model = Net(checkpointed=setup == "checkpoint")
    if setup == "fp16_scaler_fused":  # its step skips inside the kernel on the scaler's found_inf
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, fused=True)
    else:
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    scaled = setup.startswith("fp16_scaler")
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**20) if scaled else None
    forward = torch.compile(model) if setup == "compile" else model
    session = None
    if wrap is not None:
        session = nansense.start(forward, optimizer=optimizer, enabled=wrap != "disabled",
                                 port=0 if wrap == "served" else None, open_browser=False,
                                 **({"scaler": scaler} if scaler is not None and wrap != "disabled" else {}))
        if wrap == "served":
            session.set_update_frequency(unit="batch", n=1)
            session.set_stats_scope("all")  # live statistics of every layer
            session.run()
    losses = []
    accumulate = 2 if setup == "accumulate" else 1
    for _ in range(epochs):
        loader = session.batches(data(), phase="train") if session else data()
        for x, y, index in loader:
            step_now = int(index[0]) % accumulate == accumulate - 1
            poison = torch.tensor([float(int(i) in poisoned) for i in index])
            if setup == "bf16":
                with torch.autocast("cpu", dtype=torch.bfloat16):
                    loss = F.cross_entropy(forward(x, poison), y)
            elif scaled:
                with torch.autocast("cpu", dtype=torch.float16):
                    loss = F.cross_entropy(forward(x, poison), y)
            else:
                loss = F.cross_entropy(forward(x, poison), y)
            if scaler is not None:
                scaler.scale(loss).backward()
                scaler.step(optimizer)
                scaler.update()
                optimizer.zero_grad()
            else:
                (loss / accumulate).backward()
                if setup == "clip":
                    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
                if step_now:
                    optimizer.step()
                    optimizer.zero_grad()
            if not (session and session.rerunning):
                losses.append(loss.detach().float().clone())
    if session:
        session.close()
    weights = {n: p.detach().clone() for n, p in model.named_parameters()}
    return torch.stack(losses), weights, session, scaler


@pytest.fixture(autouse=True)
def fresh_compile():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.mark.parametrize("setup", SETUPS)
def test_with_no_nan_every_setup_trains_bit_identically(setup):
    losses, weights, _, plain_scaler = train(setup, None, epochs=2)
    if setup.startswith("fp16_scaler"):
        # The scaler's first steps overflow and are skipped: what the loop meets.
        assert plain_scaler.get_scale() < 2.0**20
    for wrap in WRAPS:
        if setup == "compile" and wrap == "served":
            # Captured batches run eagerly (the engine observes PyTorch's own
            # ops), and this run captures every batch: it trains as the
            # plain eager loop does, bit for bit.
            losses, weights, _, _ = train("fp32", None, epochs=2)
        other_losses, other_weights, session, scaler = train(setup, wrap, epochs=2)
        assert torch.equal(losses, other_losses), (setup, wrap)
        for name in weights:
            assert torch.equal(weights[name], other_weights[name]), (setup, wrap, name)
        if wrap != "disabled":
            assert session.debug_error is None, (setup, wrap, session.debug_error)
            assert session.internal_errors == [], (setup, wrap)
            assert session.layer_names == [] or "conv" in session.layer_names, session.layer_names
        if setup.startswith("fp16_scaler"):
            assert scaler.get_scale() == plain_scaler.get_scale()
        if wrap == "served":
            # Captured every batch: the layers have the user's module paths,
            # and their statistics were collected.
            assert {"conv", "fc1", "fc2"} <= set(session.layer_names), session.layer_names
            fc1 = session.watch_snapshot(layers=["fc1"]).latest_per_phase("fc1")["train"]
            assert fc1.batches > 0 and fc1.activations.n > 0, (setup, fc1)


@pytest.mark.parametrize("setup", SETUPS)
def test_a_real_nan_is_caught_at_its_batch_named_and_the_loop_ends(setup):
    losses, weights, session, _ = train(setup, "detached", poisoned={3})
    error = session.debug_error
    assert error is not None, setup
    assert error.position.batch_idx == 3, (setup, error.position)
    assert "nan" in error.reasons
    producer = (error.root_cause or {}).get("producer") or {}
    assert "log" in producer.get("op", ""), (setup, error.root_cause)
    assert len(losses) == BATCHES  # the loop ran to its end
    assert session.internal_errors == [], session.internal_errors
