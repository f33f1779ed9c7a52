"""The Python package on a CUDA device (scripts/gpu-check runs it on a GPU
machine; ctest registers it only in a NANSENSE_CUDA build): a model on the
GPU is paused and shown, the guard names a NaN's producer there, and its
capsule replays on the GPU bit for bit."""

import pytest
import torch
import torch.nn.functional as F

import nansense
from conftest import Api, Mlp, TrainingThread

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device visible")


def batches(n, device):
    g = torch.Generator().manual_seed(3)
    return [(torch.randn(4, 4, generator=g).to(device), torch.randint(0, 3, (4,), generator=g).to(device))
            for _ in range(n)]


def test_a_gpu_model_pauses_and_its_snapshot_is_a_host_copy():
    model = Mlp().cuda()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    data = batches(3, "cuda")
    session = nansense.start(model, optimizer=optimizer, port=0, open_browser=False)

    def loop():
        for x, y in session.batches(data, phase="train"):
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
            optimizer.step()
        session.close()

    thread = TrainingThread(loop)
    assert session.wait_until_stopped(60) == nansense.RunState.PAUSED
    snap = session.snapshot
    assert snap is not None
    for name in ("fc1", "act", "fc2"):
        assert snap.activations[name].device.type == "cpu", name
    assert torch.equal(snap.activations["input"], data[0][0].cpu())
    layers = {layer["name"]: layer for layer in Api(session.url).get("/api/snapshot")["layers"]}
    assert {"fc1", "fc2"} <= set(layers)
    assert model.fc1.weight.is_cuda
    session.detach()
    thread.join()


def test_the_guard_names_a_gpu_nan_and_its_capsule_replays_on_the_gpu(tmp_path):
    torch.manual_seed(1)
    model = Mlp().cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    data = batches(4, "cuda")
    session = nansense.start(model, optimizer=optimizer, port=0, open_browser=False)
    session.set_debug_settings(nansense.DebugSettings(capsule_dir=str(tmp_path)))
    session.detach()

    def body(x, y, poisoned):
        out = model(x)
        if poisoned:
            out = torch.log(out - out.abs().max() - 1)  # log of a negative number
        return F.cross_entropy(out, y)

    def loop():
        for i, (x, y) in enumerate(session.batches(data, phase="train")):
            optimizer.zero_grad()
            body(x, y, session.live_position.batch_idx == 2).backward()
            optimizer.step()
        session.close()

    thread = TrainingThread(loop)
    assert session.wait_until_stopped(60) == nansense.RunState.PAUSED
    error = session.debug_error
    assert error is not None and error.position.batch_idx == 2
    assert error.root_cause["status"] == "found", error.root_cause["summary"]
    assert error.root_cause["producer"]["op"] == "aten::log"
    capsule_path = error.capsule
    session.detach()
    thread.join()

    fresh = Mlp().cuda()
    capsule = nansense.replay_capsule(capsule_path, fresh)
    x, y = capsule.batch
    fresh.zero_grad()
    body(x.cuda(), y.cuda(), True).backward()
    match, difference = capsule.gradients_match()
    assert match, difference


def test_fp16_with_a_gradscaler_on_cuda_counts_its_overflows_and_trains_as_without():
    def train(wrap):
        torch.manual_seed(0)
        model = Mlp().cuda()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        scaler = torch.amp.GradScaler("cuda", init_scale=2.0**20)
        session = nansense.start(model, optimizer=optimizer, scaler=scaler) if wrap else None
        losses = []
        for x, y in (session.batches(batches(12, "cuda"), phase="train") if session else batches(12, "cuda")):
            with torch.autocast("cuda", dtype=torch.float16):
                loss = F.cross_entropy(model(x), y)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad()
            losses.append(loss.detach().float())
        return torch.stack(losses).cpu(), scaler, session

    plain, plain_scaler, _ = train(False)
    losses, scaler, session = train(True)
    assert torch.equal(plain, losses)
    assert scaler.get_scale() == plain_scaler.get_scale()
    assert session.debug_error is None
    assert session.loss_scale.in_use and session.loss_scale.skipped_steps >= 1
    session.close()


def test_a_nan_forward_under_fp16_on_cuda_is_an_error_named_at_its_op():
    torch.manual_seed(0)
    model = Mlp().cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cuda", init_scale=2.0**8)
    session = nansense.start(model, optimizer=optimizer, scaler=scaler)
    step = -1
    for x, y in session.batches(batches(4, "cuda"), phase="train"):
        if not session.rerunning:
            step += 1
        with torch.autocast("cuda", dtype=torch.float16):
            out = model(x)
            if step == 2:
                out = torch.log(out - 1e4)
            loss = F.cross_entropy(out, y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
    error = session.debug_error
    assert error is not None and error.position.batch_idx == 2
    assert error.root_cause["producer"]["op"] == "aten::log", error.root_cause
    session.close()


def test_a_compiled_model_on_cuda_trains_and_names_its_layers():
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = Mlp().cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    compiled = torch.compile(model)
    session = nansense.start(compiled, optimizer=optimizer, port=0, open_browser=False)
    session.set_update_frequency(unit="batch", n=2)
    session.run()
    for x, y in session.batches(batches(6, "cuda"), phase="train"):
        optimizer.zero_grad()
        F.cross_entropy(compiled(x), y).backward()
        optimizer.step()
    session.close()
    assert session.debug_error is None and session.internal_errors == []
    assert set(session.layer_names) >= {"fc1", "act", "fc2"}
    torch._dynamo.reset()


def test_the_hf_trainer_under_fp16_trains_as_without_the_callback_and_a_nan_is_named(tmp_path, monkeypatch):
    # fp16=True needs a GPU in the Trainer: its GradScaler and autocast.
    pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    from hf_models import TokenData, arguments, gpt2, poison
    from nansense.transformers import NansenseCallback
    from transformers import Trainer

    options = dict(fp16=True, use_cpu=False, gradient_accumulation_steps=2, num_train_epochs=1,
                   per_device_train_batch_size=2, train_sampling_strategy="sequential", max_grad_norm=1.0)

    def train(callbacks, model=None, data=None):
        torch.manual_seed(0)
        trainer = Trainer(model=model or gpt2(), args=arguments(tmp_path / "out", **options),
                          train_dataset=data or TokenData(n=16), callbacks=callbacks)
        trainer.train()
        return trainer

    plain = train([])
    callback = NansenseCallback()
    watched = train([callback])
    assert watched.accelerator.scaler is not None
    assert [h["loss"] for h in plain.state.log_history if "loss" in h] == \
        [h["loss"] for h in watched.state.log_history if "loss" in h]
    for a, b in zip(plain.model.parameters(), watched.model.parameters()):
        assert torch.equal(a, b)
    assert plain.accelerator.scaler.get_scale() == watched.accelerator.scaler.get_scale()
    assert callback.session.debug_error is None and callback.session.loss_scale.in_use

    monkeypatch.chdir(tmp_path)  # where the capsule goes
    callback = NansenseCallback()
    # Sample 7: step 1's second micro-batch (2 samples a micro-batch, in order).
    tripped = train([callback], poison(gpt2(), "lm_head"), TokenData(n=16, poisoned=[7]))
    error = callback.session.debug_error
    assert error is not None and (error.position.epoch, error.position.batch_idx) == (0, 1)
    assert callback.tripped_micro_batch == 1
    assert error.root_cause["producer"]["op"] == "aten::div", error.root_cause
    assert tripped.state.global_step == 2  # the Trainer stopped after the tripping step
