"""nansense.lightning with real Lightning on the CPU: the callback paused and
stepped over the served API, the declared schedule (validation every N
epochs, sanity checks skipped), the refusals, enabled=False, a time-travel
jump that re-enters fit with everything restored (losses bit for bit), and
the NaN-capture scheme's own example (a per-class loss divided by each
class's count on torchvision's ResNet): caught at the division without a
UI, the trainer stopped, the capsule replayed both on the bare network and
as a Lightning run; and a tripped batch's traced re-run with a per-batch
LR scheduler and counters in training_step (what runs twice, what once)."""

import os
import threading

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, IterableDataset, TensorDataset

pl = pytest.importorskip("lightning.pytorch")
torchvision = pytest.importorskip("torchvision")

import nansense  # noqa: E402
from nansense.lightning import NansenseCallback, fit_with_time_travel, replay_capsule  # noqa: E402

from conftest import Api, TrainingThread  # noqa: E402


class Served(NansenseCallback):
    """A NansenseCallback that tells the test when its UI is up."""

    def __init__(self, **kwargs):
        super().__init__(port=0, open_browser=False, **kwargs)
        self.up = threading.Event()

    def on_fit_start(self, trainer, pl_module):
        super().on_fit_start(trainer, pl_module)
        self.up.set()

    def api(self):
        assert self.up.wait(60), "fit did not start"
        return Api(self.session.url)


def trainer(**kwargs):
    options = dict(accelerator="cpu", devices=1, max_epochs=2, logger=False, enable_checkpointing=False,
                   enable_progress_bar=False, enable_model_summary=False)
    options.update(kwargs)
    return pl.Trainer(**options)


def image_data(n, seed=0):
    g = torch.Generator().manual_seed(seed)
    return TensorDataset(torch.randn(n, 1, 12, 12, generator=g), torch.randint(0, 10, (n,), generator=g))


class Classifier(pl.LightningModule):
    """A small CNN inside a LightningModule (as `net`), recording what each
    training step saw."""

    def __init__(self, dropout=0.0, schedule=False):
        super().__init__()
        self.net = nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                                 nn.Dropout(dropout), nn.Linear(4 * 5 * 5, 10))
        self.schedule = schedule
        self.steps = []        # (epoch, batch_idx, global_step, loss, lr)
        self.val_positions = []
        self.epoch_phases = []

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("train_loss", loss)
        lr = self.trainer.optimizers[0].param_groups[0]["lr"]
        self.steps.append((self.current_epoch, batch_idx, self.global_step, loss.detach().clone(), lr))
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", F.cross_entropy(self(x), y))
        callback = next((c for c in self.trainer.callbacks if isinstance(c, NansenseCallback)), None)
        if callback is not None and not self.trainer.sanity_checking:
            self.val_positions.append(callback.session.live_position)

    def on_train_epoch_start(self):
        callback = next((c for c in self.trainer.callbacks if isinstance(c, NansenseCallback)), None)
        if callback is not None and callback.session.enabled:
            self.epoch_phases.append(dict(callback.session.schedule.phases))

    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)
        if not self.schedule:
            return optimizer
        return {"optimizer": optimizer, "lr_scheduler": torch.optim.lr_scheduler.StepLR(optimizer, 1, gamma=0.5)}


