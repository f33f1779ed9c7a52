"""What the trainer adapters (Lightning, the Hugging Face Trainer) save with
checkpoints and capsules beside the session's own state: every RNG, and the
batch in flight as bytes. All of it loads with torch.load(weights_only=True),
as a plain loop's session state does: the NumPy state's key array travels
as a tensor, a batch (tuples, dicts, a BatchEncoding: whatever the loader or
collator made) as torch.save's bytes, unpickled in full only by a replay."""

from __future__ import annotations

import io
import random
from typing import Any, Optional

import torch

try:
    import numpy
except ImportError:  # pragma: no cover - numpy comes with torch's usual installs
    numpy = None  # type: ignore[assignment]


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
