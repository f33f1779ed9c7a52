"""What the front end tells the engine about the setup a loop trains in:
the loss each backward starts from, the mixed-precision loss scaler, and
torch.compile. The engine decides what each means (numerics/monitor.h);
nothing here may raise into the user's loop."""

from __future__ import annotations

import functools
import gc
import sys
import threading
from typing import Any, Optional

import torch

# The engine whose batch is open on this thread (set by Session._open_batch).
_open = threading.local()


def batch_opened(engine: Any, scaler: Optional["ScalerWatch"] = None) -> None:
    _open.engine = engine
    _open.scaler = scaler


def batch_closed() -> None:
    _open.engine = None
    _open.scaler = None
    _open.scales = ()


def _note_roots(tensors: Any) -> None:
    engine = getattr(_open, "engine", None)
    if engine is None:
        return
    if isinstance(tensors, torch.Tensor):
        roots = [tensors]
    elif isinstance(tensors, (tuple, list)):
        roots = [t for t in tensors if isinstance(t, torch.Tensor)]
    else:
        return
    watch = getattr(_open, "scaler", None)
    if watch is not None and watch.scaler is None and not watch._searched:
        # What the loss was scaled by, should a check trip and a scaler be
        # looked for: scaler.scale(loss) is loss * scale, and the graph node
        # keeps that scale tensor until backward frees it.
        _open.scales = [_multiplier(t) for t in roots]
    try:
        engine.note_backward_roots([t.detach() for t in roots])
    except Exception as e:  # noqa: BLE001 - the loss check goes, the backward runs
        batch_closed()
        print(f"[nansense] the loss check is off for this batch: {type(e).__name__}: {e}", file=sys.stderr)


def install_backward_hook() -> None:
    """Wraps torch.autograd.backward (Tensor.backward calls it) once per
    process, so the engine sees the tensor each backward starts from. Outside
    a nansense batch the wrapper only forwards the call."""
    original = torch.autograd.backward
    if getattr(original, "_nansense_roots", False):
        return

    @functools.wraps(original)
    def backward(tensors, *args, **kwargs):
        _note_roots(tensors)
        return original(tensors, *args, **kwargs)

    backward._nansense_roots = True  # type: ignore[attr-defined]
    torch.autograd.backward = backward


# ---------------------------------------------------------------- the loss scaler


def _is_scaler(obj: Any) -> bool:
    # type(), not isinstance(): that would read __class__, which some objects
    # compute (a dead weak proxy raises, a deprecated alias warns).
    return issubclass(type(obj), torch.amp.GradScaler) and obj.is_enabled()


def _multiplier(root: torch.Tensor) -> Optional[int]:
    """The storage of the one-element tensor root was multiplied by (what
    scaler.scale(loss) makes: loss * scale), or None. A loss divided by a
    tensor (the Hugging Face losses divide by the batch's token count) or
    multiplied by a larger one is no scaler's."""
    grad_fn = root.grad_fn
    if type(grad_fn).__name__ != "MulBackward0":
        return None
    try:
        saved = getattr(grad_fn, "_saved_other", None)
    except RuntimeError:  # freed already
        return None
    if not isinstance(saved, torch.Tensor) or saved.numel() != 1:
        return None
    return saved.data_ptr()


def _scaled_by(scaler: Any) -> bool:
    """Whether the backward under way started from a loss this scaler
    scaled (_note_roots read what each root was multiplied by)."""
    scale = getattr(scaler, "_scale", None)
    return isinstance(scale, torch.Tensor) and scale.data_ptr() in getattr(_open, "scales", ())


def check_scaler(scaler: Any) -> None:
    if scaler is None:
        return
    needed = ("get_scale", "is_enabled", "state_dict", "load_state_dict", "scale", "step", "update")
    if not all(callable(getattr(scaler, name, None)) for name in needed):
        raise TypeError("scaler must be the loop's torch.amp.GradScaler (or one with its get_scale, is_enabled, "
                        f"state_dict and load_state_dict), got {type(scaler).__name__}")


