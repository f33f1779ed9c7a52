#!/usr/bin/env python3
"""A GPT-2 fine-tune by the Hugging Face Trainer, debugged by nansense: the
model is built from a small config (random weights, nothing downloaded),
trained on random token ids with gradient accumulation, and
nansense.transformers' callback serves the UI.

    PYTHONPATH=build/python .venv/bin/python examples/python/hf_trainer.py

The UI and the MCP endpoint come up on 127.0.0.1:8080 once training
begins; the run pauses at the end of its first optimizer step (one
debugger batch per optimizer step; its micro-batches run inside it).
Layer names are the model's module paths ("transformer.h.0.attn.c_attn",
"lm_head"). --nan makes the logits NaN on every micro-batch holding token
99 (from the third optimizer step on): with the UI the run pauses in that
micro-batch's backward, before optimizer.step(), with the op named; with
--no-ui the Trainer stops there and prints where the capsule is.
"""

import os
import sys
import warnings

os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

import common  # noqa: E402

try:
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, TrainingArguments
    from transformers.utils import logging as hf_logging
except ImportError:
    sys.exit("this example needs transformers and accelerate: pip install transformers accelerate")

from nansense.transformers import NansenseCallback  # noqa: E402

POISON = 99


class RandomTokens(torch.utils.data.Dataset):
    """Random token ids in 0..98; with nan=True, samples from the third
    optimizer step on carry token 99."""

    def __init__(self, n: int, length: int, nan_from: int = -1):
        g = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, POISON, (n, length), generator=g)
        if nan_from >= 0:
            self.ids[nan_from:, length // 2] = POISON

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict:
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def poison_logits(model: GPT2LMHeadModel) -> None:
    """The logits go NaN (0/0) on a micro-batch holding token 99."""
    seen = {"poisoned": False}

    def look(module, args, kwargs):
        ids = kwargs.get("input_ids")
        seen["poisoned"] = bool(ids is not None and (ids == POISON).any())

    def spoil(module, args, output):
        if seen["poisoned"]:
            zero = output.new_zeros(())
            return output * (zero / zero)
        return None

    model.register_forward_pre_hook(look, with_kwargs=True)
    model.lm_head.register_forward_hook(spoil)


class Detach(TrainerCallback):
    """--detach: train without pausing (the session exists once training begins)."""

    def __init__(self, callback: NansenseCallback):
        self.callback = callback

    def on_train_begin(self, args, state, control, **kwargs):
        if self.callback.session is not None:
            self.callback.session.detach()


def main() -> int:
    p = common.arguments(__doc__, epochs=2, batch_size=8)
    p.add_argument("--nan", action="store_true", help="NaN logits on micro-batches holding token 99")
    p.add_argument("--accumulation", type=int, default=2, help="gradient_accumulation_steps")
    args = p.parse_args()
    warnings.filterwarnings("ignore")
    hf_logging.set_verbosity_error()
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=100, n_positions=64,
                                       bos_token_id=0, eos_token_id=0))
    if args.nan:
        poison_logits(model)
    steps = args.limit_batches or 8
    per_step = args.batch_size * args.accumulation
    data = RandomTokens(steps * per_step, 32, nan_from=2 * per_step if args.nan else -1)
    training = TrainingArguments(output_dir="hf_trainer_out", per_device_train_batch_size=args.batch_size,
                                 gradient_accumulation_steps=args.accumulation, num_train_epochs=args.epochs,
                                 learning_rate=1e-3, logging_steps=1, save_strategy="no", report_to=[],
                                 use_cpu=True, disable_tqdm=True, seed=0, train_sampling_strategy="sequential")
    callback = NansenseCallback(port=common.port(args), host=args.host, open_browser=not args.no_browser,
                                enabled=not args.disabled)
    trainer = Trainer(model=model, args=training, train_dataset=data, callbacks=[callback])
    if args.detach:
        trainer.add_callback(Detach(callback))
    trainer.train()
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    print(f"trained {trainer.state.global_step} optimizer steps; last loss {losses[-1]:.3f}" if losses else
          "trained no step", flush=True)
    session = callback.session
    error = session.debug_error if session is not None else None
    common.keep_serving(session.url if session is not None else None, args)
    return 1 if error is not None else 0


if __name__ == "__main__":
    sys.exit(main())
