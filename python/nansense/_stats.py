"""Watching training evolve from Python: the statistics' settings and views,
custom instruments, and their context types.

Everything here is a view over the engine's own collector (the one the UI's
Stats page reads); the settings go through the same command layer as the
UI's and MCP's, so a value refused there is refused here with the same
reason."""

from __future__ import annotations

import enum
import math
import numbers
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, Callable, Iterable, Mapping, Optional, Union, cast

import torch

from . import _nansense
from ._types import BatchPosition, _torch_dtype

__all__ = [
    "StatsScope",
    "UpdateFrequency",
    "WatchPerformance",
    "TensorStatsSnapshot",
    "PatchGallery",
    "PatchSnapshot",
    "TypePatches",
    "LayerStatsSnapshot",
    "ParameterSample",
    "WatchSnapshot",
    "LayerContext",
    "WeightContext",
    "MetricSeries",
    "MetricsSnapshot",
    "histogram_edges",
]


class StatsScope(enum.StrEnum):
    """Which layers fold their batches into the running statistics.

    NONE collects nothing (what was collected stays, frozen); WATCHED (the
    default) collects the watched layers; ALL collects every layer."""

    NONE = "none"
    WATCHED = "watched"
    ALL = "all"


@dataclass(frozen=True)
class UpdateFrequency:
    """How often a running loop is captured and published without pausing:
    every n-th epoch (unit "epoch"), every n-th batch ("batch", of `phase`
    only when given) or every n seconds ("seconds")."""

    unit: str = "seconds"
    n: float = 2
    phase: Optional[str] = None


@dataclass(frozen=True)
class WatchPerformance:
    """How much per-channel detail the statistics keep: histograms for the
    first `channel_limit` channels (when channel_limit_enabled),
    `samples_per_channel` Min/Max gallery entries per channel, patches
    ranked by channel averages (average_patches), and how many values of a
    tensor its histogram samples (histogram_sample)."""

    channel_limit_enabled: bool = True
    channel_limit: int = 16
    samples_per_channel: int = 5
    average_patches: bool = False
    histogram_sample: int = 16384


_edges_cache: Optional[tuple[float, ...]] = None


def histogram_edges() -> tuple[float, ...]:
    """The fixed symmetric-log bin edges every statistics histogram uses
    (len(hist) + 1 values)."""
    global _edges_cache
    if _edges_cache is None:
        from . import _nansense

        _edges_cache = tuple(_nansense.histogram_edges())
    return _edges_cache


