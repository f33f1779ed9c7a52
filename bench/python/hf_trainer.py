#!/usr/bin/env python3
"""What nansense.transformers.NansenseCallback costs a Hugging Face Trainer
run, as ratios to the plain Trainer measured in the same run (GPT-2 from a
config, random weights and tokens, gradient accumulation 2, one thread):

  detached   the callback, no UI, its checks off             target <= 1.03
  guarded    the callback, no UI, the guard and the flight
             recorder on (the default)                       target <= 1.03

    PYTHONPATH=build/python .venv/bin/python bench/python/hf_trainer.py [--steps 20] [--rounds 5]

Variants run interleaved, round after round, each a fresh Trainer over the
same model state; the time is the optimizer steps' (from the first step's
end to the last's: the Trainer's and the session's setup excluded). Each
ratio is the median of the per-round ratios to the plain Trainer of the
same round, with the interquartile range.
"""

import argparse
import copy
import os
import statistics
import sys
import time
import warnings

os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, TrainingArguments  # noqa: E402
from transformers.utils import logging as hf_logging  # noqa: E402

from nansense.transformers import NansenseCallback  # noqa: E402


class Tokens(torch.utils.data.Dataset):
    def __init__(self, n, length):
        self.ids = torch.randint(0, 512, (n, length), generator=torch.Generator().manual_seed(0))

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


class Clock(TrainerCallback):
    def __init__(self):
        self.ends = []

    def on_step_end(self, args, state, control, **kwargs):
        self.ends.append(time.perf_counter())


class Detached(NansenseCallback):
    def on_train_begin(self, args, state, control, **kwargs):
        super().on_train_begin(args, state, control, **kwargs)
        self.session.set_debug_settings(enabled=False)


def one_run(model, data, steps, callback, out):
    clock = Clock()
    args = TrainingArguments(output_dir=out, per_device_train_batch_size=8, gradient_accumulation_steps=2,
                             max_steps=steps, learning_rate=1e-4, logging_steps=10_000, save_strategy="no",
                             report_to=[], use_cpu=True, disable_tqdm=True, seed=0)
    trainer = Trainer(model=copy.deepcopy(model), args=args, train_dataset=data,
                      callbacks=[c for c in (callback, clock) if c is not None])
    trainer.train()
    return clock.ends[-1] - clock.ends[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=20, help="optimizer steps a run")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", default="/tmp/nansense_bench_hf")
    options = parser.parse_args()
    torch.set_num_threads(1)
    hf_logging.set_verbosity_error()
    warnings.filterwarnings("ignore")
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=4, n_embd=128, n_head=4, vocab_size=512, n_positions=64))
    data = Tokens(16 * (options.steps + 1), 64)
    variants = {"plain": lambda: None, "detached": lambda: Detached(), "guarded": lambda: NansenseCallback()}
    ratios = {name: [] for name in variants if name != "plain"}
    stderr = sys.stderr
    for r in range(options.rounds):
        times = {}
        for name, make in variants.items():
            sys.stderr = open(os.devnull, "w")  # the callback's no-UI line, once a run
            try:
                times[name] = one_run(model, data, options.steps, make(), options.out)
            finally:
                sys.stderr.close()
                sys.stderr = stderr
        for name in ratios:
            ratios[name].append(times[name] / times["plain"])
        print(f"round {r + 1}: plain {times['plain']:.3f} s, " +
              ", ".join(f"{n} {times[n] / times['plain']:.3f}" for n in ratios), flush=True)
    print(f"\nGPT-2 from a config (4 layers, 128 wide, seq 64, micro-batch 8, accumulation 2), "
          f"{options.steps} optimizer steps a run, {options.rounds} rounds, torch {torch.__version__}")
    for name, values in ratios.items():
        q = statistics.quantiles(values, n=4) if len(values) > 1 else [values[0]] * 3
        print(f"  {name:9s} {statistics.median(values):.3f} [{q[0]:.3f}, {q[2]:.3f}]  target <= 1.03")


if __name__ == "__main__":
    main()
