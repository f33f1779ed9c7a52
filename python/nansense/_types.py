"""The values the session hands out: positions, modes, snapshots, the
numerical checks' settings and errors. Immutable dataclasses, as in the
reference API."""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field
from collections.abc import Callable
from typing import Any, Optional, Protocol, overload

import torch

from . import _nansense


class Mode(enum.StrEnum):
    """How training proceeds after a resume (Session.mode). Each is named
    after the command that sets it, as over HTTP and MCP.

    The reference API's names are the same members under their own names:
    STEP is STEP_BATCH (pause on every batch), UNTIL_PHASE_CHANGE is
    STEP_PHASE, UNTIL_EPOCH_CHANGE is STEP_EPOCH, UNTIL_POSITION is
    RUN_UNTIL and UNTIL_END is RUN, so ``session.mode == Mode.STEP`` holds
    exactly when ``session.mode == Mode.STEP_BATCH`` does. Their values are
    ours ("step_batch", ...); Mode("step") and the reference's other values
    are accepted too."""

    STEP_BATCH = "step_batch"
    STEP_PHASE = "step_phase"
    STEP_EPOCH = "step_epoch"
    RUN_UNTIL = "run_until"
    RUN = "run"
    DETACH = "detach"
    # The reference's names: aliases of the members above (same value).
    STEP = "step_batch"
    UNTIL_PHASE_CHANGE = "step_phase"
    UNTIL_EPOCH_CHANGE = "step_epoch"
    UNTIL_POSITION = "run_until"
    UNTIL_END = "run"

    @classmethod
    def _missing_(cls, value: object) -> Optional["Mode"]:
        # The reference's values name the same modes.
        return {"step": cls.STEP_BATCH, "until_phase_change": cls.STEP_PHASE,
                "until_epoch_change": cls.STEP_EPOCH, "until_position": cls.RUN_UNTIL,
                "until_end": cls.RUN}.get(value) if isinstance(value, str) else None


class RunState(enum.StrEnum):
    """Where the training side of a session stands (Session.state)."""

    RUNNING = "running"
    PAUSED = "paused"
    FINISHED = "finished"
    LOST = "lost"


@dataclass(frozen=True)
class BatchPosition:
    """Where a batch sits in the run: phase, 0-indexed epoch and batch_idx.
    The is_last_* flags are best effort in a schedule still being learned."""

    phase: str
    epoch: int
    batch_idx: int
    is_last_in_phase: bool = False
    is_last_in_epoch: bool = False
    is_last_in_run: bool = False

    @property
    def is_last_overall(self) -> bool:
        """The reference's name for is_last_in_run: the run's last batch."""
        return self.is_last_in_run

    @overload
    @classmethod
    def _of(cls, p: _nansense.BatchPosition) -> "BatchPosition": ...

    @overload
    @classmethod
    def _of(cls, p: None) -> None: ...

    @classmethod
    def _of(cls, p: Optional[_nansense.BatchPosition]) -> Optional["BatchPosition"]:
        if p is None:
            return None
        return cls(phase=p.phase, epoch=p.epoch, batch_idx=p.batch_idx, is_last_in_phase=p.is_last_in_phase,
                   is_last_in_epoch=p.is_last_in_epoch, is_last_in_run=p.is_last_in_run)

    # From a position in the wire's JSON (a controller reply, the rank
    # protocol), where batch_idx may be spelled batch.
    @overload
    @classmethod
    def _from(cls, d: dict) -> "BatchPosition": ...

    @overload
    @classmethod
    def _from(cls, d: None) -> None: ...

    @classmethod
    def _from(cls, d: Optional[dict]) -> Optional["BatchPosition"]:
        if d is None:
            return None
        return cls(
            phase=d["phase"],
            epoch=int(d["epoch"]),
            batch_idx=int(d.get("batch_idx", d.get("batch", 0))),
            is_last_in_phase=bool(d.get("is_last_in_phase", False)),
            is_last_in_epoch=bool(d.get("is_last_in_epoch", False)),
            is_last_in_run=bool(d.get("is_last_in_run", False)),
        )


