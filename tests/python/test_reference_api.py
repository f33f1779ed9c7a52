"""The reference API's own names and behaviours (NaNsense 0.4.0's, our
users' specification), beside ours: each added name does what ours does or
what the reference says."""

import math
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn.functional as F

import nansense
from conftest import SmallCnn, TrainingThread, make_data, make_loader


def loop(session, model, optimizer, epochs=2, train=3, val=2, fail_at=None):
    """`epochs` epochs of `train` training and `val` validation batches."""
    train_loader = make_loader(make_data(8 * train), shuffle=False)
    val_loader = make_loader(make_data(8 * val, seed=1), shuffle=False)
    for epoch in range(epochs):
        model.train()
        for i, (x, y) in enumerate(session.batches(train_loader, phase="train")):
            if fail_at == (epoch, i):
                raise ValueError("boom")
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
            optimizer.step()
        with torch.no_grad():
            for x, _ in session.batches(val_loader, phase="val"):
                model(x)
    session.close()


def paused_session(**kw):
    """An unserved session asked to pause before its loop, its loop on a
    thread, paused on the first batch."""
    model = SmallCnn()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    session = nansense.start(model, optimizer=optimizer, epochs=kw.get("epochs", 2))
    session.stop()
    thread = TrainingThread(lambda: loop(session, model, optimizer, **kw))
    assert session.wait_until_paused(timeout=60)
    return session, model, optimizer, thread


# ---- the module's values


def test_mode_has_the_reference_members_as_aliases_of_ours():
    assert nansense.Mode.STEP is nansense.Mode.STEP_BATCH
    assert nansense.Mode.UNTIL_PHASE_CHANGE is nansense.Mode.STEP_PHASE
    assert nansense.Mode.UNTIL_EPOCH_CHANGE is nansense.Mode.STEP_EPOCH
    assert nansense.Mode.UNTIL_POSITION is nansense.Mode.RUN_UNTIL
    assert nansense.Mode.UNTIL_END is nansense.Mode.RUN
    assert len(list(nansense.Mode)) == 6  # aliases, not new modes
    # The reference's values name the same modes.
    assert nansense.Mode("step") is nansense.Mode.STEP_BATCH
    assert nansense.Mode("until_end") is nansense.Mode.RUN
    assert nansense.Mode("until_position") is nansense.Mode.RUN_UNTIL
    with pytest.raises(ValueError):
        nansense.Mode("sideways")


def test_batch_position_is_last_overall_is_is_last_in_run():
    last = nansense.BatchPosition("val", 4, 9, True, True, True)
    assert last.is_last_overall is True
    assert nansense.BatchPosition("train", 0, 0).is_last_overall is False


def test_schedule_is_constructible_as_a_value():
    s = nansense.Schedule(epochs=3, phases={"train": 4, "val": 2})
    assert s.epochs == 3
    assert s.phases == {"train": 4, "val": 2}
    assert s.phase_order == ["train", "val"]
    assert s.phase_count("val") == 2 and s.phase_count("test") is None
    s.set_epochs(5)
    assert s.epochs == 5
    lazy = nansense.Schedule()
    assert lazy.epochs is None and lazy.phases == {} and lazy.phase_order == []
    with pytest.raises(ValueError):
        nansense.Schedule(epochs=0)
    with pytest.raises(ValueError):
        nansense.Schedule(phases={"train": 0})
    # The same type as Session.schedule, and equal to a session's declared one.
    session = nansense.start(SmallCnn(), epochs=3, phases={"train": 4, "val": 2})
    assert isinstance(session.schedule, nansense.Schedule)
    assert session.schedule == nansense.Schedule(epochs=3, phases={"train": 4, "val": 2})
    # Updating the session's view re-declares the session's schedule.
    session.schedule.update(epochs=7)
    assert session.schedule.epochs == 7


