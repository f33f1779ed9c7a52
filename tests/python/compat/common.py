"""What every compat script shares: a small image classifier, random data in
DataLoaders (nothing downloaded), the --port flag, and the summary line the
test reads. Written with PyTorch alone: the scripts use nansense only
through the reference API."""

import argparse
import json
import sys

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def arguments(**more):
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=None, help="serve the UI on this port")
    for name, default in more.items():
        parser.add_argument(f"--{name.replace('_', '-')}", default=default)
    return parser.parse_args()


def make_model():
    return nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, 3))


def loaders(train=48, val=16, batch_size=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    train_set = TensorDataset(torch.randn(train, 1, 8, 8, generator=g), torch.randint(0, 3, (train,), generator=g))
    val_set = TensorDataset(torch.randn(val, 1, 8, 8, generator=g), torch.randint(0, 3, (val,), generator=g))
    return (DataLoader(train_set, batch_size=batch_size, shuffle=True, generator=torch.Generator().manual_seed(seed)),
            DataLoader(val_set, batch_size=batch_size))


def report(script, **values):
    # One write for the whole line: print() under PYTHONUNBUFFERED writes the
    # text and its newline apart, so two ranks sharing torchrun's stdout could
    # interleave their lines ("RESULT {..}RESULT {..}\n\n").
    sys.stdout.write("RESULT " + json.dumps({"script": script, **values}) + "\n")
    sys.stdout.flush()