class ScalerWatch:
    """The loss scaler of a session: given to start(), set by a trainer
    adapter (Lightning's precision plugin), or found among the process's
    objects when a check first trips. Reports its scale."""

    def __init__(self, scaler: Any = None):
        self.scaler = scaler
        self._searched = scaler is not None
        self._said = False

    def _search(self) -> None:
        # The loop's scaler is the one that scaled the loss this backward
        # started from; another loop's scaler (or one left from an earlier
        # run) is never taken for it.
        self._searched = True
        found = [o for o in gc.get_objects() if _is_scaler(o) and _scaled_by(o)]
        if found:
            self.scaler = found[0]
            print("[nansense] found the loop's torch.amp.GradScaler (it scaled the loss): its overflows are counted, "
                  "not taken for errors; pass it as nansense.start(..., scaler=scaler) to say so yourself (and have "
                  "capsules and checkpoints hold its state)", file=sys.stderr)
        else:
            # loss * a tensor: perhaps a loss scaler nansense does not know.
            print("[nansense] the loss this backward started from was multiplied by a tensor, as a loss scaler does, "
                  "but no torch.amp.GradScaler did it: if the loop scales its loss, pass the scaler as "
                  "nansense.start(..., scaler=scaler) (one with get_scale, is_enabled, state_dict and "
                  "load_state_dict), or its overflows are taken for errors", file=sys.stderr)

    def read(self) -> Optional[float]:
        """The scale, or None when no enabled scaler is in use."""
        if self.scaler is None and not self._searched:
            # Looked for when a check first trips (the engine asks from
            # inside backward), not on the periodic reads: a loop that never
            # trips never pays for the search, nor hears of another's scaler.
            if getattr(torch._C, "_current_graph_task_id", lambda: 0)() < 0:
                return None
            # Only a loss multiplied by a tensor can be a scaler's.
            if not any(ptr is not None for ptr in getattr(_open, "scales", ())):
                return None
            self._search()
        scaler = self.scaler
        if scaler is None or not scaler.is_enabled():
            return None
        # Before the loop's first scale() the scaler has no scale yet.
        if getattr(scaler, "_scale", True) is None:
            return None
        return float(scaler.get_scale())

    def state(self) -> Optional[dict]:
        return self.scaler.state_dict() if self.scaler is not None else None

    def load(self, state: Optional[dict]) -> None:
        if state and self.scaler is not None:
            self.scaler.load_state_dict(state)


# ---------------------------------------------------------------- torch.compile


def unwrap_compiled(model: Any) -> Any:
    """The module torch.compile(model) wraps (OptimizedModule._orig_mod)."""
    inner = getattr(model, "_orig_mod", None)
    while isinstance(inner, torch.nn.Module) and type(model).__name__ == "OptimizedModule":
        model, inner = inner, getattr(inner, "_orig_mod", None)
    return model


def module_path(path: str) -> str:
    """A module path with torch.compile's wrapper left out: a submodule
    compiled in place ("encoder._orig_mod.layer") is named as the user named
    it ("encoder.layer")."""
    if "_orig_mod" not in path:
        return path
    return ".".join(part for part in path.split(".") if part != "_orig_mod")


def runs_compiled(wrapper: Any, model: torch.nn.Module) -> bool:
    """Whether calling the model runs torch.compile'd code: it was given
    compiled (torch.compile(model)) or compiled in place (model.compile())."""
    if wrapper is not model and type(wrapper).__name__ == "OptimizedModule":
        return True
    return getattr(model, "_compiled_call_impl", None) is not None


class Eager:
    """torch.compiler.set_stance("force_eager") while held: captured
    batches, the traced re-run, pauses (probes, experiments) run PyTorch's
    own ops, which the engine observes; the other batches run compiled."""

    _unavailable = False  # said once per process

    def __init__(self):
        self._stance = None

    def hold(self) -> None:
        if self._stance is not None or Eager._unavailable:
            return
        try:
            self._stance = torch.compiler.set_stance("force_eager")
        except (AttributeError, RuntimeError) as e:
            # torch before 2.6 has no stance: captured batches of a compiled
            # model then show only what its compiled code calls.
            Eager._unavailable = True
            print(f"[nansense] captured batches of this compiled model run compiled, not eagerly "
                  f"(torch.compiler.set_stance: {type(e).__name__}: {e}): they show the ops its compiled code calls, "
                  "not the fused ones; PyTorch 2.6 or later runs them eagerly", file=sys.stderr)

    def release(self) -> None:
        stance, self._stance = self._stance, None
        if stance is not None:
            stance.__exit__(None, None, None)
