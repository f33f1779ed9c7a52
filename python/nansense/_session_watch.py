"""The Session's watching surface: statistics settings and views, custom
instruments, probes on the paused model and experiment settings. A mixin of
nansense.Session (see _session.py); every method is a no-op, or returns an
empty view, on a disabled session."""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Callable, Optional, Union

from ._stats import (
    _REDUCES,
    MetricReduce,
    MetricsSnapshot,
    StatsScope,
    UpdateFrequency,
    WatchPerformance,
    WatchSnapshot,
    _Instruments,
)
from ._experiments import ProbeResult
from ._guards import refused_when_locked, when_enabled
from ._types import BatchPosition

_InstrumentFn = Callable[..., Any]


def _check_name(what: str, name: Any) -> str:
    if not isinstance(name, str):
        raise TypeError(f"{what} takes a name (str), got {type(name).__name__} {name!r}")
    if not name:
        raise ValueError(f"{what} needs a non-empty name (its chart's or strip's title)")
    return name


def _layer_list(what: str, layers: Any) -> list[str]:
    if isinstance(layers, str) or not isinstance(layers, Iterable):
        raise TypeError(f"{what} takes an iterable of layer names, got {type(layers).__name__} {layers!r}")
    out = list(layers)
    for layer in out:
        if not isinstance(layer, str):
            raise TypeError(f"{what}: layer names are strings, got {type(layer).__name__} {layer!r}")
    return out


def _opt(name: str, value: Any, kind: type, minimum: Optional[int] = None) -> Any:
    if value is None:
        return None
    if kind is bool:
        if not isinstance(value, bool):
            raise TypeError(f"{name} must be a bool, got {type(value).__name__} {value!r}")
        return value
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


