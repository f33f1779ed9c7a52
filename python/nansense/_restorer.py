"""TrainingRestorer: the loop shapes that opt a session into time travel.

The checkpoints, the jump and the restore are the engine's (a session's
epoch loop); this class is the Python face of the two loop shapes of the
reference: the flat one behind session.epochs() / session.restore_point(),
and the nested one of session.training_restorer()::

    restorer = session.training_restorer(cache_dir="ckpt")
    while restorer.pending():
        with restorer:
            for epoch in restorer.epochs():
                ...
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, Optional

from . import _nansense
from ._arguments import check_cache_dir
from ._errors import TimeTravelJump

if TYPE_CHECKING:
    from ._session import Session


class TrainingRestorer:
    """Restores the training loop at a cached epoch after a time-travel jump.

    Entering it (``with restorer:``) after a jump loads the target epoch's
    checkpoint back into the model, optimizer, scheduler and RNG, rewinds
    the session's schedule and statistics and sets start_epoch to the
    target; its exit suppresses TimeTravelJump, and only that. epochs()
    checkpoints each epoch's start to cache_dir before yielding it. On a
    disabled session it is inert: the loop runs once, nothing touches the
    disk. Make one with session.training_restorer(); session.epochs() and
    session.restore_point() use one too (iter_epochs and epoch_guard).
    """

    def __init__(self, session: "Session", epochs: int, cache_dir: str, start_epoch: int = 0):
        self._session = session
        self._engine = session._engine
        self._n = epochs
        self._cache_dir = cache_dir
        self._start = start_epoch
        self._opened = False
        self._done = False          # the engine's epoch loop is over (finished or aborted)
        self._finished = False
        self._entered = False
        self._target: Optional[int] = None   # the jump the last with block caught
        self._epoch: Optional[int] = None    # the epoch whose body runs
        self._last_epoch = start_epoch       # the epoch a jump unwound

    def __repr__(self) -> str:
        state = "finished" if self._finished else f"start_epoch={self._start}"
        return f"<nansense.TrainingRestorer {self._n} epochs, {state}, cache_dir={self._cache_dir!r}>"

    @property
    def start_epoch(self) -> int:
        """First epoch the current attempt should train (0, or a jump target)."""
        return self._start

    @property
    def cache(self) -> "EpochCache":
        """The folder this restorer checkpoints each epoch's start to."""
        return EpochCache(self)

    @property
    def finished(self) -> bool:
        """Whether a with block completed without a time-travel jump."""
        return self._finished

    def pending(self) -> bool:
        """Whether another ``with restorer:`` attempt should run."""
        return not self._finished

    # ---- the engine's epoch loop

    def _open(self) -> None:
        if self._opened or self._engine is None:
            return
        if self._session._closed:
            raise _nansense.UsageError("the epoch loop was started after session.close()")
        # The optimizer's and scheduler's state rides in the session's own
        # adapter (set at start, shared with NaN capsules).
        self._start = self._engine.open_epochs(self._n, self._cache_dir, self._start, "", None, None)
        self._opened = True

    def _abort(self) -> None:
        if self._opened and not self._done:
            self._done = True
            self._engine.abort_epochs()

    def _begin_epoch(self, epoch: int) -> None:
        """Checkpoint the start of epoch (the body is about to run it)."""
        self._epoch = epoch
        self._engine.start_epoch(epoch)

    def _end_epoch(self, epoch: int, target: Optional[int]) -> Optional[int]:
        """The epoch's body ended (target: the jump it was unwound by): the
        next epoch to run, restored when it is a jump's target, or None when
        the run is over."""
        self._epoch = None
        try:
            following = self._engine.end_epoch(epoch, target)
        except BaseException:
            self._abort()
            raise
        if following is None:
            self._done = True
        return following

    # ---- the nested shape: while restorer.pending(): with restorer: for epoch in restorer.epochs()

    def __enter__(self) -> "TrainingRestorer":
        if self._entered:
            raise RuntimeError("a TrainingRestorer's with blocks do not nest")
        if self._finished:
            raise RuntimeError("this TrainingRestorer has finished: loop on `while restorer.pending():`")
        self._entered = True
        if self._engine is None:
            return self
        if not self._opened:
            self._open()
        elif self._target is not None:
            # The last attempt was unwound by a jump: restore the target now.
            target, self._target = self._target, None
            following = self._end_epoch(self._last_epoch, target)
            self._start = following if following is not None else target
        return self

    def __exit__(self, kind, value, traceback) -> bool:
        self._entered = False
        if kind is not None and issubclass(kind, TimeTravelJump):
            if self._engine is None:
                return False
            self._last_epoch = self._epoch if self._epoch is not None else value.epoch
            self._epoch = None
            self._target = value.epoch
            return True
        if kind is None:
            self._finished = True
        if self._engine is not None:
            self._abort()
        return False

    def epochs(self) -> Iterator[int]:
        """Epochs the current attempt should run, start_epoch to the end,
        each checkpointed as it starts (a range on a disabled session)."""
        if self._engine is None:
            return iter(range(self._start, self._n))
        if not self._entered:
            raise RuntimeError("restorer.epochs() runs inside `with restorer:`")
        return self._attempt_epochs()

    def _attempt_epochs(self) -> Iterator[int]:
        epoch: Optional[int] = self._start
        while epoch is not None:
            self._begin_epoch(epoch)
            yield epoch
            # A jump asked for after the epoch's last batch boundary comes
            # back as its target, already restored: the loop goes on there.
            epoch = self._end_epoch(epoch, None)

    # ---- the flat shape: for epoch in session.epochs(): with session.restore_point():

    def iter_epochs(self) -> Iterator[int]:
        """Yield epoch indices for the flat ``session.epochs()`` loop,
        re-yielding a jump's target (restored) after its epoch_guard() caught
        it. The run is finished once the last epoch ends without a jump."""
        if self._engine is None:
            yield from range(self._start, self._n)
            self._finished = True
            return
        self._open()
        epoch: Optional[int] = self._start
        session = self._session
        session._restorer = self
        try:
            while epoch is not None:
                self._begin_epoch(epoch)
                self._target = None
                yield epoch
                target, self._target = self._target, None
                epoch = self._end_epoch(epoch, target)
            self._finished = True
        except BaseException:
            self._abort()
            raise
        finally:
            session._restorer = None

    @contextlib.contextmanager
    def epoch_guard(self) -> Iterator["TrainingRestorer"]:
        """Per-epoch context of the flat loop (session.restore_point()): a
        TimeTravelJump unwinds to here and is suppressed (only that);
        iter_epochs() then yields its target."""
        try:
            yield self
        except BaseException as error:
            if not isinstance(error, TimeTravelJump):
                raise
            self._target = error.epoch

    def save_epoch_start(self, epoch: int) -> None:
        """Checkpoint the training state at the start of epoch now (the
        loops do it themselves as each epoch begins)."""
        if self._engine is None:
            return
        if not self._opened:
            raise RuntimeError("save_epoch_start() needs the restorer's epoch loop: enter `with restorer:` first")
        self._begin_epoch(epoch)


class EpochCache:
    """A restorer's checkpoint folder (TrainingRestorer.cache): where each
    epoch's start is written, and which epochs can be jumped to."""

    def __init__(self, restorer: TrainingRestorer):
        self._restorer = restorer

    @property
    def directory(self) -> str:
        """The folder (a rank's own sub-folder in a distributed run)."""
        return self._restorer._cache_dir

    def cached_epochs(self) -> list[int]:
        """The epochs with a checkpoint a jump can load, in order (empty on a
        disabled session, which writes none)."""
        session = self._restorer._session
        if session._engine is None:
            return []
        return sorted(session.time_travel_status().cached_epochs)

    def __repr__(self) -> str:
        return f"<nansense.EpochCache {self.directory!r}>"
