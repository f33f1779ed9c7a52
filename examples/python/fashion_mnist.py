#!/usr/bin/env python3
"""The Python demo: a small CNN on Fashion-MNIST (Debian's
dataset-fashion-mnist), debugged live by nansense.

    PYTHONPATH=build/python .venv/bin/python examples/python/fashion_mnist.py

The UI and the MCP endpoint are served on 127.0.0.1:8080; the run pauses on
its first batch. Layer names are the module paths below ("features.0" is
the first convolution, "classifier.1" the first linear layer).
"""

import gzip
import struct
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import common
import nansense

MEAN, STD = 0.286, 0.353
DATA_DIR = Path("/usr/share/datasets/fashion-mnist")   # Debian's dataset-fashion-mnist


class FashionCnn(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2))
        self.classifier = nn.Sequential(
            nn.Flatten(), nn.Linear(32 * 7 * 7, 64), nn.ReLU(), nn.Dropout(0.25), nn.Linear(64, 10))

    def forward(self, x):
        return F.log_softmax(self.classifier(self.features(x)), dim=1)


def read_idx(path: Path) -> torch.Tensor:
    with gzip.open(path, "rb") as f:
        data = f.read()
    _, dtype, ndim = struct.unpack(">HBB", data[:4])
    if dtype != 0x08:
        raise ValueError(f"{path}: not an unsigned-byte IDX file")
    shape = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return torch.frombuffer(bytearray(data[4 + 4 * ndim:]), dtype=torch.uint8).reshape(shape)


def fashion_mnist(data_dir: Path, split: str) -> TensorDataset:
    prefix = "train" if split == "train" else "t10k"
    images = read_idx(data_dir / f"{prefix}-images-idx3-ubyte.gz").float().div_(255).sub_(MEAN).div_(STD)
    labels = read_idx(data_dir / f"{prefix}-labels-idx1-ubyte.gz").long()
    return TensorDataset(images.unsqueeze(1), labels)


def per_class_nll(log_probs, target):
    """The --nan loss: each class's mean loss, summed. A batch that lacks a
    class divides by a zero count."""
    nll = F.nll_loss(log_probs, target, reduction="none")
    total = log_probs.new_zeros(())
    for c in range(10):
        mask = (target == c).float()
        total = total + (nll * mask).sum() / mask.sum()
    return total


def loaders(args) -> tuple[DataLoader, DataLoader]:
    """The train (shuffled) and test loaders for --data-dir, --batch-size
    and --limit-batches."""
    train_set, val_set = fashion_mnist(args.data_dir, "train"), fashion_mnist(args.data_dir, "test")
    if args.limit_batches:
        n = args.limit_batches * args.batch_size
        train_set = TensorDataset(*train_set[:n])
        val_set = TensorDataset(*val_set[:n])
    return DataLoader(train_set, batch_size=args.batch_size, shuffle=True), DataLoader(val_set, batch_size=256)


def main() -> int:
    p = common.arguments(__doc__, data_dir=DATA_DIR, data_help="Fashion-MNIST's IDX files")
    p.add_argument("--nan", action="store_true", help="a per-class loss that turns NaN when a batch lacks a class")
    args = p.parse_args()

    torch.manual_seed(0)
    train_loader, val_loader = loaders(args)

    model = FashionCnn()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    session = nansense.start(model, optimizer=optimizer, enabled=not args.disabled, port=common.port(args),
                             host=args.host, open_browser=not args.no_browser, input_mean=MEAN, input_std=STD)
    if args.detach:
        session.detach()
    loss_fn = per_class_nll if args.nan else F.nll_loss

    for epoch in range(args.epochs):
        model.train()
        for x, y in session.batches(train_loader, phase="train"):
            optimizer.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            optimizer.step()
        model.eval()
        correct = total = 0
        with torch.no_grad():
            for x, y in session.batches(val_loader, phase="val"):
                correct += (model(x).argmax(1) == y).sum().item()
                total += len(y)
        print(f"epoch {epoch}: val accuracy {correct / max(total, 1):.3f}", flush=True)
    session.close()
    common.keep_serving(session.url if session.enabled else None, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