def test_the_callback_pauses_and_steps_over_the_api_with_a_worker_loader():
    module = Classifier()
    callback = Served(model="net")
    assert callback.session is None
    train = DataLoader(image_data(24), batch_size=8, num_workers=2)
    val = DataLoader(image_data(16, seed=1), batch_size=8)
    fit = TrainingThread(lambda: trainer(max_epochs=1, callbacks=[callback]).fit(module, train, val))
    # The session appears when fit starts; the first batch pauses.
    api = callback.api()
    session = callback.session
    assert session.wait_until_stopped(60) == nansense.RunState.PAUSED
    status = api.get("/api/status")
    assert status["live_position"] == {**status["live_position"], "phase": "train", "epoch": 0, "batch_idx": 0}
    assert session.schedule.phases == {"train": 3, "val": 2}
    # Layers are the network's module paths (model="net"), captured from the batch.
    assert {"1", "5"} <= set(session.layer_names)
    assert len(module.steps) == 1

    status = api.post("/api/step", {"unit": "batch", "timeout_seconds": 30})
    assert status["live_position"]["batch_idx"] == 1 and len(module.steps) == 2
    status = api.post("/api/step", {"unit": "phase", "timeout_seconds": 30})
    assert status["live_position"]["phase"] == "val" and status["live_position"]["batch_idx"] == 0
    assert len(module.steps) == 3
    assert "5" not in session.snapshot.activation_gradients  # validation: no backward
    api.post("/api/run", {"detach": True})
    fit.join()
    assert session.state == nansense.RunState.FINISHED
    # Sanity-check batches were not debugger batches: two val batches, epoch 0.
    assert [(p.phase, p.epoch, p.batch_idx) for p in module.val_positions] == [("val", 0, 0), ("val", 0, 1)]


def test_validation_every_second_epoch_declares_train_only_epochs():
    module = Classifier()
    callback = NansenseCallback(model="net")
    trainer(max_epochs=3, check_val_every_n_epoch=2, callbacks=[callback]).fit(
        module, DataLoader(image_data(16), batch_size=8), DataLoader(image_data(8, seed=1), batch_size=4))
    assert module.epoch_phases == [{"train": 2}, {"train": 2, "val": 2}, {"train": 2}]
    assert [(p.phase, p.epoch, p.batch_idx) for p in module.val_positions] == [("val", 1, 0), ("val", 1, 1)]
    session = callback.session
    assert session.state == nansense.RunState.FINISHED
    assert session.debug_error is None and session.internal_errors == []
    # Validating after fit runs the hooks again, outside the debugger.
    t = module.trainer
    results = t.validate(module, DataLoader(image_data(8, seed=1), batch_size=4), verbose=False)
    assert "val_loss" in results[0]
    assert session.state == nansense.RunState.FINISHED and session.internal_errors == []
    with pytest.raises(RuntimeError, match="give the next fit a new NansenseCallback"):
        trainer(max_epochs=1, callbacks=[callback]).fit(module, DataLoader(image_data(8), batch_size=4))


class _NoLength(IterableDataset):
    def __iter__(self):
        for i in range(4):
            yield torch.randn(1, 12, 12), torch.tensor(i % 10)


class _Manual(Classifier):
    def __init__(self):
        super().__init__()
        self.automatic_optimization = False


def test_what_it_cannot_follow_is_refused_with_the_reason():
    data = DataLoader(image_data(16), batch_size=8)
    with pytest.raises(RuntimeError, match="mid-epoch validation"):
        trainer(val_check_interval=0.5, callbacks=[NansenseCallback()]).fit(Classifier(), data, data)
    with pytest.raises(RuntimeError, match="iterable-style loaders without __len__"):
        trainer(callbacks=[NansenseCallback()]).fit(Classifier(), DataLoader(_NoLength(), batch_size=2))
    with pytest.raises(RuntimeError, match="automatic optimization only"):
        trainer(callbacks=[NansenseCallback()]).fit(_Manual(), data)
    with pytest.raises(RuntimeError, match="gradient accumulation"):
        trainer(accumulate_grad_batches=2, callbacks=[NansenseCallback()]).fit(Classifier(), data)
    with pytest.raises(AttributeError, match="has no attribute 'body'"):
        trainer(callbacks=[NansenseCallback(model="body")]).fit(Classifier(), data)
    with pytest.raises(TypeError, match="attribute path"):
        NansenseCallback(model="net()")
    with pytest.raises(TypeError, match="port must be an int"):
        NansenseCallback(port="8080")
    with pytest.raises(TypeError, match="enabled must be a bool"):
        NansenseCallback(enabled=1)


