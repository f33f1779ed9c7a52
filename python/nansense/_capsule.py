"""Replaying a NaN capsule into a Python model."""

from __future__ import annotations

import os
from typing import Any, Optional

import torch

from . import _nansense, _setups
from ._state import load_state, module_specs, state_kind, unwrap
from ._types import BatchPosition, DebugSettings


class Capsule:
    """What a NaN capsule held, after replay_capsule() restored it.

    batch holds every tensor of the batch item in the order the loop's item
    had them (for (x, y) pairs: x, then y), on the CPU; position is where it
    tripped; gradients the parameter gradients the guard saw (non-finite
    included); notes anything that may keep the replay from being exact."""

    def __init__(self, native):
        self._native = native
        self.position: BatchPosition = BatchPosition._of(native.position)
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
                   optimizer: Optional[torch.optim.Optimizer] = None, scheduler: Any = None,
                   scaler: Any = None) -> Capsule:
    """Load the NaN capsule at path into model: the weights and buffers the
    tripping batch began from, the RNG states and torch's thread count, and
    with optimizer (and scheduler) their state_dict() as it was before the
    tripping batch's step. Then run the loop's body once on capsule.batch to
    reproduce the NaN, bit for bit on the CPU, and check it with
    capsule.gradients_match(); optimizer.step() then makes the very update
    the recorded run made.

    model must be the architecture the capsule was recorded from (names,
    shapes and dtypes are checked), and optimizer/scheduler of the types the
    session was started with (a capsule holds the state of what
    nansense.start was given); CapsuleError says what differs, and nothing
    is changed. Without an optimizer, its state is left as it is. With
    scaler (the loop's torch.amp.GradScaler), its scale and growth tracker
    come back as they were before the tripping batch, so a mixed-precision
    replay scales the loss as the recorded run did."""
    model = unwrap(model)
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a capsule file path, got {type(path).__name__}")
    if optimizer is not None and not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(f"optimizer must be a torch.optim.Optimizer, got {type(optimizer).__name__}")
    if scheduler is not None and not (hasattr(scheduler, "load_state_dict") and hasattr(scheduler, "step")):
        raise TypeError(f"scheduler must be an LR scheduler (with step() and load_state_dict()), got "
                        f"{type(scheduler).__name__}")
    _setups.check_scaler(scaler)
    if optimizer is None and scheduler is None and scaler is None:
        native = _nansense.replay_capsule(os.fspath(path), module_specs(model), "", None)
    else:
        native = _nansense.replay_capsule(os.fspath(path), module_specs(model), state_kind(optimizer, scheduler),
                                          load_state(optimizer, scheduler, _setups.ScalerWatch(scaler)))
    return Capsule(native)