def test_layer_report_dtype_is_a_torch_dtype():
    error = nansense.DebugError._from({
        "position": {"phase": "train", "epoch": 0, "batch_idx": 3}, "reasons": ["underflow"],
        "checks_used": ["under_over"],
        "layers": [{"layer": "fc", "nan": 0, "inf": 0, "underflow": 0.5, "overflow": 0, "dtype": "float16",
                    "sources": []},
                   {"layer": "x", "nan": 1, "inf": 0, "underflow": 0, "overflow": 0, "dtype": None, "sources": []}]})
    fc, x = error.layers
    assert fc.dtype is torch.float16 and torch.finfo(fc.dtype).tiny > 0
    assert fc.dtype_name == "float16"
    assert x.dtype is None and x.dtype_name is None


def test_tensor_stats_snapshot_has_the_reference_fields():
    live = nansense.TensorStatsSnapshot._from({
        "n": 4, "sum": 2.0, "sum_sq": 2.0, "min": 0.0, "max": 1.0, "hist": [1, 3], "nan": 0, "pos_inf": 0,
        "neg_inf": 0, "channel_hists": [], "channels": 0, "dead_channels": [], "median": 1.0,
        "dead_channel_count": None, "binned": 4})
    assert live.collapsed_median is None and live.collapsed_dead_count is None and live.dtype is None
    assert live.binned == 4 and not live.sampled
    sampled = nansense.TensorStatsSnapshot._from({
        "n": 40, "sum": 2.0, "sum_sq": 2.0, "min": 0.0, "max": 1.0, "hist": [1, 3], "nan": 0, "pos_inf": 0,
        "neg_inf": 0, "channel_hists": [], "channels": 0, "dead_channels": [], "median": 1.0,
        "dead_channel_count": None, "binned": 4})
    assert sampled.sampled and sampled.n == 40
    collapsed = nansense.TensorStatsSnapshot._from({
        "n": 4, "sum": 2.0, "sum_sq": 2.0, "min": 0.0, "max": 1.0, "hist": None, "nan": 0, "pos_inf": 0,
        "neg_inf": 0, "channel_hists": [], "channels": 0, "dead_channels": [], "median": 0.5,
        "dead_channel_count": 2, "binned": 0})
    assert collapsed.collapsed_median == 0.5 and collapsed.median == 0.5
    assert collapsed.collapsed_dead_count == 2 and collapsed.dead_channel_count == 2


# ---- run control under the reference's names


def test_run_control_under_the_reference_names():
    session, model, optimizer, thread = paused_session()
    assert session.mode == nansense.Mode.STEP
    assert not session.is_running and not session.closed
    assert session.live_position == nansense.BatchPosition("train", 0, 0)
    session.step_batch()
    assert session.wait_until_paused(after_pauses=1, timeout=60)
    assert session.live_position.batch_idx == 1
    # stop() while paused changes nothing; request_snapshot() neither.
    session.stop()
    session.request_snapshot()
    assert session.state == nansense.RunState.PAUSED
    # The second phase by its index, once the run has seen it.
    with pytest.raises(ValueError, match="phase_index 1"):
        session.step_until_position(phase_index=1, epoch=0, batch_idx=1)
    session.step_until_position(phase_index=0, epoch=1, batch_idx=0)
    assert session.wait_until_paused(timeout=60)
    assert (session.live_position.phase, session.live_position.epoch, session.live_position.batch_idx) == \
        ("train", 1, 0)
    session.step_until_position(phase_index=1, epoch=1, batch_idx=0)
    assert session.wait_until_paused(timeout=60)
    assert session.live_position.phase == "val"
    # step_run() runs to the run's last batch and pauses there.
    session.step_run()
    assert session.wait_until_paused(timeout=60)
    assert session.live_position.is_last_overall
    session.step_run()
    thread.join()
    assert session.closed and not session.is_running
    assert session.wait_until_paused(timeout=0)  # a closed session does not wait
    assert not session.training_lost and session.training_error is None


def test_a_loop_that_raised_is_lost_with_its_error():
    session, model, optimizer, thread = paused_session(fail_at=(0, 1))
    session.detach()
    with pytest.raises(ValueError, match="boom"):
        thread.join()
    assert session.training_lost
    # The body's exception is not shown to the loop's iterator: where it was.
    assert session.training_error == "the training loop raised an exception during epoch 0 | train batch 1"
    assert not session.closed and not session.is_running


