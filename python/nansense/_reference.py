"""The reference API's own names on nansense.Session, beside ours.

A script written for the original package (NaNsense 0.4.0) calls stop(),
step_run(), step_until_position(...), request_snapshot(),
wait_until_paused(...) and reads closed, training_lost, current_weights()
and the like. They are here, each as the same operation as ours (pause(),
run(), run_until(...), refresh(), wait_until_stopped(...)) or as a view
built on what the engine already reports. A mixin of nansense.Session (see
_session.py); every method is a no-op, or returns an empty value, on a
disabled session, as the reference's are."""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Optional

import torch

from ._guards import refused_when_locked, when_enabled
from ._stats import LayerStatsSnapshot, StatsScope, TensorStatsSnapshot, WatchSnapshot, histogram_edges
from ._state import optimizer_reader
from ._types import RunState


def _whole(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    if value < 0:
        raise ValueError(f"{name} must be >= 0, got {value}")
    return int(value)


class _ReferenceMethods:
    """Mixed into nansense.Session. Needs self._engine, self._model,
    self._optimizer, self._closed and Session's own run-control methods."""

    _engine: Any
    _model: Any
    _optimizer: Any
    _scheduler: Any
    _closed: bool
    _module_paths: dict[int, str]

    if TYPE_CHECKING:
        # Session's own methods and properties, which these methods call.
        def _is_locked(self) -> bool: ...
        def pause(self) -> None: ...
        def refresh(self) -> None: ...
        def run(self) -> None: ...
        def run_until(self, *, phase: str, epoch: int, batch_idx: int) -> None: ...
        def wait_until_stopped(self, timeout: float) -> RunState: ...
        def set_stats_scope(self, scope: Any) -> None: ...
        def watch_snapshot(self, *, layers: Optional[Iterable[str]] = None,
                           include_patches: bool = True) -> WatchSnapshot: ...

        @property
        def layer_names(self) -> list[str]: ...

        @property
        def schedule(self) -> Any: ...

        @property
        def snapshot(self) -> Any: ...

        @property
        def state(self) -> RunState: ...

        @property
        def stats_scope(self) -> StatsScope: ...

        @property
        def watched_layers(self) -> frozenset[str]: ...

    # ---- run control under the reference's names

    def stop(self) -> None:
        """Pause at the next batch boundary (the reference's name for pause())."""
        self.pause()

    def step_run(self) -> None:
        """Run to the last batch of the run and pause there (the reference's
        name for run())."""
        self.run()

    def request_snapshot(self) -> None:
        """Capture and publish the next batch without pausing (the
        reference's name for refresh(), the UI's Refresh button)."""
        self.refresh()

    @refused_when_locked()
    def step_until_position(self, *, phase_index: int, epoch: int, batch_idx: int) -> None:
        """Run until the batch at (phase_index, epoch, batch_idx) and pause
        there. phase_index is the phase's place in the epoch's phase order
        (0 = the first phase), as Session.schedule.phase_order lists it; the
        same as run_until(phase=schedule.phase_order[phase_index], ...).
        Raises ValueError for a phase index the run has not reached yet
        (run_until names a phase the loop has not started yet the same way:
        once the loop has seen it)."""
        _whole("phase_index", phase_index)
        _whole("epoch", epoch)
        _whole("batch_idx", batch_idx)
        if not self._engine:
            return
        order = self.schedule.phase_order
        if phase_index >= len(order):
            raise ValueError(f"phase_index {phase_index} is not a phase the run has seen yet; the phases so far are "
                             f"{order} (run_until(phase=..., ...) names one by name)")
        self.run_until(phase=order[phase_index], epoch=epoch, batch_idx=batch_idx)

    def wait_until_paused(self, *, after_pauses: int = 0, timeout: Optional[float] = None) -> bool:
        """Block until the loop has paused more than after_pauses times in
        all (see pause_count), or the session has closed or lost its loop:
        True then, False when timeout seconds (None: no limit) passed first.
        Read pause_count before a command and pass it to wait for the pause
        that command leads to::

            seen = session.pause_count
            session.step_batch()
            session.wait_until_paused(after_pauses=seen, timeout=10)

        Never call it from the training thread. A disabled session never
        pauses: it returns whether the session was closed, at once."""
        _whole("after_pauses", after_pauses)
        if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, numbers.Real)
                                    or not timeout >= 0):
            raise ValueError(f"timeout must be a number of seconds >= 0 or None, got {timeout!r}")
        if not self._engine:
            return self._closed
        return bool(self._engine.wait_until_paused(after_pauses, None if timeout is None else float(timeout)))

    @property
    @when_enabled(0)
    def pause_count(self) -> int:
        """How many times the loop has paused so far (0 on a disabled
        session): the count wait_until_paused(after_pauses=...) waits past."""
        return int(self._engine.pause_count())

    # ---- where the training side stands

    @property
    def optimizer(self) -> Any:
        """The optimizer given to start() (None when none was)."""
        return self._optimizer

    @property
    def scheduler(self) -> Any:
        """The LR scheduler given to start() (None when none was)."""
        return self._scheduler

    @property
    def closed(self) -> bool:
        """Whether close() was called (the training side is over; a served UI
        stays up)."""
        return self._closed or (bool(self._engine) and self.state == RunState.FINISHED)

    @property
    def is_running(self) -> bool:
        """Whether the training thread is advancing batches: False while it
        is paused, and once the session is closed or its loop lost."""
        if not self._engine:
            return not self._closed
        return self.state == RunState.RUNNING and not self._closed

    @property
    @when_enabled(False)
    def training_lost(self) -> bool:
        """Whether the training loop ended without close(): it raised (see
        training_error), or the session was dropped mid-run."""
        return self.state == RunState.LOST

    @property
    def training_error(self) -> Optional[str]:
        """Why the training loop was lost, or None while it is not: the
        exception ("ValueError: ...") when it was raised at a batch
        boundary; for one raised in the loop's body, which Python does not
        show to the loop's iterator, where it was raised ("the training loop
        raised an exception during epoch 0 | train batch 1")."""
        if not self.training_lost:
            return None
        return self.__dict__.get("_training_error") or "the training loop ended without session.close()"

    # ---- the model, read live (any thread)

    def current_weights(self) -> dict[str, torch.Tensor]:
        """CPU copies of the model's parameters as they are now, keyed as
        model.named_parameters(). Read while training runs, a copy may mix
        two steps' values: fine for a look, not for a checkpoint."""
        return {name: p.detach().to("cpu", copy=True) for name, p in self._model.named_parameters()}

    def current_weight_gradients(self) -> dict[str, torch.Tensor]:
        """CPU copies of the parameters' .grad as they are now (parameters
        without a gradient are left out)."""
        return {name: p.grad.detach().to("cpu", copy=True) for name, p in self._model.named_parameters()
                if p.grad is not None}

    def current_optimizer_state(self) -> dict[str, dict[str, torch.Tensor]]:
        """The optimizer's per-parameter state as it is now: parameter name
        -> state key -> CPU tensor (numbers as 0-dim tensors). Empty without
        an optimizer given to start(), or before its first step."""
        return self._optimizer_views()[0]

    def current_optimizer_hyperparams(self) -> dict[str, dict[str, float]]:
        """Each parameter's optimizer group's numeric hyperparameters as they
        are now (lr, momentum, ...; Adam's betas as beta1 and beta2). Empty
        without an optimizer given to start()."""
        return self._optimizer_views()[1]

    def _optimizer_views(self) -> tuple[dict, dict]:
        if self._optimizer is None:
            return {}, {}
        return optimizer_reader(self._model, self._optimizer)()

    # ---- the layers

    def _module_layers(self) -> dict[str, torch.nn.Module]:
        modules = dict(self._model.named_modules())
        return {name: modules[name] for name in self.layer_names if name in modules}

    @property
    def layer_info(self) -> dict[str, str]:
        """Layer name -> its module's signature as print(model) shows it
        ("Conv2d(1, 4, kernel_size=(3, 3), stride=(1, 1))"); "" for the
        layers no module is (graph inputs, parameterless ops)."""
        modules = self._module_layers()
        out = {}
        for name in self.layer_names:
            m = modules.get(name)
            out[name] = f"{type(m).__name__}({m.extra_repr()})" if m is not None else ""
        return out

    @property
    def layer_weights(self) -> dict[str, list[str]]:
        """Layer name -> the names of the parameters it uses (keys of
        BatchSnapshot.weights); empty for layers without parameters."""
        modules = self._module_layers()
        return {name: [p for p, _ in modules[name].named_parameters(prefix=name)] if name in modules else []
                for name in self.layer_names}

    @property
    @when_enabled(make=list)
    def input_names(self) -> list[str]:
        """The layer names the model's inputs have ("input", "input_1", ...
        in order), once the first batch was traced."""
        modules = set(self._module_paths.values())
        return [n for n in self.layer_names if n not in modules
                and (n == "input" or (n.startswith("input_") and n[6:].isdigit()))]

    # ---- statistics

    @property
    @when_enabled(make=frozenset)
    def stats_layers(self) -> frozenset[str]:
        """The layers whose statistics are collected now or kept from before
        (what the Stats page offers)."""
        scope = self.stats_scope
        now = set(self.layer_names) if scope == StatsScope.ALL else (
            set(self.watched_layers) if scope == StatsScope.WATCHED else set())
        kept = {layer for layer, _, _ in self.watch_snapshot(include_patches=False).stats}
        return frozenset(now | kept)

    def stats_phases(self, layer: Optional[str] = None) -> frozenset[str]:
        """The phases with kept statistics, of `layer` or of any layer."""
        if layer is not None and not isinstance(layer, str):
            raise TypeError(f"layer must be a layer name or None, got {layer!r}")
        snap = self.watch_snapshot(include_patches=False, layers=None if layer is None else [layer])
        return frozenset(phase for _, phase, _ in snap.stats)

    @when_enabled(False)
    def toggle_stats_collecting(self) -> bool:
        """Stop collecting statistics (scope NONE, what was collected stays)
        or go back to the scope collected before; returns whether it
        collects now. Changes nothing on a locked session."""
        if not self._is_locked():
            scope = self.stats_scope
            if scope == StatsScope.NONE:
                self.set_stats_scope(self.__dict__.get("_scope_before_toggle", StatsScope.WATCHED))
            else:
                self.__dict__["_scope_before_toggle"] = scope
                self.set_stats_scope(StatsScope.NONE)
        return self.stats_scope != StatsScope.NONE

    def current_batch_stats(self, *, layers: Iterable[str], include_patches: bool = True) -> WatchSnapshot:
        """Statistics of the last published batch alone, for any layers
        (watched or not), keyed by the batch's (layer, phase, epoch) like
        watch_snapshot(): the Stats page's "Current batch". Computed here
        from Session.snapshot (no Min/Max patches: include_patches is
        accepted for the reference's signature). Empty before the first
        capture."""
        if isinstance(layers, str) or not isinstance(layers, Iterable):
            raise TypeError(f"layers must be an iterable of layer names, got {layers!r}")
        wanted = list(layers)
        if not isinstance(include_patches, bool):
            raise TypeError(f"include_patches must be a bool, got {include_patches!r}")
        snap = self.snapshot
        if snap is None:
            return WatchSnapshot()
        pos = snap.position
        out = {}
        for layer in wanted:
            act = snap.activations.get(layer)
            grad = snap.activation_gradients.get(layer)
            if act is None and grad is None:
                continue
            out[(layer, pos.phase, pos.epoch)] = LayerStatsSnapshot(
                layer=layer, phase=pos.phase, epoch=pos.epoch, batches=1,
                activations=_one_tensor_stats(act), gradients=_one_tensor_stats(grad))
        return WatchSnapshot(stats=out, sequence=snap.sequence)