@dataclass(frozen=True)
class BatchSnapshot:
    """Immutable per-batch view, on the CPU: independent copies taken when the
    batch was captured (weights after the optimizer step). Treat the tensors
    as read-only.

    activations / activation_gradients are keyed by layer name (the
    architecture graph's: Python module paths such as "features.0", and
    fx-style names for parameterless ops); weights / weight_gradients by
    parameter name, matching model.named_parameters(). custom_activations
    (layer -> instrument -> tensor) and custom_weight_tensors (parameter ->
    instrument -> tensor) hold the tensor instruments' outputs
    (Session.watch_layer_tensor / watch_weight_tensor)."""

    position: BatchPosition
    sequence: int
    layer_names: list[str]
    activations: dict[str, torch.Tensor]
    activation_gradients: dict[str, torch.Tensor]
    weights: dict[str, torch.Tensor]
    weight_gradients: dict[str, torch.Tensor]
    optimizer_state: dict[str, dict[str, torch.Tensor]]
    optimizer_hyperparams: dict[str, dict[str, float]]
    inputs: list[torch.Tensor]
    custom_activations: dict[str, dict[str, torch.Tensor]] = field(default_factory=dict)
    custom_weight_tensors: dict[str, dict[str, torch.Tensor]] = field(default_factory=dict)

    @classmethod
    def _of(cls, s: Optional[_nansense.BatchSnapshot]) -> Optional["BatchSnapshot"]:
        if s is None:
            return None
        return cls(position=BatchPosition._of(s.position), sequence=s.sequence, layer_names=s.layer_names,
                   activations=s.activations, activation_gradients=s.activation_gradients, weights=s.weights,
                   weight_gradients=s.weight_gradients, optimizer_state=s.optimizer_state,
                   optimizer_hyperparams=s.optimizer_hyperparams, inputs=s.inputs,
                   custom_activations=s.custom_activations, custom_weight_tensors=s.custom_weight_tensors)


@dataclass(frozen=True)
class DebugSettings:
    """Configuration of the numerical checks (Session.set_debug_settings, the
    UI's gear menu).

    interval is the batch cadence (1 = every batch). check_nan_inf scans
    activations and gradients for NaN/Inf; check_under_over trips when more
    than threshold (a fraction of summed |grad|) lands in the dtype's
    subnormal/overflow band. enabled is the master switch. trace_interval
    also traces every n-th batch at op level (0: never; tripped batches are
    re-run traced when rerun_to_trace). allow lists op or layer names whose
    non-finite values are intended. capsule_dir is where NaN capsules go."""

    enabled: bool = True
    interval: int = 1
    check_nan_inf: bool = True
    check_under_over: bool = True
    threshold: float = 0.1
    trace_interval: int = 0
    rerun_to_trace: bool = True
    allow: tuple[str, ...] = ()
    capsule_dir: str = "nansense_capsules"

    def __post_init__(self) -> None:
        for name in ("enabled", "check_nan_inf", "check_under_over", "rerun_to_trace"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"DebugSettings.{name} must be a bool, got {getattr(self, name)!r}")
        for name in ("interval", "trace_interval"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int):
                raise TypeError(f"DebugSettings.{name} must be an int, got {v!r}")
        if self.interval < 1:
            raise ValueError(f"DebugSettings.interval must be >= 1 (1 checks every batch), got {self.interval}")
        if self.trace_interval < 0:
            raise ValueError(f"DebugSettings.trace_interval must be >= 0 (0: never), got {self.trace_interval}")
        if isinstance(self.threshold, bool) or not isinstance(self.threshold, (int, float)):
            raise TypeError(f"DebugSettings.threshold must be a number, got {self.threshold!r}")
        if not (0 < self.threshold <= 1) or math.isnan(self.threshold):
            raise ValueError(f"DebugSettings.threshold must be in (0, 1], got {self.threshold}")
        if isinstance(self.allow, str) or not all(isinstance(a, str) for a in self.allow):
            raise TypeError(f"DebugSettings.allow must be a sequence of op or layer names, got {self.allow!r}")
        object.__setattr__(self, "allow", tuple(self.allow))

    def any_check(self) -> bool:
        """Whether at least one check would run (master + one sub-toggle)."""
        return self.enabled and (self.check_nan_inf or self.check_under_over)

    def _to_engine(self) -> dict:
        return {
            "enabled": self.enabled,
            "interval_batches": self.interval,
            "check_nan_inf": self.check_nan_inf,
            "check_under_over": self.check_under_over,
            "threshold_fraction": float(self.threshold),
            "trace_interval_batches": self.trace_interval,
            "rerun_to_trace": self.rerun_to_trace,
            "allow": list(self.allow),
            "capsule_dir": self.capsule_dir,
        }

    @classmethod
    def _from_engine(cls, d: dict) -> "DebugSettings":
        return cls(
            enabled=d["enabled"],
            interval=d["interval_batches"],
            check_nan_inf=d["check_nan_inf"],
            check_under_over=d["check_under_over"],
            threshold=d["threshold_fraction"],
            trace_interval=d["trace_interval_batches"],
            rerun_to_trace=d["rerun_to_trace"],
            allow=tuple(d["allow"]),
            capsule_dir=d["capsule_dir"],
        )


