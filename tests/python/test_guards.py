"""The Session's two guards (nansense/_guards.py): what each method does on a
disabled session and on a locked one, and that the guarded methods keep
their signatures and docstrings."""

import inspect

import pytest
import torch

import nansense


def small_model():
    return torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 2))


def test_a_disabled_session_returns_each_default_and_runs_nothing():
    session = nansense.start(small_model(), enabled=False)
    assert (session.snapshot, session.live_position, session.url, session.debug_error) == (None, None, None, None)
    assert (session.rerunning, session.stats_collecting, session.is_pinned, session.training_lost) == (False,) * 4
    assert session.mode == nansense.Mode.DETACH and session.state == nansense.RunState.RUNNING
    assert session.stats_scope == nansense.StatsScope.NONE and session.probe_mode == "unchanged"
    assert session.debug_settings == nansense.DebugSettings()
    assert session.time_travel_status().available is False
    assert repr(session) == "<nansense.Session disabled>"
    # Mutable defaults are made afresh: changing one changes no later answer.
    session.layer_names.append("x")
    session.experiment_defaults["k"] = {}
    assert session.layer_names == [] and session.experiment_defaults == {}
    assert session.input_names == [] and session.perturbations == {}
    assert session.pin_current_batch() is False and session.watch("anything") is False
    for command in (session.step_batch, session.pause, session.run, session.lock, session.clear_debug_error):
        assert command() is None
    assert not session.locked
    # Arguments are still checked where the method checks them before the engine.
    with pytest.raises(ValueError, match="stats scope"):
        session.set_stats_scope("sometimes")
    with pytest.raises(TypeError, match="phase"):
        session.run_until(phase="", epoch=0, batch_idx=0)


def test_a_locked_session_refuses_changes_with_the_methods_own_answers():
    session = nansense.start(small_model(), open_browser=False)
    try:
        session.set_update_frequency(unit="batch", n=3)
        settings = session.debug_settings
        session.lock()
        assert session.locked
        assert session.watch("0") is False
        assert session.set_watch_performance(channel_limit=2) is False
        assert session.pin_current_batch() is False
        # The lock is tested before the arguments: a locked session ignores bad ones too.
        assert session.disable_debug_check("no such category") is None
        assert session.set_update_frequency(unit="fortnight") is None
        session.set_debug_settings(interval=7)
        session.set_update_frequency(unit="seconds", n=9)
        assert session.debug_settings == settings
        assert session.update_frequency == nansense.UpdateFrequency(unit="batch", n=3)
        assert session.watched_layers == frozenset()
    finally:
        session.close()


def test_guarded_methods_keep_their_signatures_and_docstrings():
    for name in ("run_until", "watch", "set_debug_settings", "pin_current_batch", "step_until_position"):
        method = getattr(nansense.Session, name)
        assert method.__name__ == name and method.__doc__
        assert inspect.signature(method) == inspect.signature(inspect.unwrap(method))
    assert list(inspect.signature(nansense.Session.run_until).parameters) == ["self", "phase", "epoch", "batch_idx"]
    assert nansense.Session.snapshot.__doc__ == "The last published snapshot (None before the first capture)."
