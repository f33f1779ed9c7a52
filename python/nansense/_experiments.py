"""Experiments on the paused model from Python, under the reference API's
names: request_experiment(), wait_for_experiment(), cancel_experiment(),
experiment_result_for() and the experiment_result / experiment_pending
reads.

The engine runs them (the same queue the UI and MCP use): a request is
queued from any thread and run on the training thread inside its pause, so
the training thread stays the only owner of live tensors, and each run is
isolated (eval mode, RNG forked, parameters' .grad untouched). A mixin of
nansense.Session (see _session.py)."""

from __future__ import annotations

import dataclasses
import numbers
from collections.abc import Mapping
from typing import Any, Optional

import torch

from . import _nansense
from ._guards import when_enabled
from ._types import BatchPosition


@dataclasses.dataclass(frozen=True)
class ExperimentResult:
    """An experiment's progress or outcome, every tensor on the CPU.

    done is False while it runs (a Deep Dream publishes about 20 steps on its
    way) and True at the end, also when it stopped early (step < total_steps;
    stop_reason says why: "cancelled", "time limit", "training resumed") or
    failed (error says why). On success a Deep Dream sets image (the dreamed
    inputs, one per channel in channels) and the attribution kinds set
    attribution (input-shaped, or Grad-CAM's map over the layer's
    positions); reference is the input batch it started from. objective is
    a Deep Dream's mean target activation at `step`.

    The first eleven fields are the reference's; stage ("queued", "running",
    "done", "stopped", "failed"), params (as resolved: the kind's defaults,
    the session's, then the request's), notes, stop_reason, seconds,
    channels, objectives, targets, target_values and attribution_sums are
    ours."""

    seq: int
    kind: str
    layer: str
    step: int
    total_steps: int
    done: bool
    error: Optional[str] = None
    image: Optional[torch.Tensor] = None
    attribution: Optional[torch.Tensor] = None
    reference: Optional[torch.Tensor] = None
    objective: Optional[float] = None
    stage: str = "queued"
    params: dict[str, object] = dataclasses.field(default_factory=dict)
    notes: tuple[str, ...] = ()
    stop_reason: Optional[str] = None
    seconds: float = 0.0
    channels: tuple[int, ...] = ()
    objectives: tuple[float, ...] = ()
    targets: tuple[int, ...] = ()
    target_values: tuple[float, ...] = ()
    attribution_sums: tuple[float, ...] = ()

    @classmethod
    def _of(cls, r: _nansense.ExperimentResult) -> "ExperimentResult":
        dream = r.kind == "deep_dream"
        return cls(seq=int(r.seq), kind=r.kind, layer=r.layer, step=int(r.step),
                   total_steps=int(r.total), done=bool(r.done), error=r.error or None,
                   image=r.images if dream else None, attribution=None if dream else r.attributions,
                   reference=r.start if dream else r.inputs, objective=r.objective,
                   stage=r.stage, params=dict(r.params or {}), notes=tuple(r.notes),
                   stop_reason=r.stop_reason or None, seconds=float(r.seconds),
                   channels=tuple(r.channels), objectives=tuple(r.objectives),
                   targets=tuple(r.targets), target_values=tuple(r.target_values),
                   attribution_sums=tuple(r.attribution_sums))


@dataclasses.dataclass(frozen=True)
class ProbeResult:
    """The probe's last completed run (Session.probe_result), every tensor a
    CPU copy: run counts the runs so far, position is the batch whose inputs
    it re-ran (the pinned one or the current one), activations are per
    layer (perturbed minus unperturbed when diff), inputs what it ran on,
    perturbations_applied how many perturbations fit; error says why the run
    failed (activations and inputs are then empty). A probe runs forward
    only: no gradients."""

    run: int
    position: BatchPosition
    activations: dict[str, torch.Tensor]
    inputs: tuple[torch.Tensor, ...]
    diff: bool = False
    perturbations_applied: int = 0
    error: Optional[str] = None

    @classmethod
    def _of(cls, r: _nansense.ProbeResult) -> "ProbeResult":
        return cls(run=int(r.run), position=BatchPosition._of(r.position),
                   activations=dict(r.activations or {}), inputs=tuple(r.inputs or ()),
                   diff=bool(r.diff), perturbations_applied=int(r.perturbations_applied),
                   error=r.error or None)


