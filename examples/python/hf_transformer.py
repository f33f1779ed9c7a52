#!/usr/bin/env python3
"""A Hugging Face transformer debugged by nansense: a two-layer GPT-2 built
from its config (random weights, nothing downloaded) learns a byte-level
language model of a local text, one line per sequence, in a plain loop.

    PYTHONPATH=build/python .venv/bin/python examples/python/hf_transformer.py

Needs `transformers` (pip install transformers). The UI and the MCP
endpoint are served on 127.0.0.1:8080; the run pauses on its first batch.
Layer names are the model's module paths ("transformer.h.0.attn.c_attn",
"transformer.h.1.mlp.c_fc", "transformer.ln_f"). The default text is Debian's copy
of the GPL (any text file does: --text). With --nan the loss is each
line's mean token loss and the blank lines stay in: a line with no token to
predict divides by zero.
"""

import sys
from pathlib import Path

import torch
from torch.utils.data import DataLoader, TensorDataset

import common
import nansense

try:
    from transformers import GPT2Config, GPT2LMHeadModel
except ImportError:
    sys.exit("this example needs Hugging Face transformers: pip install transformers")

TEXT = Path("/usr/share/common-licenses/GPL-3")
SEQ_LEN = 64
PAD = 0   # byte 0 (NUL) pads; its positions are masked out and ignored by the loss


def lines_dataset(path: Path, keep_blank: bool) -> TensorDataset:
    """One sequence per line of path, as bytes (vocabulary 256), cut to
    SEQ_LEN and padded: input_ids, attention_mask, labels (-100 at padding)."""
    lines = path.read_bytes().splitlines()
    if not keep_blank:
        lines = [line for line in lines if line.strip()]
    ids = torch.full((len(lines), SEQ_LEN), PAD, dtype=torch.long)
    mask = torch.zeros((len(lines), SEQ_LEN), dtype=torch.long)
    for i, line in enumerate(lines):
        row = torch.frombuffer(bytearray(line[:SEQ_LEN]), dtype=torch.uint8) if line else torch.empty(0)
        ids[i, :len(row)] = row
        mask[i, :len(row)] = 1
    return TensorDataset(ids, mask, ids.masked_fill(mask == 0, -100))


def per_sequence_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """The --nan loss: each sequence's mean next-token loss, averaged over
    the batch. A sequence with no label to predict divides by a zero count."""
    targets = labels[:, 1:]
    mask = (targets != -100).float()
    nll = -logits[:, :-1].log_softmax(-1).gather(-1, targets.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    return ((nll * mask).sum(1) / mask.sum(1)).mean()


def main() -> int:
    p = common.arguments(__doc__, batch_size=16)
    p.add_argument("--text", type=Path, default=TEXT, help="the text to model, one line per sequence")
    p.add_argument("--nan", action="store_true", help="a per-line mean loss, blank lines kept: NaN at a blank line")
    p.add_argument("--cache-dir", default=".nansense_cache", help="where time travel keeps its epoch checkpoints")
    args = p.parse_args()

    torch.manual_seed(0)
    data = lines_dataset(args.text, keep_blank=args.nan)
    n_val = max(1, len(data) // 10)
    train_set, val_set = TensorDataset(*data[n_val:]), TensorDataset(*data[:n_val])
    if args.limit_batches:
        train_set = TensorDataset(*train_set[:args.limit_batches * args.batch_size])
        val_set = TensorDataset(*val_set[:args.limit_batches * args.batch_size])
    train_loader = DataLoader(train_set, batch_size=args.batch_size, shuffle=True)
    val_loader = DataLoader(val_set, batch_size=args.batch_size)

    config = GPT2Config(n_layer=2, n_head=2, n_embd=64, vocab_size=256, n_positions=SEQ_LEN,
                        bos_token_id=None, eos_token_id=None, pad_token_id=PAD)
    model = GPT2LMHeadModel(config)   # random weights from the config: no download
    model.loss_type = "ForCausalLM"   # the class name does not say it (transformers warns otherwise)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    session = nansense.start(model, optimizer=optimizer, enabled=not args.disabled, port=common.port(args),
                             host=args.host, open_browser=not args.no_browser)
    if args.detach:
        session.detach()

    for epoch in session.epochs(args.epochs, cache_dir=args.cache_dir):
        with session.restore_point():
            model.train()
            for input_ids, attention_mask, labels in session.batches(train_loader, phase="train"):
                optimizer.zero_grad()
                # The forward's arguments, keyword ones too, are the model inputs the UI shows.
                out = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels)
                loss = per_sequence_loss(out.logits, labels) if args.nan else out.loss
                loss.backward()
                optimizer.step()
            model.eval()
            total = tokens = 0.0
            with torch.no_grad():
                for input_ids, attention_mask, labels in session.batches(val_loader, phase="val"):
                    out = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels)
                    n = (labels[:, 1:] != -100).sum().item()
                    total, tokens = total + out.loss.item() * n, tokens + n
            val_loss = total / max(tokens, 1)
            print(f"epoch {epoch}: val loss {val_loss:.3f} (perplexity {torch.tensor(val_loss).exp().item():.1f})",
                  flush=True)
    session.close()
    common.keep_serving(session.url if session.enabled else None, args)
    # A NaN still stands (without a UI the loop trained on past it; its capsule is written).
    return 1 if session.enabled and session.debug_error is not None else 0


if __name__ == "__main__":
    sys.exit(main())
