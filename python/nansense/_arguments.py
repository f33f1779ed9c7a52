"""Argument checks shared by the session, its restorer and the trainer
adapters: each raises TypeError or ValueError naming the bad argument."""

from __future__ import annotations

import math
import numbers
import os
from collections.abc import Mapping, Sequence
from typing import Any, Optional, Union

import torch


def check_int(name: str, value: Any, minimum: int, *, none_ok: bool = True) -> Optional[int]:
    if value is None and none_ok:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


def check_bool(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__} {value!r}")
    return value


def check_phases(name: str, phases: Any) -> Optional[list[tuple[str, int]]]:
    if phases is None:
        return None
    if not isinstance(phases, Mapping):
        raise TypeError(f'{name} must be a dict of phase name -> batch count, e.g. {{"train": 938, "val": 157}}, '
                        f"got {type(phases).__name__}")
    if not phases:
        raise ValueError(f"{name} must name at least one phase")
    out = []
    for phase, count in phases.items():
        if not isinstance(phase, str) or not phase:
            raise TypeError(f"{name}: phase names must be non-empty strings, got {phase!r}")
        checked = check_int(f"{name}[{phase!r}]", count, 1, none_ok=False)
        assert checked is not None  # none_ok=False
        out.append((phase, checked))
    return out


def mean_std(name: str, value: Any) -> Union[None, list[float], dict[str, list[float]]]:
    def values(label: str, v: Any) -> list[float]:
        if isinstance(v, torch.Tensor):
            v = v.flatten().tolist()
        if isinstance(v, numbers.Real) and not isinstance(v, bool):
            v = [v]
        if isinstance(v, (str, bytes)) or not isinstance(v, Sequence) or not v:
            raise TypeError(f"{label} must be a number or a non-empty sequence of numbers (one per channel), got {v!r}")
        out = []
        for x in v:
            if isinstance(x, bool) or not isinstance(x, numbers.Real) or not math.isfinite(x):
                raise ValueError(f"{label} must hold finite numbers, got {x!r}")
            out.append(float(x))
        return out

    if value is None:
        return None
    if isinstance(value, Mapping):
        if not value:
            raise ValueError(f"{name} must not be an empty dict")
        for k in value:
            if not isinstance(k, str) or not k:
                raise TypeError(f'{name}: keys are input names ("input", "input_1", ...), got {k!r}')
        return {k: values(f"{name}[{k!r}]", v) for k, v in value.items()}
    return values(name, value)


def check_serve_args(port: Any, host: Any, open_browser: Any, input_mean: Any, input_std: Any,
                      input_transform: Any, *, port_none_ok: bool) -> tuple:
    if port is not None or not port_none_ok:
        check_int("port", port, 0, none_ok=False)
        if port > 65535:
            raise ValueError(f"port must be in 0..65535 (0 picks a free port), got {port}")
    if not isinstance(host, str) or not host:
        raise TypeError(f'host must be a non-empty string such as "127.0.0.1", got {host!r}')
    check_bool("open_browser", open_browser)
    return mean_std("input_mean", input_mean), mean_std("input_std", input_std), check_transform(input_transform)


def check_transform(transform: Any) -> Any:
    if transform is None:
        return None
    if isinstance(transform, Mapping):
        if not transform:
            raise ValueError("input_transform must not be an empty dict")
        for k, f in transform.items():
            if not isinstance(k, str) or not k:
                raise TypeError(f'input_transform: keys are input names ("input", "input_1", ...), got {k!r}')
            if not callable(f):
                raise TypeError(f"input_transform[{k!r}] must be a function of a [C,H,W] tensor, got "
                                f"{type(f).__name__}")
        return dict(transform)
    if not callable(transform):
        raise TypeError("input_transform must be a function mapping one [C,H,W] input sample to a [1,H,W] or "
                        f"[3,H,W] image in 0..1 (or a dict of them by input name), got {type(transform).__name__}")
    return transform




def check_cache_dir(cache_dir) -> str:
    if not isinstance(cache_dir, (str, os.PathLike)) or not os.fspath(cache_dir):
        raise TypeError(f"cache_dir must be a folder path, got {cache_dir!r}")
    return os.fspath(cache_dir)
