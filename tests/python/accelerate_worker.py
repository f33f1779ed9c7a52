"""One process of `accelerate launch --cpu --num_processes 2`, for
test_hf_setups.py: a plain accelerate loop (accelerator.prepare, DDP over
Gloo, accelerator.backward) under the plain nansense API, served by no UI.
GPT-2 from a config with its lm_head poisoned (hf_models.poison); 16
samples in order, 2 a batch, sharded by accelerate: rank 1's second batch
holds sample 7, the poisoned one. Each rank writes rank<r>.json: its layer
names, the steps it ran, and its debug error (position, producer op,
capsule, message)."""

import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import nansense  # noqa: E402
from accelerate import Accelerator  # noqa: E402
from hf_models import TokenData, gpt2, poison  # noqa: E402


def main():
    accelerator = Accelerator(cpu=True)
    rank = accelerator.process_index
    torch.manual_seed(0)
    model = poison(gpt2(), "lm_head")
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loader = torch.utils.data.DataLoader(TokenData(n=16, poisoned=[7]), batch_size=2)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    session = nansense.start(model, optimizer=optimizer.optimizer, epochs=1)
    session.set_update_frequency(unit="batch", n=3)  # capture batches 0 and 3: their layers get named
    session.run()
    steps = []
    for batch in session.batches(loader, phase="train"):
        loss = model(**batch).loss
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        steps.append(session.live_position.batch_idx)
    error = session.debug_error
    out = {"rank": rank, "world": accelerator.num_processes, "wrapped": type(model).__name__,
           "layers": list(session.layer_names), "steps": steps, "error": None}
    if error is not None:
        out["error"] = {"position": [error.position.phase, error.position.epoch, error.position.batch_idx],
                        "producer": ((error.root_cause or {}).get("producer") or {}).get("op"),
                        "capsule": error.capsule, "text": error.text, "update": error.update}
    session.close()
    with open(f"rank{rank}.json", "w") as f:
        json.dump(out, f)
    accelerator.wait_for_everyone()


if __name__ == "__main__":
    main()
