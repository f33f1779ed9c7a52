"""The reference API's watching surface from Python: statistics settings and
views, custom instruments, probes, experiment settings, the schedule, and
what an unserved script does. Values are checked against what the loop
itself computed."""

import math

import pytest
import torch
import torch.nn.functional as F

import nansense
from conftest import Mlp, SmallCnn, TrainingThread, make_data, make_loader


def mlp_batches(n=5, seed=1):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(16, 4, generator=g), torch.randint(0, 3, (16,), generator=g)) for _ in range(n)]


def train(session, model, optimizer, data, epochs=1, record=None):
    for epoch in range(epochs):
        for x, y in session.batches(data, phase="train", epoch=epoch):
            out = model(x)
            if record is not None:
                record.append((epoch, out.detach().clone(), model.fc1(x).detach().clone()))
            optimizer.zero_grad()
            F.cross_entropy(out, y).backward()
            optimizer.step()
    session.close()


def detached_mlp_session(**kwargs):
    model = Mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    session = nansense.start(model, optimizer=optimizer, **kwargs)
    session.detach()
    return model, optimizer, session


def test_statistics_count_every_element_the_loop_produced():
    model, optimizer, session = detached_mlp_session()
    session.set_stats_scope("all")
    assert session.stats_scope is nansense.StatsScope.ALL
    record = []
    train(session, model, optimizer, mlp_batches(), epochs=2, record=record)
    snap = session.watch_snapshot()
    for epoch in (0, 1):
        fc1 = snap.stats[("fc1", "train", epoch)]
        outs = torch.cat([o for e, _, o in record if e == epoch])
        assert fc1.batches == 5
        assert fc1.activations.n == outs.numel()
        assert fc1.activations.mean == pytest.approx(outs.mean().item(), rel=1e-4, abs=1e-6)
        assert fc1.activations.min == pytest.approx(outs.min().item(), abs=1e-6)
        assert fc1.activations.max == pytest.approx(outs.max().item(), abs=1e-6)
        assert fc1.activations.std == pytest.approx(outs.std(unbiased=False).item(), rel=1e-3)
        if epoch == 1:  # the newest epoch keeps its bins (tensors this small are binned whole)
            assert sum(fc1.activations.hist) == fc1.activations.n
            assert len(fc1.activations.hist) + 1 == len(nansense.histogram_edges())
        else:  # an older one's collapsed, its median kept
            assert fc1.activations.hist is None
        assert outs.min().item() <= fc1.activations.median <= outs.max().item()
        assert fc1.gradients is not None and fc1.gradients.n == outs.numel()
    assert [s.epoch for s in snap.phase_history("fc1", "train")] == [0, 1]
    assert snap.latest_per_phase("fc1")["train"].epoch == 1
    weights = snap.weight_history("fc1")
    assert set(weights) == {"fc1.weight", "fc1.bias"}
    assert [e for e, _ in weights["fc1.weight"]] == [0, 1]
    only = session.watch_snapshot(layers=["fc2"], include_patches=False)
    assert {k[0] for k in only.stats} == {"fc2"}


def test_a_loops_end_shows_every_batch_it_collected_before_close():
    # The default live view publishes every 2 s; a loop shorter than that
    # (here a detached one, which never captures) is shown whole when it ends.
    model, optimizer, session = detached_mlp_session()
    session.set_stats_scope("all")
    record = []
    for x, y in session.batches(mlp_batches(), phase="train"):
        out = model(x)
        record.append(model.fc1(x).detach().clone())
        optimizer.zero_grad()
        F.cross_entropy(out, y).backward()
        optimizer.step()
        assert session.watch_snapshot().stats == {}  # no update was due
    fc1 = session.watch_snapshot().stats[("fc1", "train", 0)]
    assert fc1.batches == 5
    assert fc1.activations.n == sum(o.numel() for o in record)
    assert fc1.activations.max == pytest.approx(max(o.max().item() for o in record), abs=1e-6)
    session.close()