def _bin_centre(lo: float, hi: float) -> float:
    if lo < 0 < hi or lo == 0 or hi == 0:
        return 0.0
    centre = math.sqrt(abs(lo) * abs(hi))
    return centre if hi > 0 else -centre


def _one_tensor_stats(t: Optional[torch.Tensor]) -> Optional[TensorStatsSnapshot]:
    """One tensor's statistics in the accumulators' terms (the same bins)."""
    if t is None or not t.is_floating_point():
        return None
    x = t.detach().reshape(-1).to(torch.float64)
    finite = x[torch.isfinite(x)]
    edges = histogram_edges()
    inner = torch.tensor(edges[1:-1], dtype=torch.float64)
    bins = len(edges) - 1
    binned = torch.bucketize(x[~torch.isnan(x)], inner, right=True)
    hist = torch.bincount(binned, minlength=bins)[:bins].tolist()
    median = math.nan
    total = sum(hist)
    running = 0
    for i, count in enumerate(hist):
        running += count
        if total and 2 * running >= total:
            median = _bin_centre(edges[i], edges[i + 1])
            break
    channel_hists: tuple = ()
    dead: tuple = ()
    if t.dim() >= 2 and t.shape[1] > 0:
        channels = t.detach().transpose(0, 1).reshape(t.shape[1], -1).to(torch.float64)
        count = channels.shape[0]
        slot = torch.bucketize(channels, inner, right=True) + torch.arange(count).unsqueeze(1) * bins
        slot = slot[~torch.isnan(channels)]
        rows = [tuple(r) for r in torch.bincount(slot, minlength=count * bins).view(count, bins).tolist()]
        zero = next((i for i in range(bins) if edges[i] < 0 < edges[i + 1]), None)
        channel_hists = tuple(rows)
        if zero is not None:
            dead = tuple(c for c, row in enumerate(rows) if sum(row) and row[zero] == sum(row))
    return TensorStatsSnapshot(
        n=int(finite.numel()), sum=float(finite.sum()) if finite.numel() else 0.0,
        sum_sq=float(finite.square().sum()) if finite.numel() else 0.0,
        min=float(finite.min()) if finite.numel() else math.nan,
        max=float(finite.max()) if finite.numel() else math.nan,
        hist=tuple(hist), nan=int(torch.isnan(x).sum()), pos_inf=int(torch.isposinf(x).sum()),
        neg_inf=int(torch.isneginf(x).sum()), channel_hists=channel_hists, channels=len(channel_hists),
        dead_channels=dead, _median=median, _dead_count=len(dead) if channel_hists else None, dtype=t.dtype,
        binned=int(x.numel()))
