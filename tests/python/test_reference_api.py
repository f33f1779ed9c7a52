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
    seen = session.pause_count
    session.step_until_position(phase_index=0, epoch=1, batch_idx=0)
    assert session.wait_until_paused(after_pauses=seen, timeout=60)
    assert (session.live_position.phase, session.live_position.epoch, session.live_position.batch_idx) == \
        ("train", 1, 0)
    seen = session.pause_count
    session.step_until_position(phase_index=1, epoch=1, batch_idx=0)
    assert session.wait_until_paused(after_pauses=seen, timeout=60)
    assert session.live_position.phase == "val"
    # step_run() runs to the run's last batch and pauses there.
    seen = session.pause_count
    session.step_run()
    assert session.wait_until_paused(after_pauses=seen, timeout=60)
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
    assert session.wait_until_paused(after_pauses=1, timeout=60)
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
    assert session.wait_until_paused(after_pauses=1, timeout=60)
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


# ---- the manual loop: session.batch(phase=, epoch=, item=)


def manual_loop(session, model, optimizer, epochs=2, train=3, val=2):
    train_loader = make_loader(make_data(8 * train), shuffle=False)
    val_loader = make_loader(make_data(8 * val, seed=1), shuffle=False)
    for epoch in range(epochs):
        for x, y in train_loader:
            with session.batch(phase="train", epoch=epoch, item=(x, y)):
                optimizer.zero_grad()
                F.cross_entropy(model(x), y).backward()
                optimizer.step()
        with torch.no_grad():
            for x, y in val_loader:
                with session.batch(phase="val", epoch=epoch, item=(x, y)):
                    model(x)
    session.close()


def test_the_manual_batch_context_pauses_steps_and_runs_like_batches():
    model = SmallCnn()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    session = nansense.start(model, optimizer=optimizer, epochs=2, phases={"train": 3, "val": 2})
    session.stop()
    thread = TrainingThread(lambda: manual_loop(session, model, optimizer))
    assert session.wait_until_paused(timeout=60)
    assert session.live_position == nansense.BatchPosition("train", 0, 0)
    assert session.snapshot.position.batch_idx == 0 and "features.0" in session.snapshot.activations
    session.step_phase()
    assert session.wait_until_paused(after_pauses=1, timeout=60)
    assert (session.live_position.phase, session.live_position.epoch) == ("val", 0)
    session.step_run()
    assert session.wait_until_paused(after_pauses=2, timeout=60)
    assert session.live_position.is_last_overall
    session.step_batch()
    thread.join()
    assert session.closed and not session.training_lost


def test_a_manual_batch_that_raises_loses_the_loop_with_its_error():
    model = SmallCnn()
    session = nansense.start(model)
    session.detach()
    with pytest.raises(ZeroDivisionError):
        with session.batch(phase="train", epoch=0):
            1 / 0
    assert session.training_lost
    assert session.training_error.startswith("ZeroDivisionError")


def test_batch_checks_its_arguments_and_is_inert_when_disabled():
    session = nansense.start(SmallCnn())
    with pytest.raises(TypeError, match="phase"):
        session.batch(phase="", epoch=0)
    with pytest.raises(TypeError, match="epoch"):
        session.batch(phase="train", epoch="0")
    with pytest.raises(TypeError):
        session.batch("train", 0)  # keyword-only, as the reference's
    disabled = nansense.start(SmallCnn(), enabled=False)
    with disabled.batch(phase="train", epoch=0):
        pass
    assert disabled.live_position is None


def test_a_moment_frozen_in_a_manual_loop_holds_its_item(tmp_path):
    model = SmallCnn()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    session = nansense.start(model, optimizer=optimizer, epochs=1, phases={"train": 3, "val": 2})
    path = tmp_path / "manual.moment"
    session.freeze_moment(path, phase="train", epoch=0, batch_idx=2)
    session.detach()
    manual_loop(session, model, optimizer, epochs=1)
    fresh = SmallCnn()
    viewer = nansense.load_moment(fresh, path, replay=lambda m, batch: F.cross_entropy(m(batch[0]), batch[1]))
    p = viewer.snapshot.position
    assert (p.phase, p.epoch, p.batch_idx) == ("train", 0, 2)
    # The replay ran on the stored item: batch 2 of the loader.
    x, _ = list(make_loader(make_data(24), shuffle=False))[2]
    assert torch.equal(viewer.snapshot.activations["input"], x)
    viewer.close()


# ---- pause_count and wait_until_paused(after_pauses=)