@dataclass(frozen=True)
class LayerReport:
    """Per-layer fractions for one detected error (a row of the dialog's
    table). nan / inf are fractions of element count; underflow / overflow
    fractions of the layer's summed |grad|; dtype the gradient dtype the bands
    were measured against, a torch.dtype (its finfo's tiny and max are the
    band edges; None when no floating-point gradient was scanned)."""

    layer: str
    nan: float
    inf: float
    underflow: float
    overflow: float
    dtype: Optional[torch.dtype]
    sources: tuple[str, ...] = ()

    @property
    def dtype_name(self) -> Optional[str]:
        """dtype as the engine, HTTP and MCP spell it ("float16", ...)."""
        return None if self.dtype is None else str(self.dtype).removeprefix("torch.")


def _torch_dtype(name: Optional[str]) -> Optional[torch.dtype]:
    """The torch.dtype the engine's dtype name stands for (None stays None)."""
    if not name:
        return None
    dtype = getattr(torch, name, None)
    return dtype if isinstance(dtype, torch.dtype) else None


@dataclass(frozen=True)
class DebugError:
    """An immutable record of one detected numerical error.

    position is the batch it was first detected on; reasons the subset of
    "nan", "inf", "underflow", "overflow" that tripped; checks_used the
    categories that ran; layers the affected layers in graph order.
    root_cause (a dict: status, summary, producer op with its layer, pass,
    shapes and input ranges, the first propagators) names the op that made
    the first non-finite value; capsule the NaN capsule written for it.
    rerun: the batch tripped untraced and ran again from the recorded state,
    traced, so your loop body ran it twice (session.rerunning was True in the
    second run). loss_scale: set when the error is a collapsing loss scale
    (a GradScaler skipping step after step): how it collapsed.
    trainer_step: set under a trainer adapter (nansense.transformers), the
    step in the trainer's words: {"global_step", "micro_batches",
    "micro_batch"}, micro_batch the 0-based micro-batch the checks tripped
    in (None: at the optimizer step, after the last)."""

    position: BatchPosition
    reasons: tuple[str, ...]
    checks_used: tuple[str, ...]
    layers: tuple[LayerReport, ...]
    root_cause: Optional[dict[str, Any]] = None
    capsule: Optional[str] = None
    hits: int = 1
    update: Optional[str] = None
    text: str = ""
    rerun: bool = False
    loss_scale: Optional[str] = None
    trainer_step: Optional[dict[str, Any]] = None

    @classmethod
    def _from(cls, d: Optional[dict]) -> Optional["DebugError"]:
        if d is None:
            return None
        return cls(
            position=BatchPosition._from(d["position"]),
            reasons=tuple(d["reasons"]),
            checks_used=tuple(d["checks_used"]),
            layers=tuple(
                LayerReport(
                    layer=r["layer"],
                    nan=r["nan"],
                    inf=r["inf"],
                    underflow=r["underflow"],
                    overflow=r["overflow"],
                    dtype=_torch_dtype(r["dtype"]),
                    sources=tuple(r["sources"]),
                )
                for r in d["layers"]
            ),
            root_cause=d.get("root_cause"),
            capsule=d.get("capsule"),
            hits=int(d.get("hits", 1)),
            update=d.get("update"),
            text=d.get("text", ""),
            rerun=bool(d.get("rerun", False)),
            loss_scale=d.get("loss_scale"),
            trainer_step=d.get("trainer_step"),
        )



@dataclass(frozen=True)
class LossScaleStatus:
    """The mixed-precision loss scaler (torch.amp.GradScaler) as the guard
    counts it. in_use: a scaler is known and enabled; scale: the scale last
    read; skipped_steps: steps the scaler skipped because its scaled
    gradients overflowed (not errors); skips_in_row: how many of them in a
    row up to the last checked batch; last_skipped: where the last was. A
    collapse (collapse_skips in a row, or a scale below floor) is an error."""

    in_use: bool = False
    scale: Optional[float] = None
    skipped_steps: int = 0
    skips_in_row: int = 0
    last_skipped: Optional[BatchPosition] = None
    collapse_skips: int = 24
    floor: float = 1.0

    @classmethod
    def _from(cls, d: dict) -> "LossScaleStatus":
        return cls(in_use=d["in_use"], scale=d["scale"], skipped_steps=d["skipped_steps"],
                   skips_in_row=d["skips_in_row"],
                   last_skipped=BatchPosition._from(d["last_skipped"]) if d["last_skipped"] else None,
                   collapse_skips=d["collapse_skips"], floor=d["floor"])


