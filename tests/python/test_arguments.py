"""Bad arguments raise the reference's exceptions, with messages that say
what is wrong; nothing is started."""

import re

import pytest
import torch
import torch.nn.functional as F

import nansense
from conftest import SmallCnn, make_data, make_loader


@pytest.fixture
def model():
    return SmallCnn()


@pytest.mark.parametrize("kwargs, error, words", [
    ({"epochs": 0}, ValueError, "epochs must be >= 1"),
    ({"epochs": 2.5}, TypeError, "epochs must be an int"),
    ({"phases": {"train": 0}}, ValueError, "phases['train'] must be >= 1"),
    ({"phases": ["train"]}, TypeError, "dict of phase name -> batch count"),
    ({"phases": {}}, ValueError, "at least one phase"),
    ({"enabled": "yes"}, TypeError, "enabled must be a bool"),
    ({"port": 70000}, ValueError, "port must be in 0..65535"),
    ({"port": "8080"}, TypeError, "port must be an int"),
    ({"host": ""}, TypeError, "host must be a non-empty string"),
    ({"open_browser": 1}, TypeError, "open_browser must be a bool"),
    ({"input_mean": "gray"}, TypeError, "input_mean must be a number or a non-empty sequence"),
    ({"input_std": [0.3, float("nan")]}, ValueError, "input_std must hold finite numbers"),
    ({"input_mean": {"": 0.5}}, TypeError, "keys are input names"),
    ({"optimizer": "sgd"}, TypeError, "optimizer must be a torch.optim.Optimizer"),
    ({"scheduler": 3}, TypeError, "scheduler must be an LR scheduler"),
    ({"input_transform": "rgb"}, TypeError, "input_transform must be a function mapping one [C,H,W] input sample"),
    ({"input_transform": {"input": 3}}, TypeError, "input_transform['input'] must be a function"),
    ({"input_transform": {}}, ValueError, "input_transform must not be an empty dict"),
])
def test_start_refuses_bad_arguments(model, kwargs, error, words):
    with pytest.raises(error) as caught:
        nansense.start(model, **kwargs)
    assert words in str(caught.value)


def test_start_needs_a_module():
    with pytest.raises(TypeError, match="needs a torch.nn.Module, got function"):
        nansense.start(lambda x: x)


def test_optimizer_must_train_the_model(model):
    other = torch.optim.SGD(SmallCnn().parameters(), lr=0.1)
    with pytest.raises(ValueError, match="not one of the model's parameters"):
        nansense.start(model, optimizer=other)


def test_keyword_only_arguments(model):
    with pytest.raises(TypeError):
        nansense.start(model, 3)


def test_batches_refuses_bad_arguments(model):
    session = nansense.start(model)
    with pytest.raises(TypeError, match="phase must be a non-empty string"):
        session.batches([1], phase="")
    with pytest.raises(TypeError, match="phase must be a non-empty string"):
        session.batches([1], phase=3)
    with pytest.raises(TypeError, match="loader must be iterable"):
        session.batches(5, phase="train")
    with pytest.raises(ValueError, match="epoch must be >= 0"):
        session.batches([1], phase="train", epoch=-1)
    with pytest.raises(TypeError):
        session.batches([1], "train")  # phase is keyword-only, as in the reference
    session.close()
    with pytest.raises(RuntimeError, match="after session.close"):
        session.batches([1], phase="train")


def test_declared_schedule_is_enforced(model):
    session = nansense.start(model, phases={"train": 2})
    session.detach()
    loader = make_loader(make_data(24), batch_size=8, shuffle=False)
    with pytest.raises(nansense.ScheduleError) as caught:
        for x, y in session.batches(loader, phase="train"):
            F.cross_entropy(model(x), y).backward()
    assert isinstance(caught.value, ValueError)
    assert "train" in str(caught.value)
    assert session.state == nansense.RunState.LOST


def test_run_control_refusals(model):
    session = nansense.start(model)
    with pytest.raises(ValueError, match="timeout must be a number of seconds"):
        session.wait_until_stopped(-1)
    with pytest.raises(TypeError, match="batch_idx must be an int"):
        session.run_until(phase="train", epoch=0, batch_idx="3")
    session.close()
    with pytest.raises(nansense.ControlError) as caught:
        session.step_batch()
    assert isinstance(caught.value, RuntimeError)


def test_debug_settings_are_validated(model):
    with pytest.raises(ValueError, match="interval must be >= 1"):
        nansense.DebugSettings(interval=0)
    with pytest.raises(ValueError, match=r"threshold must be in \(0, 1\]"):
        nansense.DebugSettings(threshold=1.5)
    with pytest.raises(TypeError, match="check_nan_inf must be a bool"):
        nansense.DebugSettings(check_nan_inf="yes")
    with pytest.raises(TypeError, match="allow must be a sequence"):
        nansense.DebugSettings(allow="div")
    session = nansense.start(model)
    with pytest.raises(TypeError, match="takes a nansense.DebugSettings"):
        session.set_debug_settings({"interval": 2})
    with pytest.raises(ValueError, match="category must be"):
        session.disable_debug_check("nans")
    settings = nansense.DebugSettings(interval=3, check_under_over=False, allow=("masked_fill",))
    session.set_debug_settings(settings)
    assert session.debug_settings == settings
    session.close()


def test_serve_refuses_bad_arguments(model):
    session = nansense.start(model)
    with pytest.raises(TypeError, match="takes the Session nansense.start returned"):
        nansense.serve(model)
    with pytest.raises(ValueError, match="log_level must be one of"):
        nansense.serve(session, log_level="loud")
    with pytest.raises(TypeError, match="mcp must be a bool"):
        nansense.serve(session, mcp="no")
    session.close()


def test_a_break_ends_the_phase_and_an_exception_loses_the_loop(model):
    session = nansense.start(model)
    session.detach()
    loader = make_loader(make_data(32), batch_size=8, shuffle=False)
    for i, (x, y) in enumerate(session.batches(loader, phase="train")):
        if i == 1:
            break
    assert session.state == nansense.RunState.RUNNING
    for x, y in session.batches(loader, phase="val"):
        model(x)
    assert session.live_position.phase == "val"
    assert session.state == nansense.RunState.RUNNING
    with pytest.raises(KeyError):
        for x, y in session.batches(loader, phase="train"):
            raise KeyError("boom")
    assert session.state == nansense.RunState.LOST


def test_import_refuses_a_torch_it_was_not_built_for(monkeypatch):
    from nansense import _build_info, _check
    monkeypatch.setattr(_build_info, "TORCH_VERSION", "9.9.9")
    with pytest.raises(ImportError, match=r"built against torch 9\.9\.9, but this Python imports torch " +
                       re.escape(torch.__version__)) as refused:
        _check.check_torch()
    assert "reinstall nansense for this torch" in str(refused.value)
    # Another build of the same release (a +cpu wheel for a +cu132 one) is the same ABI.
    release = torch.__version__.split("+")[0]
    monkeypatch.setattr(_build_info, "TORCH_VERSION", release + "+other")
    _check.check_torch()
    monkeypatch.undo()
    _check.check_torch()  # the torch it was built for passes