def test_enabled_false_leaves_the_training_alone():
    torch.manual_seed(0)
    plain = Classifier()
    trainer(max_epochs=1).fit(plain, DataLoader(image_data(16), batch_size=8))
    torch.manual_seed(0)
    module = Classifier()
    seen_hooks = []
    original = module.training_step

    def training_step(batch, batch_idx):
        from torch.nn.modules import module as torch_module
        seen_hooks.append(len(torch_module._global_forward_pre_hooks) + len(torch_module._global_forward_hooks))
        return original(batch, batch_idx)

    module.training_step = training_step
    callback = NansenseCallback(enabled=False, model="net")
    trainer(max_epochs=1, callbacks=[callback]).fit(module, DataLoader(image_data(16), batch_size=8))
    assert callback.session is not None and not callback.session.enabled
    assert seen_hooks == [0, 0]
    assert [s[3] for s in module.steps] == [s[3] for s in plain.steps]


def test_a_jump_re_enters_fit_with_model_optimizer_schedule_and_rng_restored(tmp_path):
    torch.manual_seed(0)
    module = Classifier(dropout=0.3, schedule=True)
    callback = Served(model="net")
    train = DataLoader(image_data(24), batch_size=8, shuffle=True)
    val = DataLoader(image_data(8, seed=1), batch_size=8)
    attempts = []

    def make_trainer():
        attempts.append(len(module.steps))
        return trainer(max_epochs=3)

    fit = TrainingThread(lambda: fit_with_time_travel(make_trainer, module, callback=callback,
                                                      train_dataloaders=train, val_dataloaders=val,
                                                      cache_dir=tmp_path / "cache"))
    api = callback.api()
    session = callback.session
    assert session.wait_until_stopped(60) == nansense.RunState.PAUSED
    status = api.post("/api/run_until", {"phase": "train", "epoch": 2, "batch": 1, "timeout_seconds": 60})
    assert status["live_position"]["epoch"] == 2
    assert session.time_travel_status().cached_epochs == (0, 1, 2)
    first = list(module.steps)
    assert [(e, i) for e, i, *_ in first] == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2), (2, 0), (2, 1)]

    status = api.post("/api/time_travel", {"epoch": 1, "timeout_seconds": 60})
    assert status["state"] == "paused"
    assert (status["live_position"]["epoch"], status["live_position"]["batch_idx"]) == (1, 0)
    assert len(attempts) == 2  # a fresh Trainer entered epoch 1
    session.detach()
    fit.join()
    assert session.state == nansense.RunState.FINISHED

    replay = module.steps[len(first):]
    assert [(e, i) for e, i, *_ in replay] == [(1, 0), (1, 1), (1, 2), (2, 0), (2, 1), (2, 2)]
    before = {(e, i): (step, loss, lr) for e, i, step, loss, lr in first}
    for e, i, step, loss, lr in replay:
        if (e, i) in before:
            # Same shuffle, same dropout masks, same weights and momentum, same LR and step count.
            assert torch.equal(loss, before[(e, i)][1]), (e, i)
            assert (step, lr) == (before[(e, i)][0], before[(e, i)][2]), (e, i)
    assert replay[0][4] == 0.05 and replay[0][2] == 3


NUM_CLASSES = 4


class PerClassLoss(pl.LightningModule):
    """The capture scheme's example: torchvision's ResNet, a binary
    cross-entropy per class divided by the class's count in the batch."""

    def __init__(self):
        super().__init__()
        self.model = torchvision.models.resnet18(num_classes=NUM_CLASSES)

    def forward(self, x):
        return self.model(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        outputs = self(x)
        losses = []
        for c in range(NUM_CLASSES):
            count = torch.count_nonzero(y == c)
            masked = torch.where(y == c, 1.0, 0.0)
            loss = F.binary_cross_entropy_with_logits(outputs[..., c], masked, reduction="sum")
            losses.append(loss / count)  # no sample of class c: a division by zero
        return torch.stack(losses).mean()

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=0.02)