@dataclass(frozen=True)
class TimeTravelStatus:
    """Whether and where time travel can jump. available is False when no
    session.epochs() loop runs (reason says why); cached_epochs are the
    epochs with a loadable checkpoint; total_epochs the run's epoch count."""

    available: bool
    reason: str = ""
    cached_epochs: tuple[int, ...] = ()
    total_epochs: int = 0
    current_epoch: Optional[int] = None
    pending_epoch: Optional[int] = None
    cache_dir: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "cached_epochs", tuple(self.cached_epochs))

    @classmethod
    def _of(cls, s: _nansense.TimeTravelStatus) -> "TimeTravelStatus":
        return cls(available=s.available, reason=s.reason, cached_epochs=tuple(s.cached_epochs),
                   total_epochs=s.total_epochs, current_epoch=s.current_epoch, pending_epoch=s.pending_epoch,
                   cache_dir=s.cache_dir)


class Schedule:
    """The run's shape: its epoch count and its phases' batch counts.

    Session.schedule is a live view of the session's schedule, read when
    asked. ``Schedule(epochs=10, phases={"train": 938, "val": 157})`` makes
    a standalone value of the same type, as the reference allows (phases
    given up front are the declared mode; without them the phases are
    learned as the loop runs).

    epochs is the epoch count (None until declared); phases maps each phase
    whose batch count is known to it, in first-seen order (all of them up
    front in a declared schedule; learned as each phase ends otherwise);
    phase_order lists every phase seen, counted or not."""

    _read: Callable[[], "_ScheduleValue"]
    _write: Optional[Callable[[Optional[int], Optional[dict[str, int]]], None]]
    _own: Optional["_ScheduleRead"]

    def __init__(self, epochs: Optional[int] = None, phases: Optional[dict[str, int]] = None):
        own = _ScheduleRead()
        self._read = lambda: own
        self._write = None
        self._own = own
        self.update(epochs=epochs, phases=phases)

    @classmethod
    def _view(cls, read: Callable[[], "_ScheduleValue"],
              write: Optional[Callable[[Optional[int], Optional[dict[str, int]]], None]] = None) -> "Schedule":
        """A live view: read() returns the engine's schedule as read now (the
        native module's ScheduleRead, or a _ScheduleRead); write(epochs,
        phases) re-declares it (Session.set_schedule)."""
        view = cls.__new__(cls)
        view._read, view._write, view._own = read, write, None
        return view

    @property
    def epochs(self) -> Optional[int]:
        return self._read().epochs

    @property
    def phases(self) -> dict[str, int]:
        return dict(self._read().phases)

    @property
    def phase_order(self) -> list[str]:
        return list(self._read().phase_order)

    def phase_count(self, phase: str) -> Optional[int]:
        """The batch count of `phase`, or None while it is not known."""
        return dict(self._read().phases).get(phase)

    def set_epochs(self, n: int) -> None:
        """Set the epoch count."""
        self.update(epochs=n)

    def update(self, *, epochs: Optional[int] = None, phases: Optional[dict[str, int]] = None) -> None:
        """Re-declare the epoch count and/or the phases (name -> batch count);
        an argument left None keeps that part. On Session.schedule this is
        Session.set_schedule."""
        if epochs is not None and (isinstance(epochs, bool) or not isinstance(epochs, int) or epochs < 1):
            raise ValueError(f"epochs must be an int >= 1, got {epochs!r}")
        if phases is not None:
            if not isinstance(phases, dict) or not phases:
                raise TypeError(f'phases must be a non-empty dict of phase name -> batch count, got {phases!r}')
            for name, count in phases.items():
                if not isinstance(name, str) or not name:
                    raise TypeError(f"phase names must be non-empty strings, got {name!r}")
                if isinstance(count, bool) or not isinstance(count, int) or count < 1:
                    raise ValueError(f"phases[{name!r}] must be an int >= 1, got {count!r}")
        if self._own is None:
            if self._write is None:
                raise RuntimeError("this schedule view is read-only")
            self._write(epochs, phases)
            return
        if epochs is not None:
            self._own.epochs = epochs
        if phases is not None:
            self._own.phases = list(phases.items())
            self._own.phase_order = list(phases)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Schedule):
            return NotImplemented
        return (self.epochs, self.phases, self.phase_order) == (other.epochs, other.phases, other.phase_order)

    __hash__ = None  # type: ignore[assignment]  # a view changes as the run goes on

    def __repr__(self) -> str:
        return f"Schedule(epochs={self.epochs}, phases={self.phases}, phase_order={self.phase_order})"


class _ScheduleValue(Protocol):
    """What a Schedule reads: the native module's ScheduleRead or a
    _ScheduleRead."""

    @property
    def epochs(self) -> Optional[int]: ...

    @property
    def phases(self) -> list[tuple[str, int]]: ...

    @property
    def phase_order(self) -> list[str]: ...


class _ScheduleRead:
    """A standalone Schedule's own value, in the shape of the native
    module's ScheduleRead: epochs, phases as (name, count) pairs in order,
    phase_order."""

    def __init__(self) -> None:
        self.epochs: Optional[int] = None
        self.phases: list[tuple[str, int]] = []
        self.phase_order: list[str] = []