@dataclass(frozen=True)
class TensorStatsSnapshot:
    """One (layer, phase, epoch) accumulator of activations or gradients.

    n / sum / sum_sq / min / max run over every finite element seen (min and
    max are nan before any); nan / pos_inf / neg_inf count the non-finite
    ones. hist holds one count per bin of histogram_edges(), or None once a
    newer epoch of the phase collapsed this one's bins (its median and dead
    channel count are kept). channel_hists are the first channels' own
    histograms. binned is how many values the bins counted (the histogram
    plus the NaN count): every value seen, or fewer when the histograms were
    drawn from a sample (WatchPerformance.histogram_sample; `sampled` says
    so); every other figure counts every value."""

    n: int
    sum: float
    sum_sq: float
    min: float
    max: float
    hist: Optional[tuple[int, ...]]
    nan: int = 0
    pos_inf: int = 0
    neg_inf: int = 0
    channel_hists: tuple[tuple[int, ...], ...] = ()
    channels: int = 0
    dead_channels: tuple[int, ...] = ()
    _median: float = math.nan
    _dead_count: Optional[int] = None
    dtype: Optional[torch.dtype] = None
    collapsed_dead_count: Optional[int] = None
    collapsed_median: Optional[float] = None
    binned: int = 0

    @property
    def sampled(self) -> bool:
        """Whether the histograms were drawn from a sample of the values
        (n, sum, sum_sq, min, max and the non-finite counts never are)."""
        return self.hist is not None and self.binned < self.n + self.nan + self.pos_inf + self.neg_inf

    @property
    def mean(self) -> float:
        """Arithmetic mean of the finite elements; nan before any."""
        return self.sum / self.n if self.n else math.nan

    @property
    def variance(self) -> float:
        """Population variance; nan with fewer than two elements."""
        if self.n < 2:
            return math.nan
        m = self.sum / self.n
        return max(self.sum_sq / self.n - m * m, 0.0)

    @property
    def std(self) -> float:
        """Population standard deviation."""
        return math.sqrt(self.variance) if self.n >= 2 else math.nan

    @property
    def median(self) -> float:
        """The midpoint of the histogram bin holding the median."""
        return self._median

    @property
    def dead_channel_count(self) -> Optional[int]:
        """How many channels only ever hit the zero bin; None when unknown."""
        return self._dead_count

    @classmethod
    def _of(cls, t: Optional[_nansense.TensorStatsSnapshot]) -> Optional["TensorStatsSnapshot"]:
        if t is None:
            return None
        hist = t.hist  # each read converts: read once
        collapsed = not hist
        return cls(
            n=t.n, sum=t.sum, sum_sq=t.sum_sq, min=_nan_if_none(t.min), max=_nan_if_none(t.max),
            hist=None if collapsed else tuple(hist),
            nan=t.nan, pos_inf=t.pos_inf, neg_inf=t.neg_inf,
            channel_hists=tuple(tuple(h) for h in t.channel_hists), channels=t.channels,
            dead_channels=tuple(t.dead_channels), _median=_nan_if_none(t.median), _dead_count=t.dead_count,
            collapsed_dead_count=t.dead_count if collapsed else None,
            collapsed_median=_nan_if_none(t.median) if collapsed else None,
            binned=t.binned, dtype=_torch_dtype(t.dtype),
        )

    @classmethod
    def _from(cls, d: Optional[Mapping[str, Any]]) -> Optional["TensorStatsSnapshot"]:
        # The same from a dict of the engine's fields, hist None when
        # collapsed and dead_count spelled dead_channel_count.
        if d is None:
            return None
        fields = {**d, "hist": d["hist"] or [], "dead_count": d["dead_channel_count"], "dtype": d.get("dtype")}
        return cls._of(cast(Any, SimpleNamespace(**fields)))


def _nan_if_none(x: Optional[float]) -> float:
    # The engine reports a missing min, max or median as None; the
    # reference's TensorStatsSnapshot spells it nan.
    return math.nan if x is None else x


@dataclass(frozen=True)
class PatchGallery:
    """One ranking's Min/Max gallery of a layer (the extreme-input patches):
    for each of the first `channels` channels, its `samples` best entries.
    slots[sample][channel] is None where nothing was kept, else a dict with
    score, batch, sample, y, x (the activation's position) and top, left
    (the crop's origin in the input); crops and heat are the input crops and
    activation heatmaps, [sample, channel, ...]."""

    ranking: str
    samples: int
    channels: int
    slots: tuple[tuple[Optional[dict], ...], ...]
    crops: Optional[torch.Tensor]
    heat: Optional[torch.Tensor]

    @classmethod
    def _of(cls, g: _nansense.PatchGallery) -> "PatchGallery":
        c = g.channels
        flat = [_slot(s) for s in g.slots]
        rows = tuple(tuple(flat[s * c:(s + 1) * c]) for s in range(g.samples)) if c else ()
        return cls(ranking=g.ranking, samples=g.samples, channels=c, slots=rows, crops=g.crops, heat=g.heat)


def _slot(s: _nansense.PatchSlot) -> Optional[dict]:
    # The public slot is a dict (PatchGallery's docstring); None when empty.
    if not s.filled:
        return None
    return {"score": s.score, "batch": s.batch, "sample": s.sample, "y": s.y, "x": s.x, "top": s.top,
            "left": s.left}


