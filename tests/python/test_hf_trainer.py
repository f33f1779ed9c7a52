"""nansense.transformers with the real Hugging Face Trainer on the CPU, on
tiny models built from their configs (nothing downloaded): the callback
on or off gives bit-identical training; one debugger batch per optimizer
step with gradient accumulation's micro-batches named; pause, step and
run_until over HTTP and MCP; a NaN held before optimizer.step() and
skipped (weights, optimizer, scheduler as if the step had not run);
without a UI a NaN stops the Trainer and its capsule replays bit for bit
through a Trainer; evaluation as the val phase; GPT-2, BERT and T5 each
caught, named and held; bf16."""

import json
import threading

import pytest
import torch

transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")

import nansense  # noqa: E402
from nansense.transformers import NansenseCallback, replay_capsule, train_with_time_travel  # noqa: E402
from transformers import Trainer, TrainerCallback  # noqa: E402
from transformers.utils import logging as hf_logging  # noqa: E402

from conftest import Api, TrainingThread  # noqa: E402
from hf_models import POISON, TokenData, arguments, bert, gpt2, poison, t5  # noqa: E402

hf_logging.set_verbosity_error()


class Served(NansenseCallback):
    """A NansenseCallback served on a free port that tells the test when its UI is up."""

    def __init__(self, settings=None, **kwargs):
        super().__init__(port=0, open_browser=False, **kwargs)
        self.up = threading.Event()
        self.settings = settings or {}

    def on_train_begin(self, args, state, control, **kwargs):
        super().on_train_begin(args, state, control, **kwargs)
        if self.settings:
            self.session.set_debug_settings(**self.settings)
        self.up.set()

    def api(self):
        assert self.up.wait(60), "training did not begin"
        return Api(self.session.url)


class Steps(TrainerCallback):
    """What the Trainer and the session said at each optimizer step's end."""

    def __init__(self, callback=None):
        self.callback = callback
        self.rows = []  # (global_step, position (phase, epoch, batch_idx) or None, lr)

    def on_step_end(self, args, state, control, optimizer=None, **kwargs):
        position = None
        if self.callback is not None and self.callback.session.enabled:
            p = self.callback.session.live_position
            position = (p.phase, p.epoch, p.batch_idx)
        self.rows.append((state.global_step, position, optimizer.param_groups[0]["lr"]))


def train(tmp_path, model, data, callbacks, **kwargs):
    trainer = Trainer(model=model, args=arguments(tmp_path / "out", **kwargs), train_dataset=data,
                      callbacks=callbacks)
    trainer.train()
    return trainer


def losses(trainer):
    return [h["loss"] for h in trainer.state.log_history if "loss" in h]


def test_the_callback_on_or_off_trains_bit_for_bit_the_same(tmp_path):
    runs = []
    for callback in (None, NansenseCallback(), NansenseCallback(enabled=False)):
        torch.manual_seed(0)
        steps = Steps(callback if callback is not None and callback._enabled else None)
        trainer = train(tmp_path, gpt2(), TokenData(n=24), [c for c in (callback, steps) if c],
                        gradient_accumulation_steps=2, num_train_epochs=2, lr_scheduler_type="linear",
                        max_grad_norm=1.0)
        runs.append((trainer, steps))
    (plain, _), (watched, steps), (off, _) = runs
    assert losses(plain) == losses(watched) == losses(off)
    for a, b, c in zip(plain.model.parameters(), watched.model.parameters(), off.model.parameters()):
        assert torch.equal(a, b) and torch.equal(a, c)
    # One debugger batch per optimizer step: 24 samples, 4 a micro-batch, 2
    # micro-batches a step: 3 steps an epoch; global_step counts them too.
    assert [(g, p) for g, p, _ in steps.rows] == [
        (1, ("train", 0, 0)), (2, ("train", 0, 1)), (3, ("train", 0, 2)),
        (4, ("train", 1, 0)), (5, ("train", 1, 1)), (6, ("train", 1, 2))]
    session = watched.callback_handler.callbacks[1].session
    assert session.schedule.epochs == 2 and session.schedule.phases == {"train": 3}
    assert session.state == nansense.RunState.FINISHED
    assert session.debug_error is None


