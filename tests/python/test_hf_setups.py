"""The Hugging Face setups around the Trainer: torch_compile=True under the
callback, a plain accelerate loop (accelerator.prepare, accumulate, bf16)
with the plain API, the same loop under `accelerate launch` with 2
processes (DDP over Gloo), and a PEFT LoRA fine-tune (base layers and
adapters by path, a NaN inside an adapter named). Tiny models from
configs."""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers")
accelerate = pytest.importorskip("accelerate")

import nansense  # noqa: E402
from nansense.transformers import NansenseCallback  # noqa: E402
from transformers import Trainer  # noqa: E402
from transformers.utils import logging as hf_logging  # noqa: E402

from hf_models import POISON, TokenData, arguments, gpt2, poison  # noqa: E402

hf_logging.set_verbosity_error()


def test_torch_compile_trains_compiled_and_a_nan_is_named_by_the_eager_rerun(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    torch.manual_seed(0)
    callback = NansenseCallback()
    model = poison(gpt2(), "lm_head")
    trainer = Trainer(model=model, args=arguments(tmp_path / "out", max_steps=3, torch_compile=True,
                                                   torch_compile_backend="aot_eager",
                                                   train_sampling_strategy="sequential"),
                      train_dataset=TokenData(n=12, poisoned=[5]), callbacks=[callback])
    trainer.train()
    assert type(trainer.model_wrapped).__name__ == "OptimizedModule"
    error = callback.session.debug_error
    assert error is not None and error.position.batch_idx == 1
    assert error.root_cause["status"] == "found" and error.root_cause["producer"]["op"] == "aten::div"
    assert trainer.state.global_step == 2
    # Layers keep the user's module paths (no _orig_mod).
    assert all("_orig_mod" not in name for name in callback.session.layer_names)


def test_an_accelerate_loop_with_accumulation_and_bf16_under_the_plain_api(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    torch.manual_seed(0)
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState
    AcceleratorState._reset_state(reset_partial_state=True)  # a Trainer before made one without bf16
    accelerator = Accelerator(cpu=True, mixed_precision="bf16", gradient_accumulation_steps=2)
    model = poison(gpt2(), "lm_head")
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loader = torch.utils.data.DataLoader(TokenData(n=16, poisoned=[13]), batch_size=2)
    prepared, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    session = nansense.start(prepared, optimizer=optimizer.optimizer, port=0, open_browser=False)
    seen = []
    try:
        session.pause()
        import threading
        errors = []

        def loop():
            try:
                for batch in session.batches(loader, phase="train"):
                    with accelerator.accumulate(prepared):
                        loss = prepared(**batch).loss
                        accelerator.backward(loss)
                        optimizer.step()
                        optimizer.zero_grad()
                    if not session.rerunning:
                        seen.append(session.live_position.batch_idx)
            except BaseException as e:  # noqa: BLE001
                errors.append(e)

        thread = threading.Thread(target=loop, daemon=True)
        thread.start()
        assert session.wait_until_stopped(60) == nansense.RunState.PAUSED
        # Layers are the model's own paths, not accelerate's wrapper's.
        assert "lm_head" in session.layer_names and "transformer.h.0.attn.c_attn" in session.layer_names
        session.detach()
        assert session.wait_until_stopped(60) == nansense.RunState.PAUSED
        error = session.debug_error
        assert error is not None and error.position.batch_idx == 6  # sample 13: the 7th micro-batch of 2
        assert error.root_cause["producer"]["op"] == "aten::div"
        assert all(torch.isfinite(p).all() for p in model.parameters())
        session.set_debug_settings(enabled=False)
        session.detach()
        thread.join(60)
        assert not errors, errors
    finally:
        session.set_debug_settings(enabled=False)
        session.detach()
    assert seen == list(range(8))


def test_accelerate_launch_with_2_processes_names_the_users_layers_and_catches_one_ranks_nan(tmp_path):
    # accelerate_worker.py: Accelerator(cpu=True) in each process that
    # `accelerate launch --multi_gpu` starts (through torchrun) is DDP over
    # Gloo; rank 1's second batch holds the poisoned sample.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, OMP_NUM_THREADS="1", HF_HOME=str(tmp_path / "hf"))  # no user accelerate config
    worker = Path(__file__).with_name("accelerate_worker.py")
    done = subprocess.run([sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
                           "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
                           "--main_process_ip", "127.0.0.1", "--main_process_port", str(port), str(worker)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=150)
    assert done.returncode == 0, done.stdout + done.stderr
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    capsule = str(tmp_path / "nansense_capsules" / "rank_1" / "nan-epoch0-train-batch1.capsule")
    for rank in ranks:
        assert (rank["world"], rank["wrapped"]) == (2, "DistributedDataParallel")
        assert rank["steps"] == [0, 1, 2, 3]  # 16 samples, 2 a batch, half each
        # The user's module paths: DDP's "module." is gone.
        assert {"transformer.h.0.attn.c_attn", "transformer.h.1.mlp.c_proj", "lm_head"} <= set(rank["layers"])
        assert not any(name.startswith("module") for name in rank["layers"])
        # Rank 1's NaN is caught on both ranks at that step, its capsule in rank 1's folder.
        assert rank["error"]["position"] == ["train", 0, 1]
        assert rank["error"]["capsule"] == capsule
    assert os.path.isfile(capsule)
    assert "came in through the distributed run's gradient averaging" in done.stdout + done.stderr


def test_peft_lora_shows_base_layers_and_adapters_and_names_a_nan_inside_an_adapter(tmp_path, monkeypatch):
    peft = pytest.importorskip("peft")
    monkeypatch.chdir(tmp_path)
    torch.manual_seed(0)
    base = gpt2()
    model = peft.get_peft_model(base, peft.LoraConfig(r=4, lora_alpha=8, target_modules=["c_attn"],
                                                      fan_in_fan_out=True, lora_dropout=0.0))
    adapter = "base_model.model.transformer.h.1.attn.c_attn.lora_B.default"
    poison(model, adapter)
    callback = NansenseCallback()
    trainer = Trainer(model=model, args=arguments(tmp_path / "out", max_steps=3, train_sampling_strategy="sequential"),
                      train_dataset=TokenData(n=12, poisoned=[5]), callbacks=[callback])
    trainer.train()
    session = callback.session
    error = session.debug_error
    assert error is not None and error.position.batch_idx == 1
    producer = error.root_cause["producer"]
    assert producer["op"] == "aten::div"
    # The guard checked only what trains: the adapters' gradients.
    assert {row.layer for row in error.layers if "weight_gradient" in row.sources} <= {
        name for name in session.layer_names if "lora_" in name} | {"loss"}
    names = set(session.layer_names)
    assert "base_model.model.transformer.h.0.attn.c_attn.lora_A.default" in names
    assert "base_model.model.transformer.h.0.mlp.c_fc" in names
    assert trainer.state.global_step == 2