def test_pause_count_counts_the_pauses_and_after_pauses_waits_past_them():
    session, model, optimizer, thread = paused_session()
    assert session.pause_count == 1
    # Paused once: waiting for more than one pause times out while paused.
    assert session.wait_until_paused(after_pauses=1, timeout=0.05) is False
    seen = session.pause_count
    session.step_batch()
    assert session.wait_until_paused(after_pauses=seen, timeout=60)
    assert session.pause_count == seen + 1
    session.detach()
    thread.join()
    assert session.wait_until_paused(after_pauses=100, timeout=0)  # closed: nothing to wait for
    assert nansense.start(SmallCnn(), enabled=False).pause_count == 0


# ---- experiments under the reference's names


def test_request_experiment_runs_on_the_paused_loop_and_reports_its_result():
    session, model, optimizer, thread = paused_session()
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    assert session.experiment_result is None and not session.experiment_pending
    seq = session.request_experiment(kind="neuron_gradient", layer="features.0", params={"channel": 1, "batch": 2})
    assert isinstance(seq, int) and seq > 0
    assert session.wait_for_experiment(timeout=60)
    result = session.experiment_result_for(seq)
    assert isinstance(result, nansense.ExperimentResult)
    assert (result.seq, result.kind, result.layer, result.done, result.error) == (seq, "neuron_gradient",
                                                                                   "features.0", True, None)
    assert result.attribution.shape == (2, 1, 12, 12) and result.image is None
    assert torch.equal(result.reference, session.snapshot.activations["input"][:2])
    assert session.experiment_result.seq == seq and session.experiment_result.done
    # The training state is untouched (the run is isolated).
    assert all(torch.equal(before[n], p) for n, p in model.named_parameters())
    session.detach()
    thread.join()


def test_cancel_experiment_stops_a_long_run_and_bad_requests_raise():
    session, model, optimizer, thread = paused_session()
    seq = session.request_experiment(kind="deep_dream", layer="features.0",
                                     params={"steps": 10000, "channels": 1})
    session.cancel_experiment(seq)
    assert session.wait_for_experiment(timeout=60)
    result = session.experiment_result_for(seq)
    # Stopped before it ran, or at its next step: either way not finished.
    assert result.done and result.stage == "stopped" and "cancel" in result.stop_reason
    assert result.step < 10000 and result.error is None
    with pytest.raises(ValueError, match="no_such_kind"):
        session.request_experiment(kind="no_such_kind", layer="features.0", params={})
    with pytest.raises(ValueError, match="no_such_layer"):
        session.request_experiment(kind="deep_dream", layer="no_such_layer", params={})
    with pytest.raises(TypeError, match="params"):
        session.request_experiment(kind="deep_dream", layer="features.0", params=[1])
    assert session.experiment_result_for(10_000) is None
    session.detach()
    thread.join()
    disabled = nansense.start(SmallCnn(), enabled=False)
    assert disabled.request_experiment(kind="deep_dream", layer="x", params={}) == 0
    assert disabled.experiment_result is None and disabled.wait_for_experiment(timeout=0) is False


def test_an_experiment_requested_while_running_waits_for_the_next_pause():
    session, model, optimizer, thread = paused_session()
    seen = session.pause_count
    session.step_batch()  # running until the next pause
    seq = session.request_experiment(kind="gradcam", layer="features.0", params={"batch": 2})
    assert session.wait_until_paused(after_pauses=seen, timeout=60)
    assert session.wait_for_experiment(timeout=60)
    result = session.experiment_result_for(seq)
    assert result.done and result.error is None and result.attribution is not None
    session.detach()
    thread.join()


# ---- statistics in the reference's types


def watched_run(scope=nansense.StatsScope.ALL):
    model = SmallCnn()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    session = nansense.start(model, optimizer=optimizer)
    session.set_stats_scope(scope)
    session.watch("features.0")  # Min/Max patches are the watched layers'
    session.detach()
    loop(session, model, optimizer)
    return session, model


def test_watch_snapshot_weights_are_tensor_stats_snapshots():
    session, model = watched_run()
    snap = session.watch_snapshot()
    history = snap.weight_history("features.0")
    assert set(history) == {"features.0.weight", "features.0.bias"}
    assert [e for e, _ in history["features.0.weight"]] == [0, 1]
    for (layer, epoch), params in snap.weights.items():
        for name, stats in params.items():
            assert isinstance(stats, nansense.TensorStatsSnapshot)
            assert stats.n == dict(model.named_parameters())[name].numel()
            assert stats.min <= stats.mean <= stats.max
    # The last sample is the weights as they were when it was taken: after
    # training, their std and mean stay finite and the norm is ours.
    last = history["features.0.weight"][-1][1]
    assert math.isfinite(last.std) and last.value_norm > 0