def per_class_data():
    """Four batches of eight; the third has no sample of class 3."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(32, 3, 32, 32, generator=g)
    y = torch.arange(32) % NUM_CLASSES
    y[16:24] = torch.tensor([0, 1, 2, 0, 1, 2, 0, 1])
    return TensorDataset(x, y)


def test_the_capture_scheme_example_is_caught_at_the_division_and_replays(tmp_path, monkeypatch, capfd):
    monkeypatch.chdir(tmp_path)
    torch.manual_seed(0)
    module = PerClassLoss()
    callback = NansenseCallback(model="model")
    loader = DataLoader(per_class_data(), batch_size=8)
    trainer(max_epochs=2, callbacks=[callback]).fit(module, loader)

    session = callback.session
    error = session.debug_error
    assert error is not None
    assert (error.position.phase, error.position.epoch, error.position.batch_idx) == ("train", 0, 2)
    assert error.root_cause["producer"]["op"] == "aten::div"
    assert error.capsule is not None and os.path.isfile(error.capsule)
    # No UI: the trainer stopped after the tripping batch, saying where the capsule is.
    err = capfd.readouterr().err
    assert f"capsule: {error.capsule} (no UI served: NansenseCallback stops the trainer after this batch)" in err
    assert "the trainer stops at the NaN of train epoch 0 batch 2" in err
    assert session.state == nansense.RunState.FINISHED
    assert module.trainer.global_step == 3

    # On the bare network, as a plain loop would.
    fresh = PerClassLoss()
    optimizer = torch.optim.Adam(fresh.parameters(), lr=0.02)
    capsule = nansense.replay_capsule(error.capsule, fresh.model, optimizer)
    x, y = capsule.batch
    assert torch.equal(y, per_class_data().tensors[1][16:24])
    fresh.training_step((x, y), 2).backward()
    assert capsule.gradients_match() == (True, "")

    # As a Lightning run entering at that step.
    again = PerClassLoss()
    replayed = replay_capsule(error.capsule, again, module="model", accelerator="cpu")
    assert (replayed.epoch, replayed.batch_idx, replayed.global_step) == (0, 2, 2)
    assert replayed.gradients_match() == (True, "")
    assert not torch.isfinite(again.model.fc.weight).all()  # the step it made is the recorded run's poisoned one


def test_with_a_ui_the_nan_pauses_before_the_poisoned_step(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    torch.manual_seed(0)
    module = PerClassLoss()
    callback = Served(model="model")
    fit = TrainingThread(lambda: trainer(max_epochs=1, callbacks=[callback]).fit(
        module, DataLoader(per_class_data(), batch_size=8)))
    api = callback.api()
    session = callback.session
    assert session.wait_until_stopped(60) == nansense.RunState.PAUSED
    api.post("/api/run", {"detach": True})
    assert session.wait_until_stopped(60) == nansense.RunState.PAUSED
    error = session.debug_error
    assert error is not None and error.position.batch_idx == 2
    assert error.root_cause["producer"]["op"] == "aten::div"
    assert session.live_position.batch_idx == 2
    # Paused inside the step, before the optimizer applied the poisoned gradients.
    assert all(torch.isfinite(p).all() for p in module.model.parameters())
    assert any(not torch.isfinite(p.grad).all() for p in module.model.parameters() if p.grad is not None)
    session.detach()
    fit.join()
    assert session.state == nansense.RunState.FINISHED


def test_replay_capsule_refuses_what_it_cannot_replay(tmp_path):
    with pytest.raises(FileNotFoundError, match="no capsule"):
        replay_capsule(tmp_path / "missing.nscap", PerClassLoss(), module="model")
    with pytest.raises(TypeError, match="sets max_steps"):
        replay_capsule(tmp_path / "missing.nscap", PerClassLoss(), max_steps=3)
    with pytest.raises(TypeError, match="LightningModule"):
        replay_capsule(tmp_path / "missing.nscap", nn.Linear(2, 2))


class Scheduled(pl.LightningModule):
    """A per-batch LR scheduler (interval="step"), counters in training_step
    (one guarded by callback.rerunning, one not, and a logged epoch sum), and
    a per-class loss that divides by zero on a batch missing a class."""

    def __init__(self, callback):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
        self.callback = callback
        self.bodies = 0
        self.seen = 0
        self.rows = []  # (batch_idx, rerunning, lr, global_step) per training_step call

    def training_step(self, batch, batch_idx):
        self.bodies += 1
        if not self.callback.rerunning:
            self.seen += 1
        lr = self.trainer.optimizers[0].param_groups[0]["lr"]
        self.rows.append((batch_idx, self.callback.rerunning, lr, self.global_step))
        self.log("calls", 1.0, on_step=False, on_epoch=True, reduce_fx="sum")
        x, y = batch
        logits = self.net(x)
        loss = logits.new_zeros(())
        for c in range(3):
            mask = (y == c).float()
            loss = loss + (F.cross_entropy(logits, y, reduction="none") * mask).sum() / mask.sum()
        return loss

    def configure_optimizers(self):
        optimizer = torch.optim.Adam(self.parameters(), lr=0.01)
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}


def scheduled_data():
    """Five batches of four; the third (batch 2) has no sample of class 2."""
    g = torch.Generator().manual_seed(0)
    y = torch.tensor([0, 1, 2, 2] * 5)
    y[8:12] = torch.tensor([0, 1, 1, 0])
    return TensorDataset(torch.randn(20, 4, generator=g), y)


def test_a_rerun_steps_the_optimizer_and_the_per_batch_scheduler_once_and_says_what_ran_twice(
        tmp_path, monkeypatch, capfd):
    monkeypatch.chdir(tmp_path)  # where the NaN capsules go
    torch.manual_seed(0)
    callback = Served(model="net")
    module = Scheduled(callback)
    fit = TrainingThread(lambda: trainer(max_epochs=1, callbacks=[callback]).fit(
        module, DataLoader(scheduled_data(), batch_size=4)))
    api = callback.api()
    session = callback.session
    try:
        assert session.wait_until_stopped(60) == nansense.RunState.PAUSED
        session.detach()
        # Batch 2 trips untraced, is restored and runs again traced: paused
        # in the second run's backward, before its optimizer step.
        assert session.wait_until_stopped(60) == nansense.RunState.PAUSED
        error = session.debug_error
        assert error is not None and error.position.batch_idx == 2 and error.rerun
        assert error.root_cause["status"] == "found" and error.root_cause["producer"]["op"] == "aten::div"
        # training_step saw batch 2 twice, with the LR batch 2 began with;
        # Lightning's global_step had counted the first run's (gradient-less) step.
        assert module.rows == [(0, False, 0.01, 0), (1, False, 0.005, 1), (2, False, 0.0025, 2),
                               (2, True, 0.0025, 3)]
        scheduler = module.trainer.lr_scheduler_configs[0].scheduler
        assert scheduler.last_epoch == 2  # restored to where batch 2 began
        optimizer = module.trainer.optimizers[0]
        assert all(int(optimizer.state[p]["step"]) == 2 for p in module.net.parameters())
        # What ran twice, where the trip is seen: the banner's clause, the
        # debug report, and the log line.
        summary = api.get("/api/status")["debug"]["error"]
        assert summary["rerun"] is True
        assert summary["ran_twice"].startswith("training_step and its backward ran this batch twice")
        assert "the LR scheduler's step and global_step count it once" in summary["ran_twice"]
        rerun = api.get("/api/debug")["rerun"]
        assert rerun["ran_twice"] == summary["ran_twice"]
        assert any("training_step for that batch" in s and "self.log()" in s for s in rerun["seen_twice"])
        assert not any("loop body" in s for s in rerun["seen_twice"])
        assert any("the LR scheduler configure_optimizers returned" in s for s in rerun["restored"])
        assert "callback.rerunning" in rerun["detect"]
        api.post("/api/debug/choose_update", {"action": "skip"})
        session.detach()
        fit.join()
    finally:
        if fit.thread.is_alive():
            session.detach()
            fit.thread.join(60)
    assert session.state == nansense.RunState.FINISHED
    err = capfd.readouterr().err
    assert "re-run traced: training_step and its backward ran this batch twice" in err, err
    # The outcome: training_step ran 6 times for 5 batches (the guarded
    # counter 5), and Lightning's logged epoch sum counts the re-run too.
    assert (module.bodies, module.seen) == (6, 5)
    assert float(module.trainer.callback_metrics["calls"]) == 6.0
    # The scheduler stepped once per batch (5), the LR went on halving after
    # the re-run, and global_step counts each batch once.
    assert scheduler.last_epoch == 5
    assert [lr for _, _, lr, _ in module.rows[4:]] == [0.00125, 0.000625]
    assert module.trainer.global_step == 5
    # Adam stepped once per applied batch: 5 batches, batch 2's update skipped.
    assert all(int(optimizer.state[p]["step"]) == 4 for p in module.net.parameters())
    assert all(torch.isfinite(p).all() for p in module.net.parameters())
    report = api.get("/api/debug")
    assert report["checked_batches"] == 6  # every batch, and the traced re-run


def test_16_mixed_with_the_plugins_scaler_counts_its_overflows_and_trains_as_without(tmp_path, monkeypatch):
    from lightning.pytorch.plugins.precision import MixedPrecision
    monkeypatch.chdir(tmp_path)

    def fit(callbacks):
        torch.manual_seed(0)
        module = Classifier()
        # 16-mixed on the CPU, as on a GPU: fp16 autocast and a GradScaler
        # whose first steps overflow (Lightning picks bf16 on the CPU unless told).
        scaler = torch.amp.GradScaler("cpu", init_scale=2.0**20)
        plugin = MixedPrecision("16-mixed", "cpu", scaler=scaler)
        trainer(max_epochs=2, callbacks=callbacks, plugins=[plugin]).fit(module, DataLoader(image_data(32),
                                                                                            batch_size=8))
        return module, scaler

    plain, plain_scaler = fit([])
    callback = NansenseCallback(model="net")
    module, scaler = fit([callback])
    assert [s[3] for s in module.steps] == [s[3] for s in plain.steps]
    assert scaler.get_scale() == plain_scaler.get_scale() < 2.0**20
    session = callback.session
    assert session.debug_error is None
    assert session.loss_scale.in_use
    assert session.loss_scale.skipped_steps >= 1  # found through the precision plugin
    assert session._scaler.scaler is scaler


def test_bf16_mixed_trains_as_without_and_has_no_scaler():
    def fit(callbacks):
        torch.manual_seed(0)
        module = Classifier()
        trainer(max_epochs=1, callbacks=callbacks, precision="bf16-mixed").fit(
            module, DataLoader(image_data(32), batch_size=8))
        return module

    plain = fit([])
    callback = NansenseCallback(model="net")
    module = fit([callback])
    assert [s[3] for s in module.steps] == [s[3] for s in plain.steps]
    assert callback.session.debug_error is None
    assert not callback.session.loss_scale.in_use


def test_a_compiled_lightning_module_trains_and_pauses_served():
    torch.manual_seed(0)
    torch._dynamo.reset()
    module = Classifier()
    module.net = torch.compile(module.net)
    callback = Served(model="net")
    fit = trainer(max_epochs=1, callbacks=[callback])
    thread = TrainingThread(lambda: fit.fit(module, DataLoader(image_data(32), batch_size=8)))
    api = callback.api()
    assert callback.session.wait_until_stopped(60) == nansense.RunState.PAUSED
    layers = set(callback.session.layer_names)
    assert {"0", "5"} <= layers and not any("_orig_mod" in name for name in layers), layers
    api.post("/api/run", {"detach": True})
    thread.join(120)
    error = callback.session.debug_error
    assert error is None, (error.layers, error.root_cause) if error else None
    assert callback.session.internal_errors == []
    torch._dynamo.reset()
