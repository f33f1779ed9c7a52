"""What the trainer adapters (Lightning's and the Hugging Face Trainer's
callbacks) share: the batch they open on the session (OpenBatch), their
options and the network they watch, and what they
save with checkpoints and capsules beside the session's own state (every
RNG, the batch in flight as bytes). That state loads with
torch.load(weights_only=True), as a plain loop's session state does: the
NumPy state's key array travels as a tensor, a batch (tuples, dicts, a
BatchEncoding: whatever the loader or collator made) as torch.save's bytes,
unpickled in full only by a replay."""

from __future__ import annotations

import io
import random
from typing import Any, Optional

import torch

from ._arguments import check_bool, check_serve_args

try:
    import numpy
except ImportError:  # pragma: no cover - numpy comes with torch's usual installs
    numpy = None  # type: ignore[assignment]


class OpenBatch:
    """The batch a trainer callback opened on its session and has not ended
    yet: the callbacks open one in a batch-start hook, end it in the matching
    end hook, and drop it when the trainer leaves it by an exception, a
    time-travel jump or the end of training. `_open` is (phase, the module
    hooks the session put on the model), None between batches."""

    _session: Any
    _open: Optional[tuple]

    @property
    def _engine(self) -> Any:
        """The session's engine while it is open (each callback's own)."""
        raise NotImplementedError

    def _take_hooks_off(self) -> Optional[str]:
        """Removes the open batch's module hooks and forgets it; returns its
        phase, None when no batch was open."""
        if self._open is None:
            return None
        phase, hooks = self._open
        self._open = None
        self._session._remove_hooks(hooks)
        return phase

    def _drop_open_batch(self, lost: bool = True) -> bool:
        """Drops the open batch without ending it (no statistics, no checks
        for it): `lost` when an exception or a jump unwinds the trainer's
        loop, False when training ended with the batch under way. False when
        none was open."""
        if self._take_hooks_off() is None:
            return False
        self._engine.abandon_batch(lost)
        return True


def serve_options(*, port: Optional[int], host: str, open_browser: bool, model: Optional[str], input_mean: Any,
                  input_std: Any, input_transform: Any, enabled: bool, inside: str) -> dict:
    """A callback's arguments checked (TypeError or ValueError naming the
    bad one); the options it starts its session with. `inside` says where
    `model` (an attribute path) is looked up, for the error."""
    check_serve_args(port, host, open_browser, input_mean, input_std, input_transform, port_none_ok=True)
    check_bool("enabled", enabled)
    if model is not None and (not isinstance(model, str) or not model or
                              not all(part.isidentifier() for part in model.split("."))):
        raise TypeError(f"model must be an attribute path inside {inside}, got {model!r}")
    return dict(port=port, host=host, open_browser=open_browser, input_mean=input_mean, input_std=input_std,
                input_transform=input_transform)


def network_at(root: Any, path: Optional[str]) -> torch.nn.Module:
    """The module at attribute path `path` of root (root itself for None):
    NansenseCallback(model=...)'s network."""
    target: Any = root
    if path is not None:
        walked = []
        for part in path.split("."):
            walked.append(part)
            if not hasattr(target, part):
                raise AttributeError(f"NansenseCallback(model={path!r}): {type(root).__name__} has no attribute "
                                     f"{'.'.join(walked)!r}")
            target = getattr(target, part)
        if not isinstance(target, torch.nn.Module):
            raise TypeError(f"NansenseCallback(model={path!r}) names a {type(target).__name__}, not an nn.Module")
    return target


def rng_state() -> dict:
    state = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    if numpy is not None:
        name, keys, pos, has_gauss, cached = numpy.random.get_state()
        state["numpy"] = (name, torch.from_numpy(numpy.asarray(keys).astype("int64")), int(pos), int(has_gauss),
                          float(cached))
    return state


def set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    if numpy is not None and "numpy" in state:
        name, keys, pos, has_gauss, cached = state["numpy"]
        numpy.random.set_state((name, keys.numpy().astype("uint32"), pos, has_gauss, cached))


def pickled(value: Any) -> Optional[bytes]:
    if value is None:
        return None
    buffer = io.BytesIO()
    torch.save(value, buffer)
    return buffer.getvalue()


def unpickled(data: Optional[bytes]) -> Any:
    return None if data is None else torch.load(io.BytesIO(data), map_location="cpu", weights_only=False)