def test_watched_scope_collects_only_the_watched_layer():
    model, optimizer, session = detached_mlp_session()
    assert session.stats_scope is nansense.StatsScope.WATCHED
    assert session.watch("fc2") is True  # before the first capture: kept, checked later
    train(session, model, optimizer, mlp_batches())
    assert session.watched_layers == frozenset({"fc2"})
    assert {k[0] for k in session.watch_snapshot().stats} == {"fc2"}
    assert session.watch("no_such_layer") is False
    assert session.watched_layers == frozenset({"fc2"})
    session.unwatch("fc2")
    assert session.watched_layers == frozenset()


def test_settings_refuse_bad_values_and_change_nothing():
    _, _, session = detached_mlp_session()
    with pytest.raises(TypeError):
        session.watch(3)
    with pytest.raises(ValueError, match='"none", "watched" or "all"'):
        session.set_stats_scope("everything")
    assert session.stats_scope is nansense.StatsScope.WATCHED
    with pytest.raises(ValueError, match="whole number >= 1"):
        session.set_update_frequency(unit="batch", n=0)
    with pytest.raises(ValueError, match="unit"):
        session.set_update_frequency(unit="fortnight")
    with pytest.raises(ValueError, match="phase applies"):
        session.set_update_frequency(unit="epoch", n=1, phase="train")
    assert session.update_frequency == nansense.UpdateFrequency()
    session.set_update_frequency(unit="batch", n=3)
    assert session.update_frequency == nansense.UpdateFrequency(unit="batch", n=3, phase=None)
    with pytest.raises(ValueError, match="channel_limit must be >= 1"):
        session.set_watch_performance(channel_limit=0)
    with pytest.raises(TypeError, match="average_patches must be a bool"):
        session.set_watch_performance(average_patches="yes")
    assert session.watch_performance == nansense.WatchPerformance()
    assert session.set_watch_performance(channel_limit=4, average_patches=True) is True
    assert session.watch_performance.channel_limit == 4 and session.watch_performance.average_patches
    assert session.set_watch_performance(channel_limit=4) is False  # no effective change: nothing flushed
    with pytest.raises(TypeError):
        session.set_patch_layers("fc1")  # a string is not a list of names


def test_metric_instruments_see_the_live_layer_and_report_failures():
    model, optimizer, session = detached_mlp_session()
    session.set_stats_scope("all")
    seen = []

    @session.watch_metric("mean")
    def mean(ctx):
        assert isinstance(ctx, nansense.LayerContext) and not torch.is_grad_enabled()
        if ctx.layer == "fc1":
            seen.append(ctx.activation.mean().item())
            assert ctx.module is model.fc1
            assert set(ctx.weights) == {"fc1.weight", "fc1.bias"}
            assert ctx.optimizer_state["fc1.weight"]["momentum_buffer"].shape == model.fc1.weight.shape
        return ctx.activation.mean()  # a 1-element tensor

    @session.watch_metric("spread", on="epoch", reduce=lambda values: max(values) - min(values))
    def spread(ctx):
        return {"max": ctx.activation.max().item(), "min": ctx.activation.min().item()}

    @session.watch_metric("broken")
    def broken(ctx):
        raise ArithmeticError("the instrument's own bug")

    assert mean.__name__ == "mean"  # the decorator returns the function
    record = []
    train(session, model, optimizer, mlp_batches(), record=record)
    assert "broken" in session.instrument_errors
    assert "ArithmeticError" in session.instrument_errors["broken"]
    assert "mean" not in session.instrument_errors and "spread" not in session.instrument_errors
    metrics = session.watch_metrics_snapshot()
    series = metrics.series[("fc1", "train", "mean", "")]
    assert series.on == "batch" and series.batches == (0, 1, 2, 3, 4)
    assert list(series.values) == pytest.approx(seen, rel=1e-6)
    assert list(series.values) == pytest.approx([o.mean().item() for _, _, o in record], rel=1e-5)
    assert series.xs == pytest.approx((0.0, 0.2, 0.4, 0.6, 0.8))
    per_epoch = metrics.series[("fc1", "train", "spread", "max")]
    assert per_epoch.on == "epoch" and per_epoch.batches == (None,)
    maxima = [o.max().item() for _, _, o in record]
    assert per_epoch.values[0] == pytest.approx(max(maxima) - min(maxima), rel=1e-5)
    assert set(metrics.plots("fc1", "train")) == {"mean", "spread"}
    assert set(metrics.plots("fc1", "train")["spread"]) == {"max", "min"}
    assert {k[0] for k in session.watch_metrics_snapshot(layers=["fc2"]).series} == {"fc2"}