@dataclass(frozen=True)
class TypePatches:
    """One ranking's Min/Max patches in the reference's layout, every
    tensor indexed [channel, sample] (C channels, N samples each, best
    first): values are the ranked scores (never-filled slots -inf for a
    max ranking, +inf for a min one, their patches and heat zeros),
    patches the input crops [C, N, input channels, h, w] (whole inputs for
    the average rankings), heat the channel's activation map [C, N, h, w]
    ([C, N, 1, 1] for a flat activation), top / left each crop's origin in
    the input. input_hw is the model input's size; crop whether patches are
    crops (the pixel rankings) or whole inputs."""

    values: torch.Tensor
    patches: torch.Tensor
    heat: torch.Tensor
    top: torch.Tensor
    left: torch.Tensor
    input_hw: tuple[int, int]
    crop: bool

    @classmethod
    def _from(cls, g: "PatchGallery", input_hw: tuple[int, int]) -> Optional["TypePatches"]:
        if g.crops is None:
            return None
        c, n = g.channels, g.samples
        largest = g.ranking.startswith("max")

        def slot(k: int, ch: int) -> dict:
            return g.slots[k][ch] or {}  # an empty slot reads as {}

        filled = torch.tensor([[g.slots[k][ch] is not None for k in range(n)] for ch in range(c)],
                              dtype=torch.bool).reshape(c, n)
        empty = math.inf if not largest else -math.inf
        values = torch.tensor([[slot(k, ch).get("score", empty) for k in range(n)] for ch in range(c)],
                              dtype=torch.float32).reshape(c, n)
        top = torch.tensor([[slot(k, ch).get("top", 0) for k in range(n)] for ch in range(c)],
                           dtype=torch.int64).reshape(c, n)
        left = torch.tensor([[slot(k, ch).get("left", 0) for k in range(n)] for ch in range(c)],
                            dtype=torch.int64).reshape(c, n)
        patches = g.crops.transpose(0, 1).contiguous()
        heat = (g.heat.transpose(0, 1).contiguous() if g.heat is not None
                else torch.where(filled, values, torch.zeros(())).reshape(c, n, 1, 1).clone())
        # Never-filled slots hold zeros, as the reference's do.
        patches[~filled] = 0
        heat[~filled] = 0
        return cls(values=values, patches=patches, heat=heat, top=top, left=left, input_hw=input_hw,
                   crop=g.ranking.endswith("pixel"))


@dataclass(frozen=True)
class PatchSnapshot:
    """A layer's Min/Max patches in the reference's layout: ranking name
    ("max_pixel", "min_pixel", "max_average", "min_average"; the average
    ones only with WatchPerformance.average_patches) -> TypePatches."""

    by_type: dict[str, TypePatches]


@dataclass(frozen=True)
class LayerStatsSnapshot:
    """One layer's statistics for a (phase, epoch) bucket: its activations'
    and gradients' accumulators (gradients None in forward-only phases) and
    its Min/Max patches (the reference's "extreme-input patches"): patches
    in the reference's layout (None when the bucket holds none: no
    image-like input, an older epoch, or include_patches=False), galleries
    the same patches as ours (one PatchGallery per ranking)."""

    layer: str
    phase: str
    epoch: int
    batches: int
    activations: Optional[TensorStatsSnapshot]
    gradients: Optional[TensorStatsSnapshot]
    patches: Optional[PatchSnapshot] = None
    galleries: tuple[PatchGallery, ...] = ()