def test_without_a_ui_a_nan_stops_the_trainer_names_its_micro_batch_and_replays(tmp_path, monkeypatch, capfd):
    monkeypatch.chdir(tmp_path)  # where the capsules go
    torch.manual_seed(0)
    callback = NansenseCallback()
    # In order, 2 samples a micro-batch, 2 micro-batches an optimizer step:
    # sample 7 is in step 1's second micro-batch.
    data = TokenData(n=16, poisoned=[7])
    options = dict(gradient_accumulation_steps=2, num_train_epochs=2, per_device_train_batch_size=2,
                   train_sampling_strategy="sequential")
    trainer = Trainer(model=poison(gpt2(), "lm_head"), args=arguments(tmp_path / "out", **options),
                      train_dataset=data, callbacks=[callback])
    trainer.train()

    session = callback.session
    error = session.debug_error
    assert error is not None and error.capsule is not None
    assert (error.position.phase, error.position.epoch, error.position.batch_idx) == ("train", 0, 1)
    assert callback.tripped_micro_batch == 1
    # The engine says it in the Trainer's words too: the step as its log
    # counts it, and the micro-batch (0-based; "2 of 2" in the text).
    assert error.trainer_step == {"global_step": 2, "micro_batches": 2, "micro_batch": 1}
    assert "at epoch 0 | train batch 1 (global step 2, micro-batch 2 of 2)" in error.text
    assert error.root_cause["status"] == "found"
    assert error.root_cause["producer"]["op"] == "aten::div"
    # The op tracer takes each micro-batch's ops for a forward again: the
    # second micro-batch's NaN is in the forward, not "after backward".
    assert error.root_cause["producer"]["pass"] == "forward"
    # The Trainer stopped after the tripping step.
    assert trainer.state.global_step == 2
    err = capfd.readouterr().err
    assert "the Trainer stops at the NaN of train epoch 0 step 1 (global_step 2), micro-batch 2 of 2 " in err
    assert "re-run traced: the Trainer's training_step (forward and backward) ran this optimizer step's " \
           "micro-batches twice" in err
    assert session.state == nansense.RunState.FINISHED

    # Through a Trainer built as the recording one: the step's micro-batches
    # up to the tripping one, the gradients bit for bit.
    torch.manual_seed(1)  # another init: the capsule brings the weights
    again = Trainer(model=poison(gpt2(), "lm_head"), args=arguments(tmp_path / "again", **options),
                    train_dataset=data)
    capsule = replay_capsule(error.capsule, again)
    assert (capsule.global_step, capsule.epoch, capsule.micro_batch) == (1, 0, 1)
    assert len(capsule.micro_batches) == 2
    assert (capsule.micro_batches[capsule.micro_batch]["input_ids"] == POISON).any()
    assert capsule.gradients_match() == (True, "")
    # The step's scheduler state came back too: the LR the step ran with.
    assert again.lr_scheduler.last_epoch == 1

    with pytest.raises(FileNotFoundError, match="no capsule"):
        replay_capsule(tmp_path / "missing.capsule", again)
    with pytest.raises(TypeError, match="transformers.Trainer"):
        replay_capsule(error.capsule, again.model)


