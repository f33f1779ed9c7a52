"""Frozen moments, lock() and park() from Python: a moment frozen during a
detached run and loaded into a fresh model shows the live pause's tensors;
a locked, parked session refuses changes over HTTP and on the Session while
experiments run; damaged and foreign files raise MomentError."""

import json
import threading

import pytest
import torch
import torch.nn.functional as F

import nansense

from conftest import Api, SmallCnn, TrainingThread, make_data, make_loader


def train(session, model, optimizer, loader, epochs=2):
    for _ in range(epochs):
        for x, y in session.batches(loader, phase="train"):
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
            optimizer.step()
    session.close()


def replay(m, batch):
    return F.cross_entropy(m(batch[0]), batch[1])


def freeze(path):
    torch.manual_seed(0)
    model = SmallCnn()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    session = nansense.start(model, optimizer=optimizer, epochs=2, phases={"train": 4})
    session.set_stats_scope("all")
    session.freeze_moment(path, phase="train", epoch=1, batch_idx=2)
    session.detach()
    train(session, model, optimizer, make_loader(make_data(32), shuffle=False))
    assert path.exists()


def test_a_loaded_moment_shows_the_live_pause(tmp_path):
    path = tmp_path / "demo.moment"
    freeze(path)

    # The same run paused live at the same batch.
    torch.manual_seed(0)
    model = SmallCnn()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    live = nansense.start(model, optimizer=optimizer, epochs=2, phases={"train": 4}, port=0, open_browser=False)
    live.set_stats_scope("all")
    live.run_until(phase="train", epoch=1, batch_idx=2)
    thread = TrainingThread(lambda: train(live, model, optimizer, make_loader(make_data(32), shuffle=False)))
    assert live.wait_until_stopped(60) == nansense.RunState.PAUSED
    expected = live.snapshot
    live_history = Api(live.url).get("/api/stats/history?layer=features.0")
    live.detach()
    thread.join()

    torch.manual_seed(7)
    loaded = nansense.load_moment(SmallCnn(), path, replay=replay, port=0, open_browser=False)
    got = loaded.snapshot
    assert (got.position.phase, got.position.epoch, got.position.batch_idx) == ("train", 1, 2)
    assert set(got.activations) == set(expected.activations)
    for layer, t in expected.activations.items():
        assert torch.equal(got.activations[layer], t), layer
    for layer, t in expected.activation_gradients.items():
        assert torch.equal(got.activation_gradients[layer], t), layer
    assert Api(loaded.url).get("/api/stats/history?layer=features.0") == live_history
    loaded.close()


def test_a_locked_parked_session_refuses_changes_and_runs_experiments(tmp_path):
    path = tmp_path / "demo.moment"
    freeze(path)
    session = nansense.load_moment(SmallCnn(), path, replay=replay, port=0, open_browser=False)
    session.lock()
    assert session.locked
    parked = threading.Thread(target=session.park)
    parked.start()
    assert session.wait_until_stopped(60) == nansense.RunState.PAUSED
    api = Api(session.url)
    for route, body in [("/api/step", {}), ("/api/stats/watch", {"layers": ["features.0"]}),
                        ("/api/stats/scope", {"scope": "none"})]:
        status, payload, _ = api.request("POST", route, body)
        assert status == 409 and b"locked" in payload, (route, status, payload)
    # A probe applies to the visitor that set it alone: this request carries
    # no visitor cookie, so the next one (a new visitor) sees no probe.
    status, payload, _ = api.request("POST", "/api/probe/pin", {"timeout_seconds": 10})
    assert status == 200 and json.loads(payload)["active"] is True, (status, payload)
    shared = api.get("/api/status")
    assert shared["locked"] is True
    assert shared["probe"]["active"] is False, shared["probe"]
    result = api.post("/api/experiments/run", {"kind": "gradcam", "layer": "features.0", "params": {"batch": 50}})
    assert result["stage"] == "done", result
    assert result["clamped_params"] == ["batch"]

    session.set_stats_scope("none")
    assert session.stats_scope == nansense.StatsScope.ALL
    session.step_batch()
    assert session.state == nansense.RunState.PAUSED
    with pytest.raises(RuntimeError, match="locked"):
        session.watch_metric("m")(lambda ctx: 1.0)
    with pytest.raises(nansense.TimeTravelError):
        session.request_time_travel(0)
    session.close()
    parked.join(timeout=60)
    assert not parked.is_alive()


def test_damaged_and_foreign_moments_raise_moment_error(tmp_path):
    path = tmp_path / "demo.moment"
    freeze(path)
    half = tmp_path / "half.moment"
    half.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(nansense.MomentError, match="truncated"):
        nansense.load_moment(SmallCnn(), half, replay=replay)
    foreign = tmp_path / "foreign.moment"
    foreign.write_bytes(b"not a nansense file")
    with pytest.raises(nansense.MomentError, match="foreign.moment"):
        nansense.load_moment(SmallCnn(), foreign, replay=replay)
    other = torch.nn.Sequential(torch.nn.Linear(3, 3))
    with pytest.raises(nansense.MomentError):
        nansense.load_moment(other, path, replay=lambda m, b: m(b[0]).sum())


class DropoutNet(torch.nn.Module):
    """Dropout between two layers: its output depends on the train/eval flag."""

    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(144, 32)
        self.drop = torch.nn.Dropout(0.5)
        self.fc2 = torch.nn.Linear(32, 10)

    def forward(self, x):
        return self.fc2(self.drop(torch.relu(self.fc1(x.flatten(1)))))


def train_and_validate(session, model, optimizer, train_loader, val_loader):
    for _ in range(2):
        model.train()
        for x, y in session.batches(train_loader, phase="train"):
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
            optimizer.step()
        model.eval()
        with torch.no_grad():
            for x, y in session.batches(val_loader, phase="val"):
                F.cross_entropy(model(x), y)
    session.close()


def dropout_run(**start):
    torch.manual_seed(0)
    model = DropoutNet()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    session = nansense.start(model, optimizer=optimizer, epochs=2, phases={"train": 4, "val": 2}, **start)
    loaders = (make_loader(make_data(32), shuffle=False), make_loader(make_data(16, seed=1), shuffle=False))
    return session, lambda: train_and_validate(session, model, optimizer, *loaders)


@pytest.mark.parametrize("phase,training", [("val", False), ("train", True)])
def test_a_loaded_moment_keeps_the_train_eval_flag_it_was_frozen_with(tmp_path, phase, training):
    path = tmp_path / f"{phase}.moment"
    session, run = dropout_run()
    session.freeze_moment(path, phase=phase, epoch=1, batch_idx=1)
    session.detach()
    run()
    assert path.exists()

    live, run = dropout_run(port=0, open_browser=False)
    live.run_until(phase=phase, epoch=1, batch_idx=1)
    thread = TrainingThread(run)
    assert live.wait_until_stopped(60) == nansense.RunState.PAUSED
    expected = live.snapshot
    live.detach()
    thread.join()

    # A fresh model in the opposite mode: load_moment must set the frozen one.
    fresh = DropoutNet().train(not training)
    torch.manual_seed(7)
    loaded = nansense.load_moment(fresh, path, replay=replay)
    assert fresh.training is training
    assert all(m.training is training for m in fresh.modules())
    got = loaded.snapshot
    assert (got.position.phase, got.position.batch_idx) == (phase, 1)
    assert set(got.activations) == set(expected.activations)
    # In train mode dropout draws its mask from the RNG the batch began with,
    # which the moment restores, so even its layers agree.
    for layer, t in expected.activations.items():
        assert torch.equal(got.activations[layer], t), layer
    loaded.close()
