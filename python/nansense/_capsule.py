"""Replaying a NaN capsule into a Python model."""

from __future__ import annotations

import os
from typing import Optional

import torch

from . import _nansense
from ._session import _module_specs, _unwrap
from ._types import BatchPosition, DebugSettings


class Capsule:
    """What a NaN capsule held, after replay_capsule() restored it.

    batch holds every tensor of the batch item in the order the loop's item
    had them (for (x, y) pairs: x, then y), on the CPU; position is where it
    tripped; gradients the parameter gradients the guard saw (non-finite
    included); notes anything that may keep the replay from being exact."""

    def __init__(self, native):
        self._native = native
        self.position: BatchPosition = BatchPosition._from(native.position)
        self.batch: list[torch.Tensor] = native.batch
        self.gradients: dict[str, torch.Tensor] = native.gradients
        self.reasons: list[str] = native.reasons
        self.notes: list[str] = native.notes
        self.num_threads: int = native.num_threads
        self.settings: DebugSettings = DebugSettings._from_engine(native.settings)

    def gradients_match(self) -> tuple[bool, str]:
        """Whether the model's parameter gradients now equal the recorded ones
        bit for bit (NaN payloads included); on a mismatch, where."""
        return self._native.gradients_match()

    def __repr__(self) -> str:
        return f"<nansense.Capsule {self.position} reasons={self.reasons}>"


def replay_capsule(path: str | os.PathLike, model: torch.nn.Module,
                   optimizer: Optional[torch.optim.Optimizer] = None) -> Capsule:
    """Load the NaN capsule at path into model: the weights and buffers the
    tripping batch began from, the RNG states and torch's thread count. Then
    run the loop's body once on capsule.batch to reproduce the NaN, bit for
    bit on the CPU, and check it with capsule.gradients_match().

    model must be the architecture the capsule was recorded from (names,
    shapes and dtypes are checked; CapsuleError says what differs, and
    nothing is changed). The Python optimizer's state is not in capsules
    yet: a stateless optimizer (SGD without momentum) replays exactly, and
    passing another one raises NotImplementedError."""
    model = _unwrap(model)
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a capsule file path, got {type(path).__name__}")
    if optimizer is not None:
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise TypeError(f"optimizer must be a torch.optim.Optimizer, got {type(optimizer).__name__}")
        raise NotImplementedError("capsules do not hold a Python optimizer's state yet: replay with optimizer=None "
                                  "and a stateless optimizer (SGD without momentum) for an exact replay")
    return Capsule(_nansense.replay_capsule(os.fspath(path), _module_specs(model)))