def test_served_the_run_pauses_steps_over_http_and_mcp_and_a_skipped_update_leaves_no_trace(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    torch.manual_seed(0)
    callback = Served()
    steps = Steps(callback)
    data = TokenData(n=24, poisoned=[])
    model = poison(gpt2(), "lm_head")
    after_step = {}

    class Keep(TrainerCallback):
        def on_step_end(self, args, state, control, optimizer=None, lr_scheduler=None, **kwargs):
            after_step[state.global_step] = (
                state.global_step, {n: p.detach().clone() for n, p in model.named_parameters()},
                {int(s["step"]) for s in optimizer.optimizer.state.values()}, optimizer.param_groups[0]["lr"],
                lr_scheduler.last_epoch)

    trainer = Trainer(model=model, args=arguments(tmp_path / "out", gradient_accumulation_steps=2,
                                                   num_train_epochs=2, lr_scheduler_type="linear"),
                      train_dataset=data, callbacks=[callback, steps, Keep()])
    run = TrainingThread(trainer.train)
    api = callback.api()
    session = callback.session
    try:
        # Served: the run pauses at the end of its first optimizer step
        # (before other callbacks' on_step_end).
        assert session.wait_until_stopped(60) == nansense.RunState.PAUSED
        status = api.get("/api/status")
        assert status["live_position"]["batch_idx"] == 0
        # In the Trainer's words: global step 1 of 2 micro-batches, between
        # micro-batches; the snapshot taken at its end shows both.
        assert status["live_trainer_step"] == {"global_step": 1, "micro_batches": 2, "micro_batch": None}
        assert status["snapshot_trainer_step"] == {"global_step": 1, "micro_batches": 2, "micro_batch": None}
        assert steps.rows == []
        status = api.post("/api/step", {"unit": "batch", "timeout_seconds": 30})
        assert status["live_position"]["batch_idx"] == 1
        assert [g for g, _, _ in steps.rows] == [1]
        # The captured step shows both micro-batches' layers: the second's with "#2".
        assert {"lm_head", "lm_head#2"} <= set(session.layer_names)

        # MCP: run_until the second epoch's first step.
        accept = {"Accept": "application/json"}
        code, body, headers = api.request("POST", "/mcp", {
            "jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-03-26", "capabilities": {},
                       "clientInfo": {"name": "pytest", "version": "1"}}}, accept)
        assert code == 200, body
        mcp = {**accept, "Mcp-Session-Id": {k.lower(): v for k, v in headers.items()}["mcp-session-id"]}
        code, body, _ = api.request("POST", "/mcp", {
            "jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": "run_until", "arguments": {"phase": "train", "epoch": 1, "batch": 0,
                                                           "timeout_seconds": 60}}}, mcp)
        assert code == 200, body
        reply = json.loads(body)
        assert not reply["result"].get("isError"), reply
        assert session.wait_until_stopped(60) == nansense.RunState.PAUSED
        here = session.live_position
        assert (here.phase, here.epoch, here.batch_idx) == ("train", 1, 0)
        assert trainer.state.global_step == 4

        # Poison a sample of the steps to come: the next one trips, is run
        # again traced, and pauses in its backward, before optimizer.step().
        data.ids[:, 2] = POISON
        weights = {n: p.detach().clone() for n, p in model.named_parameters()}
        optimizer = trainer.optimizer.optimizer
        adam_steps = {int(s["step"]) for s in optimizer.state.values()}
        lr = optimizer.param_groups[0]["lr"]
        last_epoch = trainer.lr_scheduler.last_epoch
        session.detach()
        assert session.wait_until_stopped(60) == nansense.RunState.PAUSED
        error = session.debug_error
        assert error is not None and error.rerun and error.update == "held"
        assert (error.position.epoch, error.position.batch_idx) == (1, 1)
        data.ids[:, 2] = 5  # the steps after it are clean
        assert error.root_cause["producer"]["op"] == "aten::div"
        # accelerate's loader fetches one micro-batch ahead: the step's first
        # was clean, its second poisoned, and the pause is in its backward.
        assert callback.rerunning and callback.micro_batch == (1, 2)
        assert all(torch.equal(p, weights[n]) for n, p in model.named_parameters())
        assert not torch.isfinite(model.lm_head.weight.grad).all()
        report = api.get("/api/debug")
        assert report["rerun"]["ran_twice"].startswith("the Trainer's training_step")
        # Paused in the second micro-batch of global step 5: the status, the
        # snapshot shown and the error say so.
        status = api.get("/api/status")
        in_step = {"global_step": 5, "micro_batches": 2, "micro_batch": 1}
        assert status["live_trainer_step"] == in_step
        assert status["snapshot_trainer_step"] == in_step
        assert status["debug"]["error"]["trainer_step"] == in_step
        assert report["error"]["trainer_step"] == in_step
        assert "(global step 5, micro-batch 2 of 2)" in status["debug"]["error"]["text"]

        assert api.post("/api/debug/choose_update", {"action": "skip"})["error"]["update"] == "held"
        session.detach()
        run.join()
    finally:
        if run.thread.is_alive():
            session.set_debug_settings(enabled=False)
            session.detach()
            run.thread.join(60)
    # Skipped: the step left the weights, AdamW's state, the LR and the
    # scheduler where they were; global_step counts it.
    global_step, kept, kept_adam, kept_lr, kept_epoch = after_step[5]
    assert global_step == 5
    assert all(torch.equal(p, weights[n]) for n, p in kept.items())
    assert kept_adam == adam_steps and kept_lr == lr and kept_epoch == last_epoch
    assert session.state == nansense.RunState.FINISHED
    assert trainer.state.global_step == 6