def test_wait_until_paused_times_out_while_running_and_on_a_disabled_session():
    disabled = nansense.start(SmallCnn(), enabled=False)
    assert disabled.wait_until_paused(timeout=0) is False
    assert disabled.is_running and not disabled.closed and not disabled.training_lost
    disabled.close()
    assert disabled.closed and disabled.wait_until_paused() is True
    with pytest.raises(ValueError):
        disabled.wait_until_paused(timeout=-1)


# ---- live reads of the model


def test_current_weights_gradients_and_optimizer_state_are_read_live():
    session, model, optimizer, thread = paused_session()
    session.step_batch()
    assert session.wait_until_paused(timeout=60)
    weights = session.current_weights()
    assert set(weights) == {n for n, _ in model.named_parameters()}
    for name, p in model.named_parameters():
        assert weights[name].device.type == "cpu" and torch.equal(weights[name], p.detach())
    grads = session.current_weight_gradients()
    assert set(grads) == set(weights) and torch.equal(grads["features.0.weight"], model.features[0].weight.grad)
    state = session.current_optimizer_state()
    assert torch.equal(state["features.0.weight"]["momentum_buffer"],
                       optimizer.state[model.features[0].weight]["momentum_buffer"])
    hyper = session.current_optimizer_hyperparams()
    assert hyper["classifier.3.bias"]["lr"] == pytest.approx(0.1)
    assert hyper["classifier.3.bias"]["momentum"] == pytest.approx(0.9)
    # The layers, as the reference describes them.
    assert session.layer_info["features.0"].startswith("Conv2d(1, 4, kernel_size=(3, 3)")
    assert session.layer_weights["features.0"] == ["features.0.weight", "features.0.bias"]
    assert session.layer_weights["features.1"] == []
    assert session.input_names == ["input"]
    session.detach()
    thread.join()
    bare = nansense.start(SmallCnn())
    assert bare.current_optimizer_state() == {} and bare.current_optimizer_hyperparams() == {}


# ---- statistics


def test_stats_layers_phases_toggle_and_current_batch_stats():
    session, model, optimizer, thread = paused_session()
    session.set_stats_scope("all")
    assert set(session.layer_names) <= session.stats_layers
    session.step_batch()
    assert session.wait_until_paused(timeout=60)
    assert session.stats_phases() == {"train"} and session.stats_phases("features.0") == {"train"}
    assert session.toggle_stats_collecting() is False
    assert session.stats_scope == nansense.StatsScope.NONE
    assert "features.0" in session.stats_layers  # what was collected stays browsable
    assert session.toggle_stats_collecting() is True
    assert session.stats_scope == nansense.StatsScope.ALL
    # The last captured batch alone, any layer.
    snap = session.snapshot
    current = session.current_batch_stats(layers=["features.0", "no_such_layer"])
    (key, stats), = current.stats.items()
    assert key == ("features.0", snap.position.phase, snap.position.epoch)
    act = snap.activations["features.0"]
    assert stats.activations.n == act.numel() and sum(stats.activations.hist) == act.numel()
    assert stats.activations.min == pytest.approx(act.min().item())
    assert stats.activations.max == pytest.approx(act.max().item())
    assert stats.activations.mean == pytest.approx(act.mean().item(), rel=1e-5)
    assert stats.activations.dtype is torch.float32
    assert stats.activations.channels == act.shape[1]
    assert stats.gradients is not None and stats.gradients.n == act.numel()
    assert not math.isnan(stats.activations.median)
    session.detach()
    thread.join()
    assert nansense.start(SmallCnn()).current_batch_stats(layers=["features.0"]).stats == {}


def test_set_debug_settings_takes_keyword_partials_or_a_whole_object():
    session = nansense.start(SmallCnn())
    session.set_debug_settings(interval=5)
    assert session.debug_settings.interval == 5 and session.debug_settings.check_nan_inf
    session.set_debug_settings(check_under_over=False, threshold=0.25)
    s = session.debug_settings
    assert (s.interval, s.check_under_over, s.threshold) == (5, False, 0.25)
    session.set_debug_settings(nansense.DebugSettings(interval=2))
    assert session.debug_settings.interval == 2 and session.debug_settings.check_under_over
    with pytest.raises(TypeError):
        session.set_debug_settings(nansense.DebugSettings(), interval=3)
    with pytest.raises(TypeError, match="no DebugSettings field"):
        session.set_debug_settings(intervall=3)
    with pytest.raises(ValueError):
        session.set_debug_settings(interval=0)
    assert session.debug_settings.interval == 2