def test_watch_snapshot_keeps_each_tensors_dtype_and_each_weights_median():
    # Under bf16 autocast the Linear layers' outputs (and their gradients)
    # are bfloat16, the ReLU's too, while the parameters stay float32.
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.ReLU(), torch.nn.Linear(5, 3))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    session = nansense.start(model, optimizer=optimizer)
    session.set_stats_scope(nansense.StatsScope.ALL)
    session.detach()
    sampled = {}
    for epoch in session.epochs(2):
        for i, x in enumerate(session.batches([torch.randn(4, 6) for _ in range(2)], phase="train")):
            optimizer.zero_grad()
            with torch.autocast("cpu", dtype=torch.bfloat16):
                out = model(x)
            out.float().sum().backward()
            optimizer.step()
            if i == 0:  # an epoch's sample is taken at its first batch, after the step
                sampled[epoch] = {n: p.detach().clone() for n, p in model.named_parameters()}
    session.close()
    snap = session.watch_snapshot()
    stats = snap.latest_per_phase("0")["train"]
    assert stats.activations.dtype == torch.bfloat16 and stats.gradients.dtype == torch.bfloat16
    for (layer, epoch), params in snap.weights.items():
        for name, sample in params.items():
            assert sample.dtype == torch.float32 and sample.hist is None
            expected = sampled[epoch][name].flatten().median().item()
            assert sample.median == expected == sample.collapsed_median, (name, epoch)


def test_layer_stats_patches_have_the_reference_layout():
    session, model = watched_run()
    stats = session.watch_snapshot().latest_per_phase("features.0")["train"]
    assert stats.patches is not None
    grid = stats.patches.by_type["max_pixel"]
    channels, samples = grid.values.shape
    assert channels == 4 and samples >= 1
    assert grid.patches.shape[:3] == (channels, samples, 1) and grid.crop
    assert grid.heat.shape[:2] == (channels, samples)
    assert grid.top.shape == grid.left.shape == (channels, samples) and grid.input_hw == (12, 12)
    assert "min_pixel" in stats.patches.by_type
    # Ours, the same patches per ranking.
    assert {g.ranking for g in stats.galleries} >= {"max_pixel", "min_pixel"}
    assert session.watch_snapshot(include_patches=False).latest_per_phase("features.0")["train"].patches is None


def test_training_restorer_alone_enables_time_travel(tmp_path):
    session = nansense.start(SmallCnn(), epochs=2)
    assert not session.time_travel_status().available
    session.training_restorer(cache_dir=tmp_path)
    assert session.time_travel_status().available
    session.close()


# ---- the reference's Session surface beyond its API page (from its source)


REFERENCE_SESSION_METHODS = {
    "batch": [["phase", "KEYWORD_ONLY", None], ["epoch", "KEYWORD_ONLY", None], ["item", "KEYWORD_ONLY", "None"]],
    "watch": [["layer", "POSITIONAL_OR_KEYWORD", None]],
    "unwatch": [["layer", "POSITIONAL_OR_KEYWORD", None]],
    "set_stats_scope": [["scope", "POSITIONAL_OR_KEYWORD", None]],
    "toggle_stats_collecting": [],
    "stats_phases": [["layer", "POSITIONAL_OR_KEYWORD", "None"]],
    "watch_snapshot": [["layers", "KEYWORD_ONLY", "None"], ["include_patches", "KEYWORD_ONLY", "True"]],
    "current_batch_stats": [["layers", "KEYWORD_ONLY", None], ["include_patches", "KEYWORD_ONLY", "True"]],
    "pin_current_batch": [],
    "unpin_batch": [],
    "add_perturbation": [["input_name", "KEYWORD_ONLY", None], ["sample", "KEYWORD_ONLY", None],
                         ["index", "KEYWORD_ONLY", None], ["values", "KEYWORD_ONLY", None]],
    "clear_perturbations": [],
    "set_probe_mode": [["mode", "POSITIONAL_OR_KEYWORD", None]],
    "wait_for_probe": [["after_count", "KEYWORD_ONLY", "0"], ["timeout", "KEYWORD_ONLY", "None"]],
    "experiment_result_for": [["seq", "POSITIONAL_OR_KEYWORD", None]],
    "request_experiment": [["kind", "KEYWORD_ONLY", None], ["layer", "KEYWORD_ONLY", None],
                           ["params", "KEYWORD_ONLY", None]],
    "cancel_experiment": [["seq", "POSITIONAL_OR_KEYWORD", "None"]],
    "wait_for_experiment": [["timeout", "KEYWORD_ONLY", "None"]],
    "set_update_frequency": [["unit", "KEYWORD_ONLY", None], ["n", "KEYWORD_ONLY", "1"],
                             ["phase", "KEYWORD_ONLY", "None"]],
    "set_auto_run_experiments": [["enabled", "POSITIONAL_OR_KEYWORD", None]],
    "set_experiment_defaults": [["defaults", "VAR_KEYWORD", None]],
    "set_debug_settings": [[k, "KEYWORD_ONLY", "None"] for k in
                           ("enabled", "interval", "check_nan_inf", "check_under_over", "threshold")],
    "set_watch_performance": [[k, "KEYWORD_ONLY", "None"] for k in
                              ("channel_limit_enabled", "channel_limit", "samples_per_channel", "average_patches")],
    "disable_debug_check": [["category", "POSITIONAL_OR_KEYWORD", None]],
    "current_weights": [],
    "current_weight_gradients": [],
    "current_optimizer_state": [],
    "current_optimizer_hyperparams": [],
    "request_snapshot": [],
    "stop": [],
    "step_batch": [],
    "step_phase": [],
    "step_epoch": [],
    "step_run": [],
    "step_until_position": [["phase_index", "KEYWORD_ONLY", None], ["epoch", "KEYWORD_ONLY", None],
                            ["batch_idx", "KEYWORD_ONLY", None]],
    "detach": [],
    "request_time_travel": [["epoch", "POSITIONAL_OR_KEYWORD", None]],
    "wait_until_paused": [["after_pauses", "KEYWORD_ONLY", "0"], ["timeout", "KEYWORD_ONLY", "None"]],
}
REFERENCE_SESSION_PROPERTIES = [
    "schedule", "optimizer", "scheduler", "mode", "snapshot", "live_position", "closed", "enabled", "input_names",
    "layer_names", "layer_weights", "layer_info", "pause_count", "is_running", "watched_layers",
    "instrument_errors", "stats_scope", "stats_collecting", "stats_layers", "probe_result", "probe_error",
    "probe_count", "probe_mode", "is_pinned", "pinned_position", "perturbations", "experiment_result",
    "experiment_pending", "update_frequency", "auto_run_experiments", "experiment_defaults", "debug_settings",
    "watch_performance", "debug_error", "locked",
]


