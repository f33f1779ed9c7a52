"""The model and training state helpers shared by the session, capsule
replay and the trainer adapters: the user's model unwrapped and described to
the engine, and the Python state (optimizer, scheduler, loss scaler) that
checkpoints and capsules hold beside the weights."""

from __future__ import annotations

import io
from typing import Any, Optional

import torch

from . import _nansense, _setups


def state_kind(optimizer: Any, scheduler: Any) -> str:
    """How checkpoints and capsules name the Python state they hold."""
    return "python:" + "+".join(type(o).__qualname__ for o in (optimizer, scheduler) if o is not None)


def state_of(optimizer: Any, scheduler: Any, scaler: Optional[_setups.ScalerWatch] = None) -> dict:
    """The Python state checkpoints and capsules hold beside the weights
    (the Lightning integration adds its own entries): the optimizer's, the
    scheduler's and the loss scaler's (scale, growth tracker)."""
    return {"optimizer": optimizer.state_dict() if optimizer is not None else None,
            "scheduler": scheduler.state_dict() if scheduler is not None else None,
            "scaler": scaler.state() if scaler is not None else None}


def restore_state(optimizer: Any, scheduler: Any, state: dict,
                   scaler: Optional[_setups.ScalerWatch] = None) -> None:
    if optimizer is not None and state.get("optimizer") is not None:
        optimizer.load_state_dict(state["optimizer"])
    if scheduler is not None and state.get("scheduler") is not None:
        scheduler.load_state_dict(state["scheduler"])
    if scaler is not None:
        scaler.load(state.get("scaler"))


def save_state(optimizer: Any, scheduler: Any, scaler: Optional[_setups.ScalerWatch] = None):
    def save() -> bytes:
        buffer = io.BytesIO()
        torch.save(state_of(optimizer, scheduler, scaler), buffer)
        return buffer.getvalue()
    return save


def optimizer_reader(model: torch.nn.Module, optimizer: torch.optim.Optimizer):
    """What snapshots show of a Python optimizer, as of the C++ ones: per
    parameter name its state (tensors copied to the CPU, numbers as 0-dim
    tensors) and its group's numeric hyperparameters (booleans as 0/1, Adam's
    betas as beta1/beta2)."""
    def read():
        names = {id(p): name for name, p in model.named_parameters()}
        states, hypers = {}, {}
        for group in optimizer.param_groups:
            hyper = {}
            for key, value in group.items():
                if key == "params" or value is None:
                    continue
                if isinstance(value, (bool, int, float)):
                    hyper[key] = float(value)
                elif key == "betas" and isinstance(value, (tuple, list)) and len(value) == 2:
                    hyper["beta1"], hyper["beta2"] = float(value[0]), float(value[1])
            for p in group["params"]:
                name = names.get(id(p))
                if name is None:
                    continue
                hypers[name] = hyper
                state = {}
                for key, value in optimizer.state.get(p, {}).items():
                    if torch.is_tensor(value):
                        state[key] = value.detach().to("cpu", copy=True)
                    elif isinstance(value, (bool, int, float)):
                        state[key] = torch.tensor(value)
                if state:
                    states[name] = state
        return states, hypers
    return read


def load_state(optimizer: Any, scheduler: Any, scaler: Optional[_setups.ScalerWatch] = None):
    def load(data: bytes) -> None:
        restore_state(optimizer, scheduler, torch.load(io.BytesIO(data), weights_only=True), scaler)
    return load


def unwrap(model: Any) -> torch.nn.Module:
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"nansense.start needs a torch.nn.Module, got {type(model).__name__}")
    wrappers = (torch.nn.DataParallel, torch.nn.parallel.DistributedDataParallel)
    while True:
        inner = _setups.unwrap_compiled(model)
        if isinstance(inner, wrappers):
            inner = inner.module
        if inner is model:
            return model
        model = inner


def module_specs(model: torch.nn.Module) -> list:
    specs = []
    for path, module in model.named_modules():
        extra = module.extra_repr()
        specs.append(_nansense.ModuleSpec(
            path=_setups.module_path(path),
            kind=type(module).__name__,
            description=f"{type(module).__name__}({extra})",
            parameters=[(n, p) for n, p in module.named_parameters(recurse=False) if p is not None],
            buffers=[(n, b) for n, b in module.named_buffers(recurse=False) if b is not None]))
    return specs