def test_watch_and_patch_layers_refuse_unknown_layers_once_known():
    session, model, optimizer, thread = paused_session()
    assert session.watch("no_such_layer") is False
    assert "no_such_layer" not in session.watched_layers
    assert session.watch("features.0") is True
    with pytest.raises(ValueError, match="no_such_layer"):
        session.set_patch_layers(["features.0", "no_such_layer"])
    session.set_patch_layers(["features.0"])
    session.detach()
    thread.join()


def test_set_watch_performance_returns_whether_it_flushed_and_false_when_locked():
    session = nansense.start(SmallCnn())
    assert session.set_watch_performance(channel_limit=8) is True
    assert session.set_watch_performance(channel_limit=8) is False
    session.lock()
    assert session.set_watch_performance(channel_limit=4) is False
    assert session.watch_performance.channel_limit == 8


# ---- time travel


def test_a_disabled_session_yields_the_whole_range_whatever_start_epoch(tmp_path):
    session = nansense.start(SmallCnn(), enabled=False)
    assert list(session.epochs(5, start_epoch=2, cache_dir=tmp_path)) == [0, 1, 2, 3, 4]
    assert not any(tmp_path.iterdir())


def test_a_session_takes_one_training_restorer(tmp_path):
    session = nansense.start(SmallCnn(), epochs=2)
    restorer = session.training_restorer(cache_dir=tmp_path)
    assert restorer.cache.directory == str(tmp_path)
    with pytest.raises(RuntimeError, match="already has a training restorer"):
        session.training_restorer(cache_dir=tmp_path)
    disabled = nansense.start(SmallCnn(), epochs=2, enabled=False)
    disabled.training_restorer()
    assert disabled.training_restorer().cache.cached_epochs() == []


def test_restorer_cache_lists_the_cached_epochs(tmp_path):
    model = SmallCnn()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    session = nansense.start(model, optimizer=optimizer)
    session.detach()
    loader = make_loader(make_data(16), shuffle=False)
    seen = []
    for epoch in session.epochs(2, cache_dir=tmp_path):
        with session.restore_point() as restorer:
            seen.append(restorer.cache.cached_epochs())
            for x, y in session.batches(loader, phase="train"):
                optimizer.zero_grad()
                F.cross_entropy(model(x), y).backward()
                optimizer.step()
    assert seen[-1] and seen[-1][-1] <= 1
    assert 0 in restorer.cache.cached_epochs()
    session.close()


# ---- serve(): the UI outlives the loop


SERVED_SCRIPT = """
import sys, torch, nansense
model = torch.nn.Linear(4, 2)
session = nansense.start(model, port=0, open_browser=False)
session.detach()
for x in session.batches([torch.randn(3, 4) for _ in range(2)], phase="train"):
    model(x).sum().backward()
session.close()
{tail}
print("done", flush=True)
"""


def run_script(tmp_path, tail):
    path = tmp_path / "script.py"
    path.write_text(SERVED_SCRIPT.format(tail=textwrap.dedent(tail)))
    return subprocess.Popen([sys.executable, str(path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_serve_keeps_a_finished_script_up_while_it_holds_the_session(tmp_path):
    proc = run_script(tmp_path, "")
    try:
        lines = iter(proc.stdout.readline, "")
        assert any(line.strip() == "done" for line in lines)  # after the address banner
        with pytest.raises(subprocess.TimeoutExpired):
            proc.wait(timeout=2)  # the post-mortem UI keeps it up (Ctrl-C ends it)
    finally:
        proc.kill()
        proc.wait()


def test_a_script_that_dropped_its_session_exits(tmp_path):
    # The session held in a reference cycle only: collected at exit.
    proc = run_script(tmp_path, """
        cycle = {"session": session}
        cycle["self"] = cycle
        del session, cycle
    """)
    try:
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert out.strip().endswith("done")