def test_the_reference_session_surface_beyond_its_api_page():
    from test_reference_names import check_signature
    problems = []
    for name, params in REFERENCE_SESSION_METHODS.items():
        method = getattr(nansense.Session, name, None)
        if method is None:
            problems.append(f"Session.{name}: missing")
        else:
            problems += check_signature(f"Session.{name}", method, params)
    for name in REFERENCE_SESSION_PROPERTIES:
        if not isinstance(getattr(nansense.Session, name, None), property):
            problems.append(f"Session.{name}: not a property")
    assert not problems, "\n".join(problems)


def test_probe_reads_and_wait_for_probe_under_the_reference_names():
    session, model, optimizer, thread = paused_session()
    assert session.optimizer is optimizer and session.scheduler is None
    assert session.probe_result is None and session.probe_count == 0 and session.perturbations == {}
    assert session.pin_current_batch()
    assert session.wait_for_probe(after_count=0, timeout=60)
    result = session.probe_result
    assert isinstance(result, nansense.ProbeResult) and result.error is None and session.probe_error is None
    assert session.probe_count >= 1 and result.run == session.probe_count
    assert (result.position.phase, result.position.batch_idx) == ("train", 0)
    assert torch.equal(result.inputs[0], session.snapshot.activations["input"])
    assert result.activations["features.0"].shape == session.snapshot.activations["features.0"].shape
    seen = session.probe_count
    session.add_perturbation(index=(0, 0), values=(2.0,), sample=0)
    assert session.wait_for_probe(after_count=seen, timeout=60)
    assert session.perturbations == {("input", 0, (0, 0)): (2.0,)}
    assert session.probe_result.diff and session.probe_result.perturbations_applied == 1
    assert session.wait_for_probe(after_count=10_000, timeout=0.05) is False
    session.detach()
    thread.join()


def test_a_manual_batch_that_goes_non_finite_is_reported_and_not_run_again():
    model = SmallCnn()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    session = nansense.start(model, optimizer=optimizer, phases={"train": 3})
    session.detach()
    bodies = 0
    for i, (x, y) in enumerate(make_loader(make_data(24), shuffle=False)):
        with session.batch(phase="train", epoch=0, item=(x, y)):
            bodies += 1
            optimizer.zero_grad()
            out = model(x * float("nan") if i == 1 else x)
            F.cross_entropy(out, y).backward()
    session.close()
    assert bodies == 3  # the with block ran each batch once: nothing was repeated
    error = session.debug_error
    assert error is not None and (error.position.phase, error.position.batch_idx) == ("train", 1)
    assert error.root_cause is not None and error.root_cause["status"] == "not_traced"
    assert "not run again" in error.root_cause["summary"]