@dataclass(frozen=True)
class ParameterSample(TensorStatsSnapshot):
    """A parameter's statistics sampled at an epoch, a TensorStatsSnapshot
    of its values as the reference's are (n elements, sum, sum_sq, min, max;
    mean, std and variance from them; the parameter's dtype; no histogram is
    kept, so hist is None as in a collapsed bucket and median, like
    collapsed_median, is the values' exact median), plus ours: the epoch, the values' L2 norm, the
    gradient's norm, mean, std, min and max (None without a gradient), and
    the update ratio ||w after the step - w before|| / ||w before||."""

    epoch: int = 0
    value_norm: float = 0.0
    grad_norm: Optional[float] = None
    grad_mean: Optional[float] = None
    grad_std: Optional[float] = None
    grad_min: Optional[float] = None
    grad_max: Optional[float] = None
    update_ratio: Optional[float] = None

    @classmethod
    def _sample(cls, s: _nansense.ParameterSample, numel: Optional[int],
                dtype: Optional[torch.dtype] = None) -> "ParameterSample":
        # The engine samples mean and population std; the reference's fields
        # are the sums they come from (over numel elements).
        n = numel if numel else 1
        mean, std = float(s.mean), float(s.std)
        median = s.median
        return cls(n=n, sum=mean * n, sum_sq=n * (std * std + mean * mean), min=float(s.min),
                   max=float(s.max), hist=None, _median=_nan_if_none(median), collapsed_median=median,
                   dtype=dtype, epoch=int(s.epoch), value_norm=float(s.value_norm),
                   grad_norm=s.grad_norm, grad_mean=s.grad_mean, grad_std=s.grad_std,
                   grad_min=s.grad_min, grad_max=s.grad_max, update_ratio=s.update_ratio)


@dataclass(frozen=True)
class WatchSnapshot:
    """Everything the statistics collected, as of the last publish.

    stats is keyed by (layer, phase, epoch); weights by (layer, epoch), each
    a dict of parameter name -> ParameterSample. In a distributed run, ranks
    is the number of ranks whose shards the layer statistics add up (the
    global batch); the Min/Max patches, weights and series are rank 0's."""

    stats: dict[tuple[str, str, int], LayerStatsSnapshot] = field(default_factory=dict)
    weights: dict[tuple[str, int], dict[str, ParameterSample]] = field(default_factory=dict)
    sequence: int = 0
    ranks: int = 1

    def latest_per_phase(self, layer: str) -> dict[str, LayerStatsSnapshot]:
        """For `layer`, phase -> its most recent epoch's statistics."""
        out: dict[str, LayerStatsSnapshot] = {}
        for (name, phase, epoch), s in self.stats.items():
            if name == layer and (phase not in out or out[phase].epoch < epoch):
                out[phase] = s
        return out

    def phase_history(self, layer: str, phase: str) -> list[LayerStatsSnapshot]:
        """`layer`'s buckets of `phase`, ordered by epoch."""
        return sorted((s for (n, p, _), s in self.stats.items() if n == layer and p == phase),
                      key=lambda s: s.epoch)

    def weight_history(self, layer: str) -> dict[str, list[tuple[int, ParameterSample]]]:
        """`layer`'s per-epoch parameter samples, parameter -> [(epoch, sample)]."""
        out: dict[str, list[tuple[int, ParameterSample]]] = {}
        for (name, epoch), params in sorted(self.weights.items(), key=lambda kv: kv[0][1]):
            if name != layer:
                continue
            for param, sample in params.items():
                out.setdefault(param, []).append((epoch, sample))
        return out

    @classmethod
    def _of(cls, view: Optional[_nansense.WatchSnapshot], layers: Optional[set], include_patches: bool,
            numel: Optional[Mapping[str, int]] = None,
            dtypes: Optional[Mapping[str, torch.dtype]] = None) -> "WatchSnapshot":
        if view is None:
            return cls()
        stats = {}
        for b in view.buckets:
            if layers is not None and b.layer not in layers:
                continue
            raw = b.patches if include_patches else []
            galleries = tuple(PatchGallery._of(g) for g in raw)
            by_type = {}
            for g, r in zip(galleries, raw):
                t = TypePatches._from(g, (r.input_height, r.input_width))
                if t is not None:
                    by_type[g.ranking] = t
            stats[(b.layer, b.phase, b.epoch)] = LayerStatsSnapshot(
                layer=b.layer, phase=b.phase, epoch=b.epoch, batches=b.batches,
                activations=TensorStatsSnapshot._of(b.activation),
                gradients=TensorStatsSnapshot._of(b.gradient),
                patches=PatchSnapshot(by_type) if by_type else None, galleries=galleries)
        weights: dict[tuple[str, int], dict[str, ParameterSample]] = {}
        owners = view.owner
        for param, samples in view.parameters.items():
            owner = owners.get(param, "")
            if layers is not None and owner not in layers:
                continue
            for s in samples:
                weights.setdefault((owner, s.epoch), {})[param] = ParameterSample._sample(
                    s, (numel or {}).get(param), (dtypes or {}).get(param))
        return cls(stats=stats, weights=weights, sequence=view.sequence, ranks=view.ranks)