def test_metric_registration_refuses_bad_arguments():
    _, _, session = detached_mlp_session()
    with pytest.raises(ValueError, match="non-empty name"):
        session.watch_metric("")
    with pytest.raises(TypeError):
        session.watch_metric(7)
    with pytest.raises(ValueError, match='on must be "batch" or "epoch"'):
        session.watch_metric("m", on="step")
    with pytest.raises(ValueError, match="reduce must be one of"):
        session.watch_metric("m", on="epoch", reduce="median")
    with pytest.raises(ValueError, match="reduce applies"):
        session.watch_metric("m", reduce="sum")
    with pytest.raises(TypeError, match="registers a callable"):
        session.watch_metric("m")(42)
    session.watch_metric("m")(lambda ctx: 1.0)
    with pytest.raises(ValueError, match="already watched"):
        session.watch_metric("m")(lambda ctx: 2.0)
    session.watch_layer_tensor("t")(lambda ctx: None)
    with pytest.raises(ValueError, match="t"):
        session.watch_layer_tensor("t")(lambda ctx: None)


def test_tensor_instruments_land_in_the_snapshot():
    model = Mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    session = nansense.start(model, optimizer=optimizer, port=0, open_browser=False)
    session.watch("fc1")

    @session.watch_layer_tensor("doubled")
    def doubled(ctx):
        return ctx.activation * 2

    @session.watch_layer_tensor("wrong_shape")
    def wrong_shape(ctx):
        return ctx.activation.flatten()[:3]

    @session.watch_weight_tensor("momentum")
    def momentum(ctx):
        assert isinstance(ctx, nansense.WeightContext) and ctx.param.startswith("fc1.")
        return ctx.optimizer_state.get("momentum_buffer")

    data = mlp_batches()
    # Asked before the loop starts, so the first pause is after batch 0
    # whichever thread gets there first.
    session.step_batch()
    loop = TrainingThread(lambda: train(session, model, optimizer, data))
    assert session.wait_until_stopped(60) == nansense.RunState.PAUSED
    session.step_batch()
    assert session.wait_until_stopped(60) == nansense.RunState.PAUSED
    snap = session.snapshot
    assert snap.position.batch_idx == 1
    assert torch.allclose(snap.custom_activations["fc1"]["doubled"], snap.activations["fc1"] * 2)
    assert "wrong_shape" in session.instrument_errors
    assert "wrong_shape" not in snap.custom_activations["fc1"]
    assert torch.equal(snap.custom_weight_tensors["fc1.weight"]["momentum"],
                       snap.optimizer_state["fc1.weight"]["momentum_buffer"])
    session.detach()
    loop.join()


def test_probes_pin_perturb_and_refuse_while_running():
    model = SmallCnn()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    session = nansense.start(model, optimizer=optimizer, port=0, open_browser=False)
    loader = make_loader(make_data(32))

    def loop_body():
        for x, y in session.batches(loader, phase="train"):
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
            optimizer.step()
        session.close()

    loop = TrainingThread(loop_body)
    assert session.wait_until_stopped(60) == nansense.RunState.PAUSED
    assert not session.is_pinned and session.probe_mode == "unchanged"
    assert session.pin_current_batch(timeout=30) is True
    assert session.is_pinned and session.pinned_position == session.snapshot.position
    with pytest.raises(ValueError, match='"unchanged", "eval" or "train"'):
        session.set_probe_mode("inference")
    session.set_probe_mode("eval", timeout=30)
    assert session.probe_mode == "eval"
    with pytest.raises(ValueError):
        session.add_perturbation(index=[99, 99], values=[1.0], sample=0)  # outside the 12x12 input
    with pytest.raises(TypeError):
        session.add_perturbation(index="0,0", values=[1.0])
    session.add_perturbation(index=[2, 3], values=[5.0], sample=0, timeout=30)
    assert len(session._probe()["perturbations"]) == 1
    session.clear_perturbations(timeout=30)
    assert session._probe()["perturbations"] == []
    session.unpin_batch(timeout=30)
    assert not session.is_pinned
    session.detach()
    loop.join()
    with pytest.raises(nansense.ControlError):
        session.pin_current_batch()  # the run ended


