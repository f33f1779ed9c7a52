"""torch.compile under nansense: the model trains compiled, served or not,
paused at batch 0 in the default step mode; layers keep the user's module
paths; captured batches run eagerly with hooks on the model's own modules
(never process-wide ones); a NaN only the compiled code makes is reported
as compiled-only numerics, with its capsule."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.modules import module as module_globals
from torch.utils.data import DataLoader, TensorDataset

import nansense
from conftest import TrainingThread


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3)
        self.fc1 = nn.Linear(4 * 10 * 10, 32)
        self.fc2 = nn.Linear(32, 10)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(F.relu(self.conv(x)).flatten(1))))


class CompiledOnlyNaN(Net):
    """Makes a NaN only in the code Dynamo traces: eager runs stay finite."""

    def forward(self, x):
        out = super().forward(x)
        if torch.compiler.is_compiling():
            out = out + torch.sqrt(out.detach().abs().sum() * -1.0)
        return out


def data(n=6):
    g = torch.Generator().manual_seed(0)
    return DataLoader(TensorDataset(torch.randn(n * 4, 1, 12, 12, generator=g),
                                    torch.randint(0, 10, (n * 4,), generator=g)), batch_size=4)


@pytest.fixture(autouse=True)
def fresh_compile():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def train(session, forward, model, optimizer, seen=None):
    for x, y in session.batches(data(), phase="train"):
        optimizer.zero_grad()
        loss = F.cross_entropy(forward(x), y)
        loss.backward()
        optimizer.step()
        if seen is not None:
            seen.append((list(module_globals._global_forward_hooks), list(module_globals._global_forward_pre_hooks)))


@pytest.mark.parametrize("how", ["torch.compile", "model.compile"])
def test_a_compiled_model_steps_served_from_batch_0(how):
    torch.manual_seed(0)
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    if how == "torch.compile":
        forward = torch.compile(model)
    else:
        model.compile()
        forward = model
    session = nansense.start(forward, optimizer=optimizer, port=0, open_browser=False)
    seen = []
    thread = TrainingThread(lambda: train(session, forward, model, optimizer, seen))
    # The default step mode pauses batch 0, which is captured (eagerly).
    assert session.wait_until_stopped(60) == nansense.RunState.PAUSED
    assert session.live_position.batch_idx == 0
    assert set(session.layer_names) >= {"conv", "fc1", "fc2"}
    assert not any("_orig_mod" in name for name in session.layer_names)
    session.step_batch()
    assert session.wait_until_stopped(60) == nansense.RunState.PAUSED
    assert session.live_position.batch_idx == 1
    session.run()
    thread.join(120)
    session.close()
    assert session.debug_error is None
    assert session.internal_errors == []
    # No process-wide module hooks, ever.
    assert all(hooks == ([], []) for hooks in seen)


def test_uncaptured_batches_run_compiled_with_the_guard_on():
    torch.manual_seed(0)
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    calls = []

    def counting(gm, example_inputs):
        def run(*args):
            calls.append(1)
            return gm.forward(*args)
        return run

    compiled = torch.compile(model, backend=counting)
    session = nansense.start(compiled, optimizer=optimizer, port=0, open_browser=False)
    session.set_update_frequency(unit="batch", n=2)  # every other batch captured
    session.run()
    train(session, compiled, model, optimizer)
    session.close()
    # The 3 uncaptured batches of 6 ran the compiled code; the captured ran eagerly.
    assert len(calls) == 3, calls
    assert session.debug_error is None
    assert session.internal_errors == []


def test_a_nan_only_the_compiled_code_makes_is_compiled_only_numerics(tmp_path):
    torch.manual_seed(0)
    model = CompiledOnlyNaN()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    compiled = torch.compile(model)
    session = nansense.start(compiled, optimizer=optimizer)
    session.set_debug_settings(nansense.DebugSettings(capsule_dir=str(tmp_path)))
    train(session, compiled, model, optimizer)
    session.close()
    error = session.debug_error
    assert error is not None
    assert error.position.batch_idx == 0
    assert error.root_cause["status"] == "compiled_only", error.root_cause
    assert "compiled-only numerics" in error.root_cause["summary"]
    assert error.capsule and (tmp_path / error.capsule.split("/")[-1]).exists()