class _WatchMethods:
    """Mixed into nansense.Session. Needs self._engine, self._model and
    self._optimizer."""

    _engine: Any
    _model: Any
    _optimizer: Any

    if TYPE_CHECKING:
        # Session's own properties, which these methods read.
        @property
        def layer_names(self) -> list[str]: ...

        @property
        def snapshot(self) -> Any: ...

    def _is_locked(self) -> bool:
        """Whether lock() was called: settings and probes become no-ops."""
        return bool(self._engine) and self._engine.locked()

    def _refuse_instruments_if_locked(self) -> None:
        if self._is_locked():
            raise RuntimeError("instruments cannot be registered on a locked session: register them, like every "
                               "other setting, before lock()")

    def _instruments(self) -> _Instruments:
        inst = self.__dict__.get("_instruments_")
        if inst is None:
            inst = _Instruments(self._model, self._optimizer)
            self.__dict__["_instruments_"] = inst
        return inst

    def _settings(self) -> dict:
        return self._engine.settings()

    # ---- which layers

    @property
    @when_enabled(make=frozenset)
    def watched_layers(self) -> frozenset[str]:
        """The watched layers' names (their cards show; under the WATCHED
        scope, also the ones whose statistics are collected)."""
        return frozenset(self._settings()["watched_layers"])

    @refused_when_locked(False)
    def watch(self, layer: str) -> bool:
        """Watch `layer` (a name of Session.layer_names). Returns False, and
        changes nothing, for a name the discovered layers lack; before the
        first capture names are kept and checked then."""
        if not isinstance(layer, str):
            raise TypeError(f"watch takes a layer name (str), got {type(layer).__name__} {layer!r}")
        if not self._engine:
            return False
        known = self.layer_names
        if known and layer not in known:
            return False
        self._engine.watch_layers([layer])
        return True

    @refused_when_locked()
    def unwatch(self, layer: str) -> None:
        """Stop watching `layer`. Under the WATCHED scope its statistics go
        with it; under ALL and NONE they stay."""
        if not isinstance(layer, str):
            raise TypeError(f"unwatch takes a layer name (str), got {type(layer).__name__} {layer!r}")
        if self._engine:
            self._engine.unwatch_layers([layer])

    @property
    @when_enabled(StatsScope.NONE)
    def stats_scope(self) -> StatsScope:
        """Which layers collect statistics (see StatsScope)."""
        return StatsScope(self._settings()["stats_scope"])

    @property
    @when_enabled(False)
    def stats_collecting(self) -> bool:
        """Whether batches are collected now (scope ALL, or WATCHED with a
        watched layer)."""
        return bool(self._settings()["stats_collecting"])

    @refused_when_locked()
    def set_stats_scope(self, scope: Union[StatsScope, str]) -> None:
        """Set which layers collect: "none", "watched" or "all". Narrowing to
        WATCHED drops what the other layers collected."""
        try:
            value = StatsScope(scope)
        except ValueError:
            raise ValueError(f'stats scope must be "none", "watched" or "all", got {scope!r}') from None
        if self._engine:
            self._engine.set_stats_scope(str(value))

    @refused_when_locked()
    def set_patch_layers(self, layers: Optional[Iterable[str]]) -> None:
        """Keep Min/Max patches (the extreme-input patches, by far the
        largest statistics state) only for `layers`; None: the watched ones.
        Histograms and graphs are unaffected. An unknown name raises
        ValueError once layers are discovered; patches already kept stay."""
        names = None if layers is None else _layer_list("set_patch_layers", layers)
        if not self._engine:
            return
        known = self.layer_names
        if names is not None and known:
            unknown = [n for n in names if n not in known]
            if unknown:
                raise ValueError(f"set_patch_layers: unknown layers {unknown}; the layers are {known}")
        self._engine.set_patch_layers(names)

    # ---- how often and how much

    @property
    @when_enabled(make=UpdateFrequency)
    def update_frequency(self) -> UpdateFrequency:
        """How often a running loop publishes without pausing."""
        f = self._settings()["update_frequency"]
        n = f["n"]
        return UpdateFrequency(unit=f["unit"], n=int(n) if float(n).is_integer() else n, phase=f.get("phase"))

    @refused_when_locked()
    def set_update_frequency(self, *, unit: str, n: Union[int, float] = 1, phase: Optional[str] = None) -> None:
        """Publish (capture statistics, refresh the UI) every n-th epoch
        (unit="epoch"), every n-th batch (unit="batch", of `phase` only when
        given) or every n seconds (unit="seconds"), without pausing."""
        if unit not in ("epoch", "batch", "seconds"):
            raise ValueError(f'unit must be "epoch", "batch" or "seconds", got {unit!r}')
        if isinstance(n, bool) or not isinstance(n, numbers.Real) or math.isnan(n):
            raise TypeError(f"n must be a number, got {type(n).__name__} {n!r}")
        if unit != "seconds" and (not float(n).is_integer() or n < 1):
            raise ValueError(f"n must be a whole number >= 1 for unit {unit!r}, got {n}")
        if unit == "seconds" and n <= 0:
            raise ValueError(f"n must be > 0 seconds, got {n}")
        if phase is not None and not isinstance(phase, str):
            raise TypeError(f"phase must be a phase name or None, got {type(phase).__name__} {phase!r}")
        if phase is not None and unit != "batch":
            raise ValueError(f"a phase applies to unit=\"batch\" only, not {unit!r}")
        if self._engine:
            self._engine.set_update_frequency(unit, float(n), phase)

    @property
    @when_enabled(make=WatchPerformance)
    def watch_performance(self) -> WatchPerformance:
        """The per-channel detail the statistics keep."""
        p = self._settings()["watch_performance"]
        return WatchPerformance(channel_limit_enabled=p["channel_limit_enabled"], channel_limit=p["channel_limit"],
                                samples_per_channel=p["samples_per_channel"],
                                average_patches=p["average_patches"], histogram_sample=p["histogram_sample"])

    @refused_when_locked(False)
    def set_watch_performance(self, *, channel_limit_enabled: Optional[bool] = None,
                              channel_limit: Optional[int] = None, samples_per_channel: Optional[int] = None,
                              average_patches: Optional[bool] = None,
                              histogram_sample: Optional[int] = None) -> bool:
        """Change the per-channel caps (only the given fields). Returns whether
        the change flushed the layer statistics collected so far (any
        effective change does; logged scalars, metrics and parameter samples
        stay). False, with nothing changed, on a locked session."""
        args = (_opt("channel_limit_enabled", channel_limit_enabled, bool),
                _opt("channel_limit", channel_limit, int, 1),
                _opt("histogram_sample", histogram_sample, int, 1),
                _opt("samples_per_channel", samples_per_channel, int, 1),
                _opt("average_patches", average_patches, bool))
        if not self._engine:
            return False
        return bool(self._engine.set_watch_performance(*args)["statistics_flushed"])

    # ---- what was collected

    def watch_snapshot(self, *, layers: Optional[Iterable[str]] = None,
                       include_patches: bool = True) -> WatchSnapshot:
        """Everything the statistics collected as of the last publish (all
        layers by default; `layers` restricts the copy). include_patches=False
        leaves the patches out."""
        wanted = None if layers is None else set(_layer_list("watch_snapshot", layers))
        if not isinstance(include_patches, bool):
            raise TypeError(f"include_patches must be a bool, got {include_patches!r}")
        if not self._engine:
            return WatchSnapshot()
        params = dict(self._model.named_parameters())
        numel = {name: p.numel() for name, p in params.items()}
        dtypes = {name: p.dtype for name, p in params.items()}
        return WatchSnapshot._of(self._engine.watch_snapshot(), wanted, include_patches, numel, dtypes)

    def log_scalar(self, name: str, value: float) -> None:
        """Record `value` under `name` at the current batch (a GRAPHS plot).
        Call it from the loop body, inside batches()."""
        _check_name("log_scalar", name)
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            if hasattr(value, "item") and getattr(value, "numel", lambda: 0)() == 1:
                value = value.item()
            else:
                raise TypeError(f"log_scalar takes a number, got {type(value).__name__}")
        if self._engine:
            self._engine.log_scalar(name, float(value))

    # ---- custom instruments

    def watch_metric(self, name: str, *, on: str = "batch",
                     reduce: Optional[MetricReduce] = None) -> Callable[[_InstrumentFn], _InstrumentFn]:
        """Register a custom scalar metric evaluated for every collected layer.

        Use as a decorator::

            @session.watch_metric("sparsity")
            def sparsity(ctx: nansense.LayerContext) -> float:
                return (ctx.activation > 0).float().mean().item()

        The function runs on the training thread under torch.no_grad() once
        per collected batch for every layer the statistics collect (the
        watched ones by default), with a LayerContext of live tensors. It
        returns a number or 1-element tensor, a mapping of names to numbers
        (one trace each), or None to skip the layer. on="batch" plots each
        batch; on="epoch" reduces each epoch's values with `reduce` ("mean",
        the default, "sum", "min", "max", "last", or a function of the list
        of values). A function that raises is disabled and reported in
        instrument_errors; training goes on."""
        self._refuse_instruments_if_locked()
        _check_name("watch_metric", name)
        if on not in ("batch", "epoch"):
            raise ValueError(f'on must be "batch" or "epoch", got {on!r}')
        custom = None
        if reduce is None:
            reduce_name = "mean"
        elif isinstance(reduce, str):
            if reduce not in _REDUCES:
                raise ValueError(f"reduce must be one of {', '.join(_REDUCES)} or a function, got {reduce!r}")
            reduce_name = reduce
        elif callable(reduce):
            reduce_name, custom = "mean", reduce
        else:
            raise TypeError(f"reduce must be a name or a function, got {type(reduce).__name__}")
        if reduce is not None and on != "epoch":
            raise ValueError("reduce applies to on=\"epoch\" metrics (each epoch's values become one point)")

        def register(fn: _InstrumentFn) -> _InstrumentFn:
            if not callable(fn):
                raise TypeError(f"watch_metric({name!r}) registers a callable, got {type(fn).__name__}")
            if self._engine:
                inst = self._instruments()
                if name in inst.metric_on:
                    raise ValueError(f"a metric named {name!r} is already watched; choose another name")
                self._engine.watch_metric(name, inst.metric_adapter(name, fn), on, reduce_name, custom)
                inst.metric_on[name] = on
            return fn

        return register

    def watch_layer_tensor(self, name: str) -> Callable[[_InstrumentFn], _InstrumentFn]:
        """Register a tensor of each collected layer's activation shape,
        drawn as an extra strip under the layer's card and kept in
        BatchSnapshot.custom_activations. The function follows watch_metric's
        contract (a LayerContext, live tensors, None skips) and runs on
        captured batches only."""
        return self._tensor_instrument("watch_layer_tensor", name, weight=False)

    def watch_weight_tensor(self, name: str) -> Callable[[_InstrumentFn], _InstrumentFn]:
        """Register a tensor of each collected layer's parameter shapes, called
        once per parameter with a WeightContext on captured batches; drawn on
        the Weights page and kept in BatchSnapshot.custom_weight_tensors."""
        return self._tensor_instrument("watch_weight_tensor", name, weight=True)

    def _tensor_instrument(self, what: str, name: str, *, weight: bool) -> Callable[[_InstrumentFn], _InstrumentFn]:
        self._refuse_instruments_if_locked()
        _check_name(what, name)

        def register(fn: _InstrumentFn) -> _InstrumentFn:
            if not callable(fn):
                raise TypeError(f"{what}({name!r}) registers a callable, got {type(fn).__name__}")
            if self._engine:
                adapter = self._instruments().tensor_adapter(name, fn, weight)
                try:
                    (self._engine.watch_weight_tensor if weight else self._engine.watch_layer_tensor)(name, adapter)
                except RuntimeError as e:  # a taken name (the engine's UsageError)
                    raise ValueError(str(e)) from None
            return fn

        return register

    @property
    @when_enabled(make=dict)
    def instrument_errors(self) -> dict[str, str]:
        """Instrument name -> error, for instruments disabled by a failure."""
        return dict(self._engine.instrument_errors())

    def watch_metrics_snapshot(self, *, layers: Optional[Iterable[str]] = None) -> MetricsSnapshot:
        """The custom metrics' series as of the last publish (every layer's,
        or those of `layers`)."""
        wanted = None if layers is None else set(_layer_list("watch_metrics_snapshot", layers))
        if not self._engine:
            return MetricsSnapshot()
        return self._instruments().metrics_snapshot(self._engine.watch_snapshot(), wanted)

    # ---- probes on the paused model (shared state every UI visitor sees)

    def _probe(self) -> dict:
        return self._engine.probe_status()

    @property
    @when_enabled("unchanged")
    def probe_mode(self) -> str:
        """How probes run the model: "unchanged", "eval" or "train"."""
        return self._probe()["mode"]

    @property
    @when_enabled(False)
    def is_pinned(self) -> bool:
        """Whether a batch is pinned as the probe input."""
        return bool(self._probe()["pinned"])

    @property
    @when_enabled(None)
    def pinned_position(self) -> Optional[BatchPosition]:
        """Where the pinned batch came from (None when nothing is pinned)."""
        return BatchPosition._from(self._probe().get("pinned_position"))

    @property
    @when_enabled(None)
    def probe_result(self) -> Optional[ProbeResult]:
        """The probe's last completed run (None before one, or on a disabled
        session)."""
        r = self._engine.probe_result()
        return ProbeResult._of(r) if r is not None else None

    @property
    def probe_error(self) -> Optional[str]:
        """Why the last probe run failed, or None when it did not."""
        result = self.probe_result
        return result.error if result is not None else None

    @property
    @when_enabled(0)
    def probe_count(self) -> int:
        """How many probe runs have completed (failed ones too)."""
        return int(self._probe()["runs_completed"])

    @property
    @when_enabled(make=dict)
    def perturbations(self) -> dict[tuple[str, int, tuple[int, ...]], tuple[float, ...]]:
        """The perturbations set: (input name, sample, index) -> values."""
        return {(p["input"], int(p["sample"]), tuple(p["index"])): tuple(p["values"])
                for p in self._probe()["perturbations"]}

    def wait_for_probe(self, *, after_count: int = 0, timeout: Optional[float] = None) -> bool:
        """Block until more than after_count probe runs have completed (see
        probe_count), or the loop finished or was lost: True then, False when
        timeout seconds (None: no limit) passed first. Failed runs count:
        check probe_error."""
        if isinstance(after_count, bool) or not isinstance(after_count, numbers.Integral) or after_count < 0:
            raise ValueError(f"after_count must be an int >= 0, got {after_count!r}")
        if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, numbers.Real)
                                    or not timeout >= 0):
            raise ValueError(f"timeout must be a number of seconds >= 0 or None, got {timeout!r}")
        if not self._engine:
            return False
        return bool(self._engine.wait_for_probe(int(after_count), None if timeout is None else float(timeout)))

    @when_enabled(False)
    @refused_when_locked(False)
    def pin_current_batch(self, *, timeout: float = 0.0) -> bool:
        """Pin the last captured batch's inputs as the probe input: from now
        on each capture re-runs the model on it and shows that result.
        Returns False when there is nothing to pin (a disabled session, no
        capture yet). Raises ControlError while the loop runs (pause first).
        `timeout` waits that many seconds for the first probe run."""
        if self.snapshot is None:
            return False
        self._engine.pin_batch(_timeout(timeout))
        return True

    @when_enabled()
    @refused_when_locked()
    def unpin_batch(self, *, timeout: float = 0.0) -> None:
        """Release the pinned batch (nothing when none is pinned)."""
        if self.is_pinned:
            self._engine.unpin_batch(_timeout(timeout))

    @refused_when_locked()
    def set_probe_mode(self, mode: str, *, timeout: float = 0.0) -> None:
        """Run probes with the model as it is ("unchanged"), in eval() or in
        train() mode."""
        if mode not in ("unchanged", "eval", "train"):
            raise ValueError(f'probe mode must be "unchanged", "eval" or "train", got {mode!r}')
        if self._engine:
            self._engine.set_probe_mode(mode, _timeout(timeout))

    @refused_when_locked()
    def add_perturbation(self, *, index: Iterable[int], values: Iterable[float], sample: int = 0,
                         input_name: Optional[str] = None, timeout: float = 0.0) -> None:
        """Pin `index` of `sample` in input `input_name` (the first input when
        None) to `values` in every probe: index is (y, x) of an image input
        with one value per channel, or (channel,) of a flat input with one
        value. A perturbation that does not fit the input raises ValueError
        saying what does."""
        idx = [int(i) for i in _int_list("index", index)]
        vals = [float(v) for v in _number_list("values", values)]
        if isinstance(sample, bool) or not isinstance(sample, numbers.Integral) or sample < 0:
            raise ValueError(f"sample must be an int >= 0, got {sample!r}")
        if input_name is not None and not isinstance(input_name, str):
            raise TypeError(f"input_name must be an input's name or None, got {input_name!r}")
        if self._engine:
            self._engine.add_perturbation(idx, vals, int(sample), input_name, _timeout(timeout))

    @when_enabled()
    @refused_when_locked()
    def clear_perturbations(self, *, timeout: float = 0.0) -> None:
        """Remove every perturbation."""
        self._engine.clear_perturbations(_timeout(timeout))

    # ---- experiment settings

    @property
    @when_enabled(False)
    def auto_run_experiments(self) -> bool:
        """Whether each page's experiment re-runs at every snapshot."""
        return bool(self._settings()["auto_run_experiments"])

    @refused_when_locked()
    def set_auto_run_experiments(self, enabled: bool) -> None:
        """Re-run each open page's experiment at every snapshot (or not)."""
        if not isinstance(enabled, bool):
            raise TypeError(f"enabled must be a bool, got {type(enabled).__name__} {enabled!r}")
        if self._engine:
            self._engine.set_auto_run_experiments(enabled)

    @property
    @when_enabled(make=dict)
    def experiment_defaults(self) -> dict[str, dict[str, Any]]:
        """Experiment kind -> the session's default parameters for it."""
        return dict(self._settings()["experiment_defaults"])

    @refused_when_locked()
    def set_experiment_defaults(self, kind: Optional[str] = None, **defaults: Any) -> None:
        """Seed the defaults an experiment starts from (between the kind's own
        and a request's parameters): for one `kind` ("grad_cam", "deep_dream",
        ...), or, without one, for every kind that has each parameter. A
        parameter no kind has raises ValueError naming it, and nothing
        changes."""
        if kind is not None and not isinstance(kind, str):
            raise TypeError(f"kind must be an experiment kind's name or None, got {kind!r}")
        if not self._engine:
            return
        kinds = {k["kind"]: {p["key"] for p in k["params"]} for k in self._engine.list_experiments()["kinds"]}
        if kind is not None and kind not in kinds:
            raise ValueError(f"unknown experiment kind {kind!r}; the kinds are {sorted(kinds)}")
        targets = [kind] if kind is not None else sorted(kinds)
        unused = set(defaults) - set().union(*(kinds[k] for k in targets))
        if unused:
            raise ValueError(f"no experiment {'kind ' + repr(kind) + ' ' if kind else ''}has the parameters "
                             f"{sorted(unused)}")
        current = self.experiment_defaults
        for k in targets:
            mine = {n: v for n, v in defaults.items() if n in kinds[k]}
            if mine or kind is not None:
                self._engine.set_experiment_defaults(k, {**current.get(k, {}), **mine})


def _timeout(timeout: Any) -> float:
    if isinstance(timeout, bool) or not isinstance(timeout, numbers.Real) or timeout < 0:
        raise ValueError(f"timeout must be a number of seconds >= 0, got {timeout!r}")
    return float(timeout)


def _int_list(name: str, values: Any) -> list:
    if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
        raise TypeError(f"{name} must be a sequence of ints, got {type(values).__name__} {values!r}")
    out = list(values)
    if not out or any(isinstance(v, bool) or not isinstance(v, numbers.Integral) for v in out):
        raise TypeError(f"{name} must be a non-empty sequence of ints, got {values!r}")
    return out


def _number_list(name: str, values: Any) -> list:
    if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
        raise TypeError(f"{name} must be a sequence of numbers, got {type(values).__name__} {values!r}")
    out = list(values)
    if not out or any(isinstance(v, bool) or not isinstance(v, numbers.Real) for v in out):
        raise TypeError(f"{name} must be a non-empty sequence of numbers, got {values!r}")
    return out