@dataclass(frozen=True)
class LayerContext:
    """One collected layer's live tensors on a batch, handed to an
    instrument (Session.watch_metric, Session.watch_layer_tensor).

    activation / gradient are the layer's output and its gradient (gradient
    None in forward-only phases); weights, weight_gradients and
    optimizer_state cover the layer's own parameters by qualified name.
    module is the nn.Module the layer is, or None for a parameterless op.
    The tensors are the training device's own: read them, never modify
    them. Instruments run on the training thread under torch.no_grad(),
    after your optimizer.step()."""

    layer: str
    phase: str
    epoch: int
    batch_idx: int
    module: Optional[torch.nn.Module]
    activation: torch.Tensor
    gradient: Optional[torch.Tensor]
    weights: dict[str, torch.Tensor]
    weight_gradients: dict[str, torch.Tensor]
    optimizer_state: dict[str, dict[str, Any]]


@dataclass(frozen=True)
class WeightContext:
    """One (layer, parameter) pair's live tensors, handed to a weight-tensor
    instrument (Session.watch_weight_tensor) on captured batches.

    weight / gradient are the live parameter and its .grad (None before the
    first backward); optimizer_state is the parameter's optimizer state
    (empty without an optimizer or before its first step) and hyperparams
    its param group's numeric knobs (lr, momentum, ...)."""

    layer: str
    param: str
    phase: str
    epoch: int
    batch_idx: int
    module: Optional[torch.nn.Module]
    weight: torch.Tensor
    gradient: Optional[torch.Tensor]
    optimizer_state: dict[str, Any]
    hyperparams: dict[str, float]


@dataclass(frozen=True)
class MetricSeries:
    """One trace of a custom metric: points in (epoch, batch) order. xs is
    epoch + batch_idx / batches in the phase (an on="epoch" point sits at
    its epoch, with batch None). Non-finite values are kept as given."""

    on: str
    xs: tuple[float, ...]
    epochs: tuple[int, ...]
    batches: tuple[Optional[int], ...]
    values: tuple[float, ...]


@dataclass(frozen=True)
class MetricsSnapshot:
    """Every custom-metric series at a point in time, keyed by (layer, phase,
    metric, series): series is the key of a mapping-returning metric, ""
    for a plain value."""

    series: dict[tuple[str, str, str, str], MetricSeries] = field(default_factory=dict)

    def plots(self, layer: str, phase: str) -> dict[str, dict[str, MetricSeries]]:
        """metric -> series name -> series for one layer and phase, sorted."""
        out: dict[str, dict[str, MetricSeries]] = {}
        for (l, p, metric, name), s in sorted(self.series.items()):
            if l == layer and p == phase:
                out.setdefault(metric, {})[name] = s
        return out


# ---- instruments: the adapters the engine calls with a context


def _scalar(metric: str, value: Any) -> float:
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise ValueError(f"metric {metric!r} returned a tensor of {value.numel()} elements; "
                             "return a number, a 1-element tensor, a mapping of them, or None")
        return float(value.item())
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"metric {metric!r} returned {type(value).__name__}; "
                        "return a number, a 1-element tensor, a mapping of them, or None")
    return float(value)