def test_pinning_a_batch_drops_the_perturbations_it_cannot_hold():
    model = SmallCnn()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    session = nansense.start(model, optimizer=optimizer, port=0, open_browser=False)
    loader = make_loader(make_data(12), shuffle=False)  # batches of 8, then 4

    def loop_body():
        for x, y in session.batches(loader, phase="train"):
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
            optimizer.step()
        session.close()

    loop = TrainingThread(loop_body)
    assert session.wait_until_stopped(60) == nansense.RunState.PAUSED
    # Unpinned: checked against the live batch of 8.
    session.add_perturbation(index=[2, 3], values=[5.0], sample=6, timeout=30)
    session.add_perturbation(index=[1, 1], values=[1.0], sample=0, timeout=30)
    assert len(session._probe()["perturbations"]) == 2
    session.step_batch()
    assert session.wait_until_stopped(60) == nansense.RunState.PAUSED
    assert session.snapshot.position.batch_idx == 1
    # The batch of 4 has no sample 6: that perturbation goes, the pin stands.
    assert session.pin_current_batch(timeout=30) is True
    assert session.is_pinned and session.pinned_position == session.snapshot.position
    assert [p["sample"] for p in session._probe()["perturbations"]] == [0]
    session.detach()
    loop.join()


def test_experiment_settings():
    _, _, session = detached_mlp_session()
    assert session.auto_run_experiments is False
    session.set_auto_run_experiments(True)
    assert session.auto_run_experiments is True
    with pytest.raises(TypeError):
        session.set_auto_run_experiments("on")
    session.set_experiment_defaults("deep_dream", steps=40)
    assert session.experiment_defaults["deep_dream"]["steps"] == 40
    session.set_experiment_defaults(batch=2)  # every kind that has "batch"
    assert all(session.experiment_defaults[k]["batch"] == 2 for k in ("gradcam", "occlusion", "neuron_ig"))
    assert session.experiment_defaults["deep_dream"]["steps"] == 40  # kept
    with pytest.raises(ValueError, match="flux_capacitor"):
        session.set_experiment_defaults(flux_capacitor=1)
    with pytest.raises(ValueError, match="unknown experiment kind"):
        session.set_experiment_defaults("alchemy", steps=1)
    with pytest.raises(ValueError):
        session.set_experiment_defaults("deep_dream", steps=-5)  # the engine's range check
    assert session.experiment_defaults["deep_dream"]["steps"] == 40


def test_the_schedule_is_a_view():
    model, optimizer, session = detached_mlp_session(phases={"train": 5})
    schedule = session.schedule
    assert isinstance(schedule, nansense.Schedule)
    assert schedule.phases == {"train": 5} and schedule.phase_count("train") == 5
    assert schedule.phase_count("val") is None
    session.set_schedule(epochs=3)
    assert schedule.epochs == 3  # read when asked


def test_an_unserved_script_trains_on_with_the_checks_on(capsys, tmp_path):
    model = Mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    session = nansense.start(model, optimizer=optimizer)
    session.set_debug_settings(nansense.DebugSettings(capsule_dir=str(tmp_path)))
    data = mlp_batches()
    data[3] = (torch.full_like(data[3][0], math.nan), data[3][1])
    loop = TrainingThread(lambda: train(session, model, optimizer, data))
    loop.join(120)  # never pauses: nothing could resume it
    assert session.state is nansense.RunState.FINISHED
    err = capsys.readouterr().err
    assert "no UI is served" in err and "nansense.serve(session)" in err
    assert "nansense::serve" not in err  # Python words in Python
    assert session.debug_error is not None and session.debug_error.position.batch_idx == 3
    assert session.debug_error.capsule


def test_an_unserved_script_that_asks_to_pause_is_paused():
    model = Mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    session = nansense.start(model, optimizer=optimizer)
    session.pause()
    loop = TrainingThread(lambda: train(session, model, optimizer, mlp_batches()))
    assert session.wait_until_stopped(60) == nansense.RunState.PAUSED
    assert session.live_position.batch_idx == 0
    session.detach()
    loop.join()