def _json_value(key: str, value: Any) -> Any:
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    if isinstance(value, (list, tuple)):
        return [_json_value(key, v) for v in value]
    raise TypeError(f"experiment parameter {key!r} must be a number, bool, string or a list of those, "
                    f"got {type(value).__name__}")


class _ExperimentMethods:
    """Mixed into nansense.Session. Needs self._engine and self._closed."""

    _engine: Any
    _closed: bool

    def request_experiment(self, *, kind: str, layer: str, params: Mapping[str, object]) -> int:
        """Queue an experiment on `layer` for the training thread to run: at
        once when the loop is paused, otherwise at its next pause. Requests
        (this script's, the UI's, MCP's) run in order; none replaces another
        (cancel_experiment(seq) stops one). params are the kind's parameters
        by key (list_experiments over HTTP/MCP, or the docs, name them);
        those not given keep their defaults, unknown keys are ignored.
        Returns the request's seq (experiment_result_for(seq) follows it).

        Raises ValueError (ArgumentError) for an unknown kind or layer, a
        layer the kind cannot use, or a bad parameter value, and ControlError
        before the first captured batch or once the session closed. A
        locked session clamps the parameters. Returns 0 on a disabled session
        (nothing runs)."""
        if not isinstance(kind, str) or not kind:
            raise TypeError(f'kind must be an experiment kind such as "deep_dream", got {kind!r}')
        if not isinstance(layer, str) or not layer:
            raise TypeError(f"layer must be a layer name, got {layer!r}")
        if not isinstance(params, Mapping):
            raise TypeError(f"params must be a dict of parameter values, got {type(params).__name__}")
        values = {}
        for key, value in params.items():
            if not isinstance(key, str):
                raise TypeError(f"experiment parameter names must be strings, got {key!r}")
            values[key] = _json_value(key, value)
        if not self._engine:
            return 0
        return int(self._engine.request_experiment(kind, layer, values).seq)

    def experiment_result_for(self, seq: int) -> Optional[ExperimentResult]:
        """Request `seq`'s progress or outcome as it stands; None for a seq
        never given out, or one whose result was dropped (the 8 most recent
        are kept)."""
        if isinstance(seq, bool) or not isinstance(seq, numbers.Integral):
            raise TypeError(f"seq must be an int, got {seq!r}")
        if not self._engine or seq < 1:
            return None
        r = self._engine.experiment_result(int(seq))
        return ExperimentResult._of(r) if r is not None else None

    @property
    @when_enabled(None)
    def experiment_result(self) -> Optional[ExperimentResult]:
        """The newest request's progress or outcome (None before the first)."""
        seq = self._engine.latest_experiment_seq()
        return self.experiment_result_for(seq) if seq else None

    @property
    @when_enabled(False)
    def experiment_pending(self) -> bool:
        """Whether a request is queued and not yet picked up."""
        return bool(self._engine.experiment_pending())

    def cancel_experiment(self, seq: Optional[int] = None) -> None:
        """Cancel request `seq` (queued: dropped; running: stopped at its next
        step), or every request with None. Others' requests are untouched
        when a seq is given; an unknown or finished seq changes nothing."""
        if seq is not None and (isinstance(seq, bool) or not isinstance(seq, numbers.Integral)):
            raise TypeError(f"seq must be an int or None, got {seq!r}")
        if self._engine and (seq is None or seq >= 1):
            self._engine.cancel_experiment(None if seq is None else int(seq))

    def wait_for_experiment(self, *, timeout: Optional[float] = None) -> bool:
        """Block until the newest request has finished (done, stopped or
        failed): True then, False when timeout seconds (None: no limit)
        passed first. With no request made yet there is nothing to wait
        for: it returns whether the session closed, at once. Never call it
        from the training thread (which runs the experiment)."""
        if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, numbers.Real)
                                    or not timeout >= 0):
            raise ValueError(f"timeout must be a number of seconds >= 0 or None, got {timeout!r}")
        if not self._engine:
            return self._closed
        seq = self._engine.latest_experiment_seq()
        if not seq:
            return self._closed
        return bool(self._engine.wait_for_experiment(seq, None if timeout is None else float(timeout)))