class _Instruments:
    """The Python side of a session's instruments: builds each context from
    the engine's (adding the module and optimizer state the engine does
    not know) and normalises what the user's function returns."""

    def __init__(self, model: torch.nn.Module, optimizer: Any):
        self._modules = dict(model.named_modules())
        self._params = dict(model.named_parameters())
        self._optimizer = optimizer
        self.metric_on: dict[str, str] = {}

    def _optimizer_state(self, names: Iterable[str]) -> dict[str, dict[str, Any]]:
        if self._optimizer is None:
            return {}
        state = self._optimizer.state
        out = {}
        for name in names:
            p = self._params.get(name)
            if p is not None and p in state:
                out[name] = dict(state[p])
        return out

    def layer_context(self, c: _nansense.LayerContext) -> LayerContext:
        weights = c.weights
        return LayerContext(
            layer=c.layer, phase=c.phase, epoch=c.position.epoch, batch_idx=c.position.batch_idx,
            module=self._modules.get(c.layer), activation=c.activation, gradient=c.gradient,
            weights=weights, weight_gradients=c.weight_gradients,
            optimizer_state=self._optimizer_state(weights.keys()))

    def weight_context(self, c: _nansense.WeightContext) -> WeightContext:
        return WeightContext(
            layer=c.layer, param=c.parameter, phase=c.phase, epoch=c.position.epoch,
            batch_idx=c.position.batch_idx, module=self._modules.get(c.layer), weight=c.weight,
            gradient=c.gradient, optimizer_state=c.optimizer_state, hyperparams=c.hyperparams)

    def metric_adapter(self, name: str, fn: Callable) -> Callable[[_nansense.LayerContext], Optional[list]]:
        def adapter(c: _nansense.LayerContext) -> Optional[list]:
            out = fn(self.layer_context(c))
            if out is None:
                return None
            if isinstance(out, Mapping):
                values = []
                for key, v in out.items():
                    if not isinstance(key, str) or not key:
                        raise TypeError(f"metric {name!r} returned a mapping with key {key!r}; "
                                        "keys must be non-empty strings (each names a trace)")
                    if v is not None:
                        values.append((key, _scalar(name, v)))
                return values
            return [("", _scalar(name, out))]

        return adapter

    def tensor_adapter(self, name: str, fn: Callable, weight: bool) -> Callable[[Any], Optional[torch.Tensor]]:
        def adapter(c: Any) -> Optional[torch.Tensor]:
            out = fn(self.weight_context(c) if weight else self.layer_context(c))
            if out is not None and not isinstance(out, torch.Tensor):
                raise TypeError(f"instrument {name!r} returned {type(out).__name__}; return a tensor or None")
            return out

        return adapter

    def _split(self, series: str) -> tuple[str, str]:
        # "name/key": the longest registered metric name that prefixes it.
        best = ""
        for m in self.metric_on:
            if (series == m or series.startswith(m + "/")) and len(m) > len(best):
                best = m
        if not best:
            return series, ""
        return best, series[len(best) + 1:]

    def metrics_snapshot(self, view: Optional[_nansense.WatchSnapshot], layers: Optional[set]) -> MetricsSnapshot:
        if view is None:
            return MetricsSnapshot()
        out = {}
        for s in view.series:
            layer = s.layer
            if not layer or (layers is not None and layer not in layers):
                continue  # a logged scalar, or another layer
            metric, key = self._split(s.name)
            pts = s.points
            out[(layer, s.phase, metric, key)] = MetricSeries(
                on=self.metric_on.get(metric, "batch"), xs=tuple(p.x for p in pts),
                epochs=tuple(p.epoch for p in pts), batches=tuple(p.batch for p in pts),
                values=tuple(p.value for p in pts))
        return MetricsSnapshot(series=out)


_REDUCES = ("mean", "sum", "min", "max", "last")
MetricReduce = Union[str, Callable[[list], float]]