class LossTrainer(Trainer):
    """A Trainer that keeps each micro-batch's loss tensor (the logged loss is an average)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.micro_losses = []  # (global_step the step will end at, loss)

    def compute_loss(self, model, inputs, return_outputs=False, **kwargs):
        out = super().compute_loss(model, inputs, return_outputs=return_outputs, **kwargs)
        if model.training:
            self.micro_losses.append((self.state.global_step + 1, out.detach().clone()))
        return out


def test_a_jump_back_replays_the_epoch_with_losses_lrs_and_global_step_bit_for_bit(tmp_path):
    # Dropout on, a shuffled loader, a linear LR decay, 2 micro-batches a step.
    options = dict(gradient_accumulation_steps=2, num_train_epochs=3, lr_scheduler_type="linear",
                   max_grad_norm=1.0, eval_strategy="epoch", per_device_eval_batch_size=4)

    def make(callbacks):
        torch.manual_seed(0)
        return LossTrainer(model=gpt2(), args=arguments(tmp_path / "out", **options), train_dataset=TokenData(n=16),
                           eval_dataset=TokenData(n=4, seed=1), callbacks=callbacks)

    plain_steps = Steps()
    plain = make([plain_steps])
    plain.train()
    plain_steps = plain_steps.rows

    callback = Served()
    steps = Steps(callback)
    trainer = make([callback, steps])
    attempts = []
    train_once = trainer.train
    trainer.train = lambda **kw: (attempts.append(trainer.state.global_step), train_once(**kw))[1]
    thread = TrainingThread(lambda: train_with_time_travel(trainer, cache_dir=tmp_path / "cache"))
    api = callback.api()
    session = callback.session
    assert session.wait_until_stopped(60) == nansense.RunState.PAUSED
    status = api.post("/api/run_until", {"phase": "train", "epoch": 2, "batch": 1, "timeout_seconds": 60})
    assert (status["live_position"]["epoch"], status["live_position"]["batch_idx"]) == (2, 1)
    assert session.time_travel_status().cached_epochs == (0, 1, 2)
    first_rows, first_losses = list(steps.rows), list(trainer.micro_losses)
    # 16 samples, 4 a micro-batch, 2 micro-batches a step: 2 steps an epoch.
    assert [(g, p) for g, p, _ in first_rows] == [
        (1, ("train", 0, 0)), (2, ("train", 0, 1)), (3, ("train", 1, 0)), (4, ("train", 1, 1)),
        (5, ("train", 2, 0))]

    status = api.post("/api/time_travel", {"epoch": 1, "timeout_seconds": 60})
    assert status["state"] == "paused"
    assert (status["live_position"]["epoch"], status["live_position"]["batch_idx"]) == (1, 0)
    session.detach()
    thread.join()
    assert session.state == nansense.RunState.FINISHED
    assert len(attempts) == 2 and attempts[1] > 0  # train() entered again after the jump

    replay_rows = steps.rows[len(first_rows):]
    # global_step goes on from the epoch's start, the positions from epoch 1.
    assert [(g, p) for g, p, _ in replay_rows] == [
        (3, ("train", 1, 0)), (4, ("train", 1, 1)), (5, ("train", 2, 0)), (6, ("train", 2, 1))]
    # Every step of the whole run, replayed or not, is the plain run's: the
    # learning rate after it, and each micro-batch's loss, bit for bit.
    assert [(g, lr) for g, _, lr in first_rows[:2] + replay_rows] == [(g, lr) for g, _, lr in plain_steps]
    replay_losses = trainer.micro_losses[len(first_losses):]
    timeline = [x for x in first_losses if x[0] <= 2] + replay_losses
    assert [g for g, _ in timeline] == [g for g, _ in plain.micro_losses] == [1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6]
    assert all(torch.equal(a, b) for (_, a), (_, b) in zip(timeline, plain.micro_losses))
    # ... and the first timeline's replayed steps match it too.
    assert all(torch.equal(a, b) for (_, a), (_, b) in zip(first_losses[4:], replay_losses))
    for a, b in zip(plain.model.parameters(), trainer.model.parameters()):
        assert torch.equal(a, b)
    assert trainer.state.global_step == 6
    assert [h["step"] for h in trainer.state.log_history if "loss" in h] == [1, 2, 3, 4, 5, 6]


def test_evaluation_each_epoch_is_the_val_phase(tmp_path):
    torch.manual_seed(0)
    callback = NansenseCallback()
    positions = []

    class Look(TrainerCallback):
        def on_prediction_step(self, args, state, control, **kwargs):
            p = callback.session.live_position
            positions.append((p.phase, p.epoch, p.batch_idx))

    trainer = Trainer(model=gpt2(), args=arguments(tmp_path / "out", num_train_epochs=2, eval_strategy="epoch",
                                                   per_device_eval_batch_size=4),
                      train_dataset=TokenData(n=8), eval_dataset=TokenData(n=8, seed=1),
                      callbacks=[callback, Look()])
    trainer.train()
    assert positions == [("val", 0, 0), ("val", 0, 1), ("val", 1, 0), ("val", 1, 1)]
    assert callback.session.schedule.phases == {"train": 2, "val": 2}
    # Evaluation outside training is no debugger batch.
    trainer.evaluate()
    assert len(positions) == 6 and positions[-1] == ("val", 1, 1)


def test_what_it_cannot_follow_is_refused_with_the_reason(tmp_path):
    class Stream(torch.utils.data.IterableDataset):
        def __iter__(self):
            return iter(TokenData(n=8))

    trainer = Trainer(model=gpt2(), args=arguments(tmp_path / "out", max_steps=2), train_dataset=Stream(),
                      callbacks=[NansenseCallback()])
    with pytest.raises(RuntimeError, match="needs a train dataset with a length"):
        trainer.train()
    with pytest.raises(TypeError, match="attribute path"):
        NansenseCallback(model="not a path")


ZOO = {
    # model, the poisoned layer, the data's kind, a layer the graph names, debug settings
    "gpt2": (gpt2, "transformer.h.1.mlp.c_fc", "causal", "transformer.h.1.mlp.c_fc", {}),
    "bert": (bert, "bert.encoder.layer.1.output.dense", "classify", "classifier", {}),
    # T5's relative position buckets take log(0) = -inf on purpose (clamped after).
    "t5": (t5, "decoder.block.1.layer.2.DenseReluDense.wi", "seq2seq", "lm_head", {"allow": ("aten::log",)}),
}


@pytest.mark.parametrize("name", sorted(ZOO))
def test_the_zoo_served_a_mid_run_nan_is_caught_named_and_held(tmp_path, monkeypatch, name):
    monkeypatch.chdir(tmp_path)
    make, layer, kind, shown, settings = ZOO[name]
    torch.manual_seed(0)
    model = poison(make(), layer)
    data = TokenData(n=16, kind=kind)
    callback = Served(settings)
    trainer = Trainer(model=model, args=arguments(tmp_path / "out", max_steps=5), train_dataset=data,
                      callbacks=[callback])
    run = TrainingThread(trainer.train)
    callback.api()
    session = callback.session
    try:
        assert session.wait_until_stopped(60) == nansense.RunState.PAUSED
        session.step_batch()
        assert session.wait_until_stopped(60) == nansense.RunState.PAUSED
        assert shown in session.layer_names
        # Poisoned from step 3 on (accelerate's loader has fetched step 2's batch already).
        data.ids[:, 3] = POISON
        session.detach()
        assert session.wait_until_stopped(60) == nansense.RunState.PAUSED
        error = session.debug_error
        assert error is not None and error.update == "held" and error.position.batch_idx == 3
        producer = error.root_cause["producer"]
        assert producer["op"] == "aten::div" and producer["pass"] == "forward"
        # Held before optimizer.step(): the weights are finite, the gradients not.
        assert all(torch.isfinite(p).all() for p in model.parameters())
        assert any(not torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
        session.set_debug_settings(enabled=False)
        session.clear_debug_error()
        session.detach()
        run.join()
    finally:
        if run.thread.is_alive():
            session.set_debug_settings(enabled=False)
            session.detach()
            run.thread.join(60)
    assert trainer.state.global_step == 5


def test_bf16_trains_bit_for_bit_with_the_callback_and_a_nan_is_caught(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    runs = []
    for callback in (None, NansenseCallback()):
        torch.manual_seed(0)
        runs.append(train(tmp_path, gpt2(), TokenData(n=16), [callback] if callback else [], bf16=True,
                          gradient_accumulation_steps=2))
    assert losses(runs[0]) == losses(runs[1])
    torch.manual_seed(0)
    callback = NansenseCallback()
    trainer = train(tmp_path, poison(gpt2(), "lm_head"), TokenData(n=16, poisoned=list(range(16))), [callback],
                    bf16=True)
    error = callback.session.debug_error
    assert error is not None and error.position.batch_idx == 0
    assert error.root_cause["producer"]["op"] == "aten::div"
    assert trainer.state.global_step == 1
