"""nansense: a debugger for PyTorch training loops.

Wrap the loop, get a live web UI and an MCP endpoint that pause, step and
inspect it::

    import nansense
    session = nansense.start(model, optimizer=optimizer, port=8080)
    for epoch in range(10):
        for inputs, targets in session.batches(train_loader, phase="train"):
            ...
    session.close()

The engine is the C++ library (nansense._nansense), which sees every op at
PyTorch's dispatcher; this package is its Python face.
"""

from ._check import check_torch as _check_torch

_check_torch()

from ._capsule import Capsule, replay_capsule  # noqa: E402
from ._distributed import DistributedError  # noqa: E402
from ._experiments import ExperimentResult, ProbeResult  # noqa: E402
from ._restorer import TrainingRestorer  # noqa: E402
from ._session import DEFAULT_CACHE_DIR, Session, TimeTravelJump, load_moment, serve, start  # noqa: E402
from ._types import (  # noqa: E402
    BatchPosition,
    BatchSnapshot,
    DebugError,
    DebugSettings,
    LayerReport,
    LossScaleStatus,
    Mode,
    RunState,
    Schedule,
    TimeTravelStatus,
)
from ._stats import (  # noqa: E402
    PatchGallery,
    LayerContext,
    LayerStatsSnapshot,
    MetricSeries,
    MetricsSnapshot,
    ParameterSample,
    StatsScope,
    TensorStatsSnapshot,
    UpdateFrequency,
    WatchPerformance,
    WatchSnapshot,
    WeightContext,
    histogram_edges,
)
from ._nansense import (  # noqa: E402
    ArgumentError,
    CapsuleError,
    ControlError,
    MomentError,
    ScheduleError,
    TimeTravelError,
    UsageError,
)

__all__ = [
    "start",
    "serve",
    "load_moment",
    "Session",
    "replay_capsule",
    "Capsule",
    "BatchPosition",
    "BatchSnapshot",
    "DebugError",
    "DebugSettings",
    "LayerReport",
    "LossScaleStatus",
    "Mode",
    "RunState",
    "Schedule",
    "TimeTravelStatus",
    "ExperimentResult",
    "ProbeResult",
    "StatsScope",
    "UpdateFrequency",
    "WatchPerformance",
    "WatchSnapshot",
    "LayerStatsSnapshot",
    "TensorStatsSnapshot",
    "PatchGallery",
    "ParameterSample",
    "LayerContext",
    "WeightContext",
    "MetricsSnapshot",
    "MetricSeries",
    "histogram_edges",
    "TimeTravelJump",
    "TrainingRestorer",
    "DEFAULT_CACHE_DIR",
    "ArgumentError",
    "CapsuleError",
    "ControlError",
    "DistributedError",
    "MomentError",
    "ScheduleError",
    "TimeTravelError",
    "UsageError",
]
