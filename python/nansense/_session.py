"""nansense.start, nansense.serve and the Session."""

from __future__ import annotations

import contextlib
import dataclasses
import dis
import os
import numbers
import sys
import threading
import types
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Optional, Union

import torch

from . import _distributed, _nansense, _setups
from ._arguments import check_bool, check_cache_dir, check_int, check_phases, check_serve_args
from ._errors import TimeTravelJump as TimeTravelJump  # re-exported: its home before _errors.py
from ._experiments import _ExperimentMethods
from ._guards import refused_when_locked, when_enabled
from ._reference import _ReferenceMethods
from ._restorer import TrainingRestorer
from ._session_watch import _WatchMethods
from ._state import load_state, module_specs, optimizer_reader, save_state, state_kind, unwrap
from ._types import (BatchPosition, BatchSnapshot, DebugError, DebugSettings, LossScaleStatus, Mode, RunState,
                     Schedule, TimeTravelStatus, _ScheduleRead)

DEFAULT_CACHE_DIR = ".nansense_cache"

MeanStd = Union[float, Sequence[float]]

_LOG_LEVELS = ("critical", "error", "warning", "info", "debug", "trace")


def _frame_depth(frame) -> int:
    depth = 0
    while frame is not None:
        depth += 1
        frame = frame.f_back
    return depth


def _tensors_of(item: Any, out: Optional[list] = None) -> list:
    """Every tensor of a batch item, depth first (tuples, lists, dicts)."""
    if out is None:
        out = []
    if isinstance(item, torch.Tensor):
        out.append(item)
    elif isinstance(item, Mapping):
        for v in item.values():
            _tensors_of(v, out)
    elif isinstance(item, (tuple, list)):
        for v in item:
            _tensors_of(v, out)
    return out


# Instructions at which a suspended generator is closed without an exception
# in flight: the for loop's iterator dropped by break or return, or a del.
_NORMAL_EXITS = {dis.opmap[name] for name in ("POP_TOP", "RETURN_VALUE", "DELETE_FAST", "DELETE_NAME",
                                              "DELETE_GLOBAL", "DELETE_DEREF") if name in dis.opmap}


def _closed_normally(generator_frame) -> bool:
    """Whether a batches() generator is being closed by a break (or return)
    rather than by an exception unwinding the loop. Python tells a generator
    neither, so it is read off the instruction the loop's frame stands on."""
    caller = generator_frame.f_back
    if caller is None:
        return True
    code = caller.f_code.co_code
    return 0 <= caller.f_lasti < len(code) and code[caller.f_lasti] in _NORMAL_EXITS


# ---------------------------------------------------------------- the session


class Session(_WatchMethods, _ReferenceMethods, _ExperimentMethods):
    """The bridge between a live training loop and the nansense UI.

    Create one with nansense.start. The loop drives it through batches()
    (wrap each phase's loader) and close(); the served UI and MCP endpoint,
    or the run-control methods here, pause, step and inspect it. With
    enabled=False every method is a near-zero-overhead no-op.
    """

    def __init__(self, model: torch.nn.Module, engine: Optional[Any], optimizer=None, scheduler=None,
                 wrapper: Optional[torch.nn.Module] = None, scaler: Optional[_setups.ScalerWatch] = None):
        self._model = model
        self._wrapper = model if wrapper is None else wrapper  # what start() was given (compiled, DDP)
        self._scaler = scaler
        self._compiled = False  # the batches that capture nothing run torch.compile'd code
        self._eager = _setups.Eager()
        self._engine = engine
        self._optimizer = optimizer
        self._scheduler = scheduler
        self._inputs_pending = False
        self._module_paths = ({id(module): _setups.module_path(path) for path, module in model.named_modules()}
                              if engine else {})
        self._closed = False
        self._restorer: Optional[TrainingRestorer] = None  # the session.epochs() loop running
        self._start_epochs: Optional[int] = None
        self._server: Optional[_ServerThread] = None
        self._driven = False         # run control was asked for (or a UI served) before the first batch
        self._coordinator: Optional[_distributed.Coordinator] = None  # a distributed run's boundary exchange

    # ---- properties

    @property
    def enabled(self) -> bool:
        """Whether this session captures anything. Set once at start()."""
        return self._engine is not None

    @property
    @when_enabled(None)
    def snapshot(self) -> Optional[BatchSnapshot]:
        """The last published snapshot (None before the first capture)."""
        return BatchSnapshot._of(self._engine.snapshot())

    @property
    @when_enabled(False)
    def rerunning(self) -> bool:
        """True while the loop body runs a batch for the second time: the
        traced re-run of a batch that tripped a numerical check untraced
        (DebugSettings.rerun_to_trace). The weights, buffers, the optimizer
        and scheduler given to start() and torch's RNG were restored to where
        the batch began; what the body keeps itself was not, so a counter that
        must count each batch once skips this run::

            if not session.rerunning:
                step += 1
        """
        return bool(self._engine.rerunning())

    @property
    @when_enabled(None)
    def live_position(self) -> Optional[BatchPosition]:
        """Position of the batch the training thread is on."""
        return BatchPosition._of(self._engine.live_position())

    @property
    @when_enabled(Mode.DETACH)
    def mode(self) -> Mode:
        return Mode(self._engine.mode())

    @property
    @when_enabled(RunState.RUNNING)
    def state(self) -> RunState:
        return RunState(self._engine.state())

    @property
    @when_enabled(None)
    def url(self) -> Optional[str]:
        """The UI's address once served, else None."""
        return self._engine.url() or None

    @property
    @when_enabled(make=list)
    def layer_names(self) -> list[str]:
        """The discovered layers, in execution order (empty before the first capture)."""
        return self._engine.layer_names()

    @property
    @when_enabled(make=list)
    def internal_errors(self) -> list[str]:
        """Failures of nansense's own machinery that disabled a part (training went on)."""
        return self._engine.internal_errors()

    @property
    @when_enabled(make=lambda: Schedule._view(_ScheduleRead, lambda epochs, phases: None))
    def schedule(self) -> Schedule:
        """The run's shape as known so far: epochs (None until known), phases
        (name -> batch count, as learned) and phase_order."""
        return Schedule._view(self._engine.schedule,
                              lambda epochs, phases: self.set_schedule(epochs=epochs, phases=phases))

    # ---- the training loop

    def batches(self, loader: Iterable, *, phase: str, epoch: Optional[int] = None) -> Iterator:
        """Iterate loader with each item wrapped as one debugger batch::

            for inputs, targets in session.batches(loader, phase="train"):
                ...  # forward / backward / step

        loader is a torch.utils.data.DataLoader or any iterable. The batch
        ends (and may pause) when the loop asks for the next item. The model
        inputs shown in the UI are the arguments the model's forward is
        called with. epoch is inferred when omitted (a new epoch starts when
        the first phase runs again). Raises ScheduleError (a ValueError) when
        a declared schedule is violated.
        """
        if not isinstance(phase, str) or not phase:
            raise TypeError(f'phase must be a non-empty string such as "train", got {phase!r}')
        check_int("epoch", epoch, 0)
        if not isinstance(loader, Iterable):
            raise TypeError(f"loader must be iterable (a DataLoader or any iterable), got {type(loader).__name__}")
        if self._engine is None:
            return iter(loader)
        if self._closed:
            raise _nansense.UsageError("batches() was used after session.close()")
        return self._batches(loader, phase, epoch)

    def batch(self, *, phase: str, epoch: int, item: Any = None) -> "_BatchContext":
        """One debugger batch around a body you iterate yourself (the
        reference's manual loop; batches() is the sugar over it)::

            for epoch in range(epochs):
                for x, y in train_loader:
                    with session.batch(phase="train", epoch=epoch, item=(x, y)):
                        optimizer.zero_grad()
                        loss = criterion(model(x), y)
                        loss.backward()
                        optimizer.step()

        The batch begins when the block is entered (it may raise
        TimeTravelJump there) and ends when it is left (where it may pause).
        item is the loader's item: a frozen moment (freeze_moment) stores it
        as its replay seed, and the flight recorder keeps its tensors; pass
        it when either may matter. The loop's phase lengths are not learned
        from a manual loop (declare them with start(phases=...) for exact
        progress and boundary stops). A batch that trips a numerical check
        untraced is not run again traced (batches() can deliver the item
        again; a with block cannot): its root cause is reported as not
        traced. On a disabled session the block does nothing."""
        if not isinstance(phase, str) or not phase:
            raise TypeError(f'phase must be a non-empty string such as "train", got {phase!r}')
        check_int("epoch", epoch, 0, none_ok=False)
        return _BatchContext(self, phase, epoch, item)

    def _watch_module_calls(self) -> list:
        """For a traced batch: hooks that tell the engine the model input
        (the root forward's arguments) and, for every op, the module call it
        runs in, so layer names and scopes are exact (Python, unlike C++, can
        observe module calls). Removed when the batch ends."""
        engine, paths, root = self._engine, self._module_paths, self._model
        # The module calls under way: (module, scope, the depth of the Python
        # stack at the call). A forward that raised never runs its forward
        # hook, so its entry stays behind; a later call at the same or a
        # shallower depth cannot be inside it and drops it.
        stack: list[tuple[Any, str, int]] = []
        # A module may be called from other threads too (an eval thread):
        # those calls are not this batch's and must not move its scope.
        owner = threading.get_ident()

        def enter(module, args):
            if threading.get_ident() != owner:
                return
            depth = _frame_depth(sys._getframe(1))
            while stack and stack[-1][2] >= depth:
                stack.pop()
            path = paths.get(id(module))
            # A module outside the model (a loss module) keeps the scope it runs in.
            scope = path if path is not None else (stack[-1][1] if stack else "")
            stack.append((module, scope, depth))
            engine.set_module_scope(scope)

        def leave(module, args, output):
            if threading.get_ident() != owner:
                return
            # This call's entry, and any left above it by a forward that raised.
            for i in range(len(stack) - 1, -1, -1):
                if stack[i][0] is module:
                    del stack[i:]
                    break
            engine.set_module_scope(stack[-1][1] if stack else "")

        def inputs(module, args, kwargs):
            # The model input: the first root forward's arguments, keyword
            # ones too (model(input_ids=..., attention_mask=...)), in order.
            if self._inputs_pending and threading.get_ident() == owner:
                self._inputs_pending = False
                engine.set_inputs(_tensors_of(args) + _tensors_of(kwargs))

        self._inputs_pending = True
        engine.set_module_scope("")
        # Hooks on the model's own modules, never process-wide ones (which
        # fire twice under torch.compile's wrapper, and trip Dynamo); ahead
        # of the module's own hooks, so that what a user's forward hook
        # computes is scoped to the module's caller, as the call's output is.
        hooks = [root.register_forward_pre_hook(inputs, with_kwargs=True)]
        for module in root.modules():
            hooks.append(module.register_forward_pre_hook(enter, prepend=True))
            hooks.append(module.register_forward_hook(leave, prepend=True))
        return hooks

    def _first_batch(self) -> None:
        if not self._driven:
            self._driven = True
            follower = self._coordinator is not None and not self._coordinator.leader
            if not self.url and not follower:
                self._train_on_without_ui()

    def _open_batch(self, phase: str, epoch: Optional[int], item: Any, settled: bool = False) -> list:
        """Begin one debugger batch on item (may pause; may raise
        TimeTravelJump): the hooks to remove when the body is done.
        `settled`: the ranks met at a boundary when the last batch ended
        (Coordinator.boundary(settled=True))."""
        engine = self._engine
        coordinator = self._coordinator
        compiled = _setups.runs_compiled(self._wrapper, self._model)
        if compiled != self._compiled:
            self._compiled = compiled
            engine.set_compiled(compiled)
        if compiled:
            # A pause (probes, experiments) runs eagerly; so does the batch if captured.
            self._eager.hold()
        try:
            capture = self._begin(engine, coordinator, phase, epoch, settled)
        except BaseException as e:
            self._eager.release()
            self._release_on_interrupt(e)
            raise
        if not capture:
            self._eager.release()
        engine.record_item(_tensors_of(item))
        _setups.batch_opened(engine, self._scaler)
        return self._watch_module_calls() if capture else []

    def _begin(self, engine: Any, coordinator: Any, phase: str, epoch: Optional[int], settled: bool) -> bool:
        if coordinator is None:
            return engine.begin_batch(phase, epoch, self._model.training)
        # Every rank meets at the boundary before the batch (unless they met
        # as the last one ended: `settled`): rank 0's decision (go on, a
        # pause held, a jump) applies to all (the engine's coordinator).
        try:
            return engine.begin_batch(phase, epoch, self._model.training, settled)
        except _nansense.DistributedError:
            raise  # the run is lost: the coordinator told the other ranks
        except BaseException as e:
            self._left_by(e)
            raise

    def _remove_hooks(self, hooks: list) -> None:
        """The batch's body is done (or left): its hooks go, the eager
        stance of a captured batch ends, backward roots are no longer its."""
        _setups.batch_closed()
        self._eager.release()
        for hook in hooks:
            hook.remove()
        self._inputs_pending = False

    def _batches(self, loader: Iterable, phase: str, epoch: Optional[int]) -> Iterator:
        engine = self._engine
        self._first_batch()
        count = 0
        for item in loader:
            while True:
                hooks = self._open_batch(phase, epoch, item)
                try:
                    yield item
                except GeneratorExit:
                    self._remove_hooks(hooks)
                    normal = _closed_normally(sys._getframe())
                    if not normal:
                        self._note_raised_in_body()
                    engine.abandon_batch(not normal)
                    if normal:
                        # A loop left early ends its phase; its length stays unlearned.
                        engine.end_phase(phase, 0)
                    raise
                except BaseException as e:
                    self._remove_hooks(hooks)
                    engine.abandon_batch(True)
                    self._left_by(e)
                    raise
                self._remove_hooks(hooks)
                # True: the engine restored the batch's starting state to run it
                # again traced (a NaN's root cause): the same item once more.
                if not self._end_batch():
                    break
            count += 1
        engine.end_phase(phase, count)

    def _end_batch(self, can_repeat: bool = True) -> bool:
        """End the batch under way (may pause; may raise TimeTravelJump):
        True when the engine restored its starting state to run it again
        (never when can_repeat is False: the loop cannot deliver the item
        again). Rank 0's jump, requested in its pause, unwinds from here in
        a distributed run on every rank (the engine's coordinator)."""
        if self._compiled:
            self._eager.hold()  # a pause here runs probes and experiments eagerly
        try:
            return self._engine.end_batch(can_repeat)
        except KeyboardInterrupt as e:
            self._release_on_interrupt(e)
            raise
        finally:
            self._eager.release()

    def _note_raised_in_body(self) -> None:
        # The loop body raised: Python closes the generator without telling
        # it what, so Session.training_error says where.
        if self.__dict__.get("_training_error") is None:
            p = self.live_position
            where = f" during epoch {p.epoch} | {p.phase} batch {p.batch_idx}" if p is not None else ""
            self._training_error = f"the training loop raised an exception{where}"

    def _release_on_interrupt(self, e: BaseException) -> None:
        # Ctrl-C out of the loop (in its body or in a pause): the user wants
        # out, so the server's thread no longer keeps the script up once it
        # ends (the UI serves on while the process lives).
        if isinstance(e, KeyboardInterrupt) and self._server is not None:
            self._server._release()

    def _left_by(self, e: BaseException) -> None:
        self._release_on_interrupt(e)
        if not isinstance(e, (TimeTravelJump, GeneratorExit)):
            self._training_error = f"{type(e).__name__}: {e}"  # Session.training_error
        # A rank leaving its loop by an exception (not a jump) tells the
        # others, which would otherwise wait for it at the next boundary.
        if self._coordinator is not None and not isinstance(e, (TimeTravelJump, GeneratorExit)):
            self._coordinator.abandon(f"its training loop raised {type(e).__name__}: {e}")

    def _train_on_without_ui(self) -> None:
        # A script that served no UI and asked for no pause: nothing could
        # resume a pause, so it trains on (checks and capsules stay on).
        self._engine.detach()
        print("[nansense] no UI is served, so training runs on without pausing; the numerical checks stay on "
              "and a NaN still writes its capsule (session.debug_error names it). nansense.start(..., port=8080) "
              "or nansense.serve(session) serves the UI; calling session.pause() or session.step_batch() before "
              "the loop pauses it for code to drive.", file=sys.stderr)

    def epochs(self, n: Optional[int] = None, *, cache_dir: Union[str, os.PathLike] = DEFAULT_CACHE_DIR,
               start_epoch: int = 0) -> Iterator[int]:
        """Time-travel-aware epoch loop: yields start_epoch ... n - 1 like
        range, checkpointing each epoch start to cache_dir (model, buffers,
        the optimizer's and scheduler's state_dict(), RNG), so the UI can jump
        back to any cached epoch. Wrap each epoch's body in restore_point()::

            for epoch in session.epochs(10):
                with session.restore_point():
                    for x, y in session.batches(train_loader, phase="train"):
                        ...

        A jump unwinds the body as a TimeTravelJump, restores the target
        epoch's state and yields it again, pausing on its first batch.
        n defaults to start(epochs=...). start_epoch resumes from cache_dir's
        checkpoint of that epoch (TimeTravelError when it does not fit the
        model). On a disabled session nothing touches the disk and
        start_epoch is ignored, as in the reference: it yields range(n).
        """
        if n is None:
            n = self.schedule.epochs if self._engine else self._start_epochs
            if n is None:
                raise ValueError("epochs() needs the epoch count: session.epochs(n), or nansense.start(..., epochs=n)")
        check_int("n", n, 1, none_ok=False)
        check_int("start_epoch", start_epoch, 0, none_ok=False)
        cache_dir = self._own_dir(check_cache_dir(cache_dir))
        if start_epoch >= n:
            raise ValueError(f"start_epoch must be < n ({n}), got {start_epoch}")
        if self._engine is not None and self._closed:
            raise _nansense.UsageError("epochs() was called after session.close()")
        if self._restorer is not None:
            raise _nansense.UsageError("epochs() is already running: epoch loops do not nest")
        if self._engine is None:
            start_epoch = 0  # nothing to resume from: the whole run, as the reference does
        return TrainingRestorer(self, n, cache_dir, start_epoch).iter_epochs()

    def _own_dir(self, path: str) -> str:
        # Under torch.distributed each rank checkpoints to <path>/rank_<r>.
        return _distributed.rank_dir(path, self._coordinator.rank) if self._coordinator is not None else path

    def restore_point(self) -> contextlib.AbstractContextManager[TrainingRestorer]:
        """The per-epoch restore boundary of a session.epochs() loop: a
        time-travel jump unwinds to here and is suppressed (only that), and
        epochs() then yields the target epoch with its state restored. Loop
        state that depends on history (a running best accuracy, curves)
        belongs inside it, so a jump rewinds it too. Yields the loop's
        TrainingRestorer."""
        if self._engine is None:
            return contextlib.nullcontext(TrainingRestorer(self, 1, DEFAULT_CACHE_DIR))
        if self._restorer is None:
            raise RuntimeError("restore_point() must be used inside a `for epoch in session.epochs(n):` loop")
        return self._restorer.epoch_guard()

    def training_restorer(self, *, cache_dir: Union[str, os.PathLike] = DEFAULT_CACHE_DIR) -> TrainingRestorer:
        """The restorer that opts this session into time travel, for the
        nested loop shape (what the Lightning integration uses)::

            restorer = session.training_restorer(cache_dir="ckpt")
            while restorer.pending():
                with restorer:
                    for epoch in restorer.epochs():
                        ...  # the epoch's phases

        Making it opts the session into time travel (time_travel_status()
        is available from then on). Each epoch's start is checkpointed to
        cache_dir; a jump unwinds the with block, and the next attempt starts
        at its target with the state restored. The epoch count is the schedule's (nansense.start(...,
        epochs=N)). A session without a restorer never writes checkpoints;
        on a disabled session the restorer is inert (one attempt, nothing on
        disk). A session takes one restorer: a second call raises
        RuntimeError, as the reference's does."""
        if self._engine is not None and self.__dict__.get("_nested_restorer") is not None:
            raise RuntimeError("this session already has a training restorer")
        cache_dir = self._own_dir(check_cache_dir(cache_dir))
        n = self.schedule.epochs if self._engine else self._start_epochs
        if n is None:
            raise ValueError("training_restorer() needs the epoch count: nansense.start(..., epochs=n)")
        if self._engine is not None and self._closed:
            raise _nansense.UsageError("training_restorer() was called after session.close()")
        restorer = TrainingRestorer(self, n, cache_dir)
        if self._engine is not None:
            self._nested_restorer = restorer
            # Made is enabled, as the reference's: the UI offers time travel
            # from here on (each epoch's start is checkpointed as it begins).
            restorer._open()
        return restorer

    @when_enabled(make=lambda: TimeTravelStatus(available=False, reason="nansense is disabled in this session"))
    def time_travel_status(self) -> TimeTravelStatus:
        """Whether and where time travel can jump (what the UI's dialog shows)."""
        return TimeTravelStatus._of(self._engine.time_travel_status())

    def request_time_travel(self, epoch: int) -> None:
        """Ask the loop to jump to the start of cached epoch `epoch` at its
        next batch boundary (any thread). TimeTravelError when refused."""
        check_int("epoch", epoch, 0, none_ok=False)
        if self._engine is None:
            raise _nansense.TimeTravelError("nansense is disabled in this session: there is nothing to rewind")
        self._engine.request_time_travel(epoch)

    def set_schedule(self, *, epochs: Optional[int] = None, phases: Optional[dict[str, int]] = None) -> None:
        """Re-declare the schedule mid-run; batch counters are kept. Either
        argument may be omitted to leave that part unchanged."""
        epochs = check_int("epochs", epochs, 1)
        phase_list = check_phases("phases", phases)
        if self._engine:
            self._engine.set_schedule(epochs, phase_list)

    def close(self) -> None:
        """Mark training finished once the loop completes. The UI keeps
        serving the last captured state for as long as the session lives."""
        if self._coordinator is not None and not self._closed:
            # The ranks finish together (rank 0 may still be paused on the
            # last batch): the engine's close meets them.
            try:
                self._engine.close()
            finally:
                self._closed = True
                # A distributed job ends with its processes (torchrun waits
                # for every rank): rank 0's UI serves on while its process
                # lives, but does not keep it up past the script's end.
                if self._server is not None:
                    self._server._release()
            return
        self._closed = True
        if self._engine:
            self._engine.close()

    def __enter__(self) -> "Session":
        """``with nansense.start(...) as session:`` closes the session when
        the block ends, however it ends."""
        return self

    def __exit__(self, exc_type: Optional[type[BaseException]], exc: Optional[BaseException],
                 tb: Optional[types.TracebackType]) -> None:
        """close() the session. When the block ended normally the UI keeps
        serving the last captured state for as long as the session lives, as
        after close(). When it ended by an exception (Ctrl-C's
        KeyboardInterrupt included) the session also stops serving: the port
        is free again and the engine's threads end, so a re-run (a notebook
        cell run again) can serve on the same port. The exception goes on."""
        try:
            self.close()
        finally:
            if exc_type is not None:
                self._stop_serving(tb)

    def _stop_serving(self, tb: Optional[types.TracebackType]) -> None:
        # The native server lives as long as the engine: release every
        # reference to it (the session reads as disabled from here on) and
        # end the thread that stands for the server. The exception's
        # traceback still holds the frames it passed through: nansense's own
        # (a batches() generator that was pausing) are cleared of their
        # locals; the user's frames are left whole for post-mortem debugging.
        engine, self._engine = self._engine, None
        if self._restorer is not None:
            self._restorer._engine = None
        package = os.path.dirname(os.path.abspath(__file__))
        while tb is not None:
            if os.path.dirname(os.path.abspath(tb.tb_frame.f_code.co_filename)) == package:
                try:
                    tb.tb_frame.clear()
                except RuntimeError:
                    pass  # still executing (this very call)
            tb = tb.tb_next
        if self._server is not None:
            self._server._served.set()
        del engine

    # ---- sharing: frozen moments, lock and park (docs/guide/moments.md)

    def freeze_moment(self, path: Union[str, "os.PathLike[str]"], *, phase: str, epoch: int, batch_idx: int) -> None:
        """Arm a one-shot freeze of the debugger's moment at exactly (phase,
        epoch, batch_idx). When training reaches that batch it is captured
        whatever the mode (a detached run works, without pausing) and, at its
        end, the moment is written to path atomically with a checksum: the
        batch's loader item (the replay seed: drive the loop with batches()),
        the weights and buffers as the batch began and ended, the optimizer
        state and hyperparameters, the statistics so far, the watched set and
        the schedule. Arming again replaces a target not reached yet; one the
        run never reaches is reported at close(). No-op on a disabled or
        locked session."""
        if not isinstance(phase, str) or not phase:
            raise TypeError(f"phase must be a non-empty string, got {phase!r}")
        check_int("epoch", epoch, 0, none_ok=False)
        check_int("batch_idx", batch_idx, 0, none_ok=False)
        if self._engine and not self._is_locked():
            self._engine.freeze_moment(os.fspath(path), phase, epoch, batch_idx)

    @when_enabled()
    def lock(self) -> None:
        """Lock run control and global settings for a shared deployment (one
        way). Every transport then refuses run control, time travel,
        watching, probes and settings with a reason; here those methods become
        no-ops, request_time_travel raises TimeTravelError and registering an
        instrument raises RuntimeError. The stats scope is forced to ALL;
        experiments still run, clamped and with the queue capped. close() is
        not locked. A locked session served on a non-loopback host needs no
        token: nothing a visitor sends can change the run."""
        self._engine.lock()

    @property
    def locked(self) -> bool:
        """Whether lock() was called."""
        return self._is_locked()

    @when_enabled()
    def park(self) -> None:
        """Hold the calling thread at a pause, serving experiments and the
        UI, until close() (from another thread or a signal handler). Call it
        on the thread that built the model, typically right after lock()."""
        self._engine.park()

    # ---- run control (any thread; takes effect at the next batch boundary)

    @when_enabled()
    @refused_when_locked()
    def step_batch(self) -> None:
        """Pause after the next batch."""
        self._driven = True
        self._engine.step_batch()

    @when_enabled()
    @refused_when_locked()
    def step_phase(self) -> None:
        """Pause at the first batch of the next phase."""
        self._driven = True
        self._engine.step_phase()

    @when_enabled()
    @refused_when_locked()
    def step_epoch(self) -> None:
        """Pause at the first batch of the next epoch."""
        self._driven = True
        self._engine.step_epoch()

    @refused_when_locked()
    def run_until(self, *, phase: str, epoch: int, batch_idx: int) -> None:
        """Pause at exactly (phase, epoch, batch_idx), which must lie ahead."""
        self._driven = True
        if not isinstance(phase, str) or not phase:
            raise TypeError(f"phase must be a non-empty string, got {phase!r}")
        check_int("epoch", epoch, 0, none_ok=False)
        check_int("batch_idx", batch_idx, 0, none_ok=False)
        if self._engine:
            self._engine.run_until(phase, epoch, batch_idx)

    @when_enabled()
    @refused_when_locked()
    def run(self) -> None:
        """Run to the last batch of the run."""
        self._driven = True
        self._engine.run()

    @when_enabled()
    @refused_when_locked()
    def detach(self) -> None:
        """Never pause again (a numerical error still does)."""
        self._driven = True
        self._engine.detach()

    @when_enabled()
    @refused_when_locked()
    def pause(self) -> None:
        """Pause at the next batch boundary."""
        self._driven = True
        self._engine.pause()

    @when_enabled()
    @refused_when_locked()
    def refresh(self) -> None:
        """Capture and publish the next batch without pausing."""
        self._driven = True
        self._engine.refresh()

    def wait_until_stopped(self, timeout: float) -> RunState:
        """Block until the loop pauses, finishes or is lost, or timeout
        seconds pass; return the state then. Never call it from the training
        thread (it would wait for itself)."""
        if isinstance(timeout, bool) or not isinstance(timeout, numbers.Real) or not timeout >= 0:
            raise ValueError(f"timeout must be a number of seconds >= 0, got {timeout!r}")
        if not self._engine:
            return RunState.RUNNING
        return RunState(self._engine.wait_until_stopped(float(timeout)))

    # ---- numerical debugging

    @property
    @when_enabled(None)
    def debug_error(self) -> Optional[DebugError]:
        """The standing numerical error, if a check tripped since the last clear."""
        return DebugError._from(self._engine.debug_error())

    @property
    @when_enabled(make=DebugSettings)
    def debug_settings(self) -> DebugSettings:
        return DebugSettings._from_engine(self._engine.debug_settings())

    @refused_when_locked()
    def set_debug_settings(self, settings: Optional[DebugSettings] = None, /, *, enabled: Optional[bool] = None,
                           interval: Optional[int] = None, check_nan_inf: Optional[bool] = None,
                           check_under_over: Optional[bool] = None, threshold: Optional[float] = None,
                           **more: Any) -> None:
        """Change the numerical checks' settings; takes effect at the next
        batch. Either name only the fields to change, as the reference does
        (``set_debug_settings(interval=100)``; any DebugSettings field, the
        others keep their values), or pass a whole DebugSettings. Invalid
        values raise as DebugSettings does. No-op on a locked session."""
        given = {k: v for k, v in dict(enabled=enabled, interval=interval, check_nan_inf=check_nan_inf,
                                       check_under_over=check_under_over, threshold=threshold, **more).items()
                 if v is not None}
        if settings is not None:
            if given:
                raise TypeError("set_debug_settings takes either a DebugSettings or the fields to change, not both")
            if not isinstance(settings, DebugSettings):
                raise TypeError(f"set_debug_settings takes a nansense.DebugSettings or keyword fields, got "
                                f"{type(settings).__name__}")
        else:
            fields = set(DebugSettings.__dataclass_fields__)
            unknown = sorted(set(given) - fields)
            if unknown:
                raise TypeError(f"set_debug_settings: no DebugSettings field named {', '.join(unknown)}; the fields "
                                f"are {', '.join(sorted(fields))}")
            settings = dataclasses.replace(self.debug_settings, **given)
        if self._engine:
            values = settings._to_engine()
            self._engine.set_debug_settings(values)

    @refused_when_locked()
    def disable_debug_check(self, category: str = "") -> None:
        """Turn a check category off ("nan_inf" or "under_over"; "" = every
        category of the standing error) and drop it from the standing error."""
        if category not in ("", "nan_inf", "under_over"):
            raise ValueError(f'category must be "nan_inf", "under_over" or "" (all), got {category!r}')
        if self._engine:
            self._engine.disable_debug_check(category)

    @property
    @when_enabled(make=LossScaleStatus)
    def loss_scale(self) -> LossScaleStatus:
        """The mixed-precision loss scaler as the guard counts it: the steps
        it skipped for an overflow (not errors) and its last scale."""
        return LossScaleStatus._from(self._engine.loss_scale())

    @when_enabled()
    def clear_debug_error(self) -> None:
        """Dismiss the standing error; the checks stay on."""
        self._engine.clear_debug_error()

    @when_enabled("<nansense.Session disabled>")
    def __repr__(self) -> str:
        return f"<nansense.Session {self.state} mode={self.mode} url={self.url}>"


class _BatchContext:
    """Session.batch()'s context manager: the batch begins on entering and
    ends on leaving (see Session.batch)."""

    __slots__ = ("_session", "_phase", "_epoch", "_item", "_hooks", "_entered")

    def __init__(self, session: Session, phase: str, epoch: int, item: Any):
        self._session = session
        self._phase = phase
        self._epoch = epoch
        self._item = item
        self._hooks: Optional[list] = None
        self._entered = False

    def __enter__(self) -> "_BatchContext":
        session = self._session
        if session._engine is None:
            return self
        if self._entered:
            raise _nansense.UsageError("this session.batch(...) block was entered twice: make one per batch")
        if session._closed:
            raise _nansense.UsageError("batch() was used after session.close()")
        self._entered = True
        session._first_batch()
        self._hooks = session._open_batch(self._phase, self._epoch, self._item)
        return self

    def __exit__(self, exc_type: Optional[type[BaseException]], exc: Optional[BaseException],
                 tb: Optional[types.TracebackType]) -> None:
        hooks, self._hooks = self._hooks, None
        if hooks is None:
            return  # disabled, or the batch never began (its begin raised)
        session = self._session
        session._remove_hooks(hooks)
        if exc is not None:
            session._engine.abandon_batch(True)
            session._left_by(exc)
            return
        session._end_batch(can_repeat=False)


# ---------------------------------------------------------------- entry points


def start(
    model: torch.nn.Module,
    *,
    epochs: Optional[int] = None,
    phases: Optional[dict[str, int]] = None,
    enabled: bool = True,
    optimizer: Optional[torch.optim.Optimizer] = None,
    scheduler: Any = None,
    port: Optional[int] = None,
    host: str = "127.0.0.1",
    open_browser: bool = True,
    input_mean: Union[MeanStd, dict[str, MeanStd], None] = None,
    input_std: Union[MeanStd, dict[str, MeanStd], None] = None,
    input_transform: Any = None,
    scaler: Any = None,
) -> Session:
    """Create a Session for model (and serve the UI when port is given).

    epochs is an optional fallback for the epoch count; phases={"train": a,
    "val": b} declares every phase and its batch count up front (otherwise
    they are learned during the first epoch). enabled=False makes the
    session a no-op: nothing is traced, no server. optimizer must train
    model's parameters. port serves the UI and the MCP endpoint at once
    (0 picks a free port; see Session.url); host, open_browser,
    input_mean, input_std and input_transform are forwarded to serve().
    The engine reads the model's structure from model.named_modules():
    layer names are module paths ("features.0"); parameterless ops are
    named fx-style ("relu_1"). A torch.compile'd model (torch.compile(model)
    or model.compile()) runs compiled on the batches nansense captures
    nothing of, eagerly on the ones it captures, and keeps the user's
    module paths.

    scaler is the loop's torch.amp.GradScaler (mixed precision): its own
    overflows (skipped steps) are counted, not taken for errors, and
    capsules and checkpoints hold its state. When not given, an enabled
    GradScaler is looked for among the process's objects when a check first
    trips (said once when found).
    """
    wrapper, model = model, unwrap(model)
    check_int("epochs", epochs, 1)
    phase_list = check_phases("phases", phases)
    check_bool("enabled", enabled)
    if optimizer is not None and not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(f"optimizer must be a torch.optim.Optimizer, got {type(optimizer).__name__}")
    if scheduler is not None and not (hasattr(scheduler, "state_dict") and hasattr(scheduler, "step")):
        raise TypeError(f"scheduler must be an LR scheduler (with step() and state_dict()), got "
                        f"{type(scheduler).__name__}")
    _setups.check_scaler(scaler)
    mean, std, transform = check_serve_args(port, host, open_browser, input_mean, input_std, input_transform,
                                             port_none_ok=True)
    if optimizer is not None:
        owned = {id(p) for p in model.parameters()}
        for group in optimizer.param_groups:
            for p in group["params"]:
                if id(p) not in owned:
                    raise ValueError(f"the optimizer holds a parameter of shape {tuple(p.shape)} that is not one of "
                                     "the model's parameters: pass the model the optimizer trains")
    if not enabled:
        session = Session(model, None, optimizer, scheduler)
        session._start_epochs = epochs
        return session
    dist = _distributed.process_group()
    engine = _nansense.Engine(module_specs(model), epochs, phase_list)
    engine.set_model(model)
    watch = _setups.ScalerWatch(scaler)
    engine.set_loss_scale_reader(watch.read)
    _setups.install_backward_hook()
    if optimizer is not None:
        engine.set_optimizer_reader(optimizer_reader(model, optimizer))
    if optimizer is not None or scheduler is not None:
        engine.set_state_adapter(state_kind(optimizer, scheduler), save_state(optimizer, scheduler, watch),
                                 load_state(optimizer, scheduler, watch))
    session = Session(model, engine, optimizer, scheduler, wrapper, watch)
    if dist is not None:
        session._coordinator = _distributed.start(session, engine, dist, wrapper)
        if not session._coordinator.leader:
            return session  # rank 0 serves the UI
    if port is not None:
        session._server = _ServerThread(session, engine.serve(port, host, open_browser, True, True, mean, std,
                                                              transform))
    return session


def load_moment(
    model: torch.nn.Module,
    path: Union[str, "os.PathLike[str]"],
    *,
    replay: Callable[[torch.nn.Module, Any], torch.Tensor],
    port: Optional[int] = None,
    host: str = "127.0.0.1",
    open_browser: bool = True,
    input_mean: Union[MeanStd, dict[str, MeanStd], None] = None,
    input_std: Union[MeanStd, dict[str, MeanStd], None] = None,
    input_transform: Any = None,
) -> Session:
    """Rebuild a frozen moment around model for browsing or a locked demo.

    model must be a fresh instance of the architecture the moment was frozen
    from (parameter names and shapes are checked against the file, and the
    layers the replay discovers against the frozen ones); the frozen weights,
    buffers and train/eval flag are loaded into it (a moment frozen during
    validation loads in eval mode). replay(model, batch) is the training
    step's forward in miniature, returning the loss, e.g.
    ``lambda m, batch: criterion(m(batch[0]), batch[1])``; batch is the
    stored item's tensors in order. It runs once, here, to regenerate the
    batch's activations and gradients. The session shows exactly the frozen
    pause, with statistics collection off; nothing trains. Follow with
    lock() and park() for a shared deployment. Raises MomentError when the
    file is unreadable or does not fit model."""
    model = unwrap(model)
    if not callable(replay):
        raise TypeError(f"replay must be a callable (model, batch) -> loss, got {type(replay).__name__}")
    mean, std, transform = check_serve_args(port, host, open_browser, input_mean, input_std, input_transform,
                                             port_none_ok=True)
    engine = _nansense.Engine(module_specs(model), None, None)
    engine.set_model(model)
    session = Session(model, engine, None, None)
    session._driven = True
    item = engine.begin_moment_replay(os.fspath(path))
    # The engine restored the frozen train/eval flag onto its mirror only;
    # dropout and batch norm in the replay (and in every later probe or
    # experiment) must run as they did when the moment was frozen.
    model.train(engine.model_training())
    hooks = session._watch_module_calls()
    try:
        loss = replay(model, tuple(item))
        if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
            raise TypeError(f"replay must return the batch's loss (a 1-element tensor), got {type(loss).__name__}")
        loss.backward()
    except BaseException:
        session._remove_hooks(hooks)
        engine.abandon_moment_replay()
        raise
    session._remove_hooks(hooks)
    engine.end_moment_replay()
    if port is not None:
        session._server = _ServerThread(session, engine.serve(port, host, open_browser, True, True, mean, std,
                                                              transform))
    return session


class _ServerThread(threading.Thread):
    """What serve() returns, as the reference returns its server's thread:
    the native server runs on the engine's own threads, and this thread
    stands for them. Like the reference's, it is not a daemon: a script
    whose loop has ended keeps serving the UI for post-mortem browsing
    (Ctrl-C ends it; so does Ctrl-C out of the training loop, and close()
    in a distributed run, whose processes must end together). It lives
    while the session does: once the Session is
    garbage collected the thread ends, and so does a process that holds no
    session any more. After a failed bind it has already ended. url is the
    UI's address (None when the port could not be bound)."""

    _live: "weakref.WeakSet[_ServerThread]" = weakref.WeakSet()

    def __init__(self, session: "Session", bound: bool):
        super().__init__(name="nansense-server", daemon=False)
        self.url: Optional[str] = session.url if bound else None
        self._served = threading.Event()
        if bound:
            weakref.finalize(session, self._served.set)
            _ServerThread._live.add(self)
        else:
            self._served.set()
        self.start()

    def run(self) -> None:
        self._served.wait()

    def _release(self) -> None:
        """End the thread now (the server keeps serving while the session lives)."""
        self._served.set()

    def __repr__(self) -> str:
        return f"<nansense server {self.url or 'not bound'} {'serving' if self.is_alive() else 'stopped'}>"


def _collect_unreachable_sessions() -> None:
    # Run by the interpreter's shutdown before it joins non-daemon threads:
    # a session no longer reachable (held in a reference cycle, say by a
    # Lightning trainer) is collected now, so its server thread ends instead
    # of keeping the process up. A session the script still holds keeps the
    # UI up, as the reference's server thread does.
    if any(t.is_alive() for t in _ServerThread._live):
        import gc
        gc.collect()


threading._register_atexit(_collect_unreachable_sessions)  # type: ignore[attr-defined]


def serve(
    session: Session,
    *,
    port: int = 8080,
    host: str = "127.0.0.1",
    log_level: str = "warning",
    open_browser: bool = True,
    mcp: bool = True,
    input_mean: Union[MeanStd, dict[str, MeanStd], None] = None,
    input_std: Union[MeanStd, dict[str, MeanStd], None] = None,
    input_transform: Any = None,
) -> Optional[threading.Thread]:
    """Serve the UI, its HTTP API and (unless mcp=False) the MCP endpoint at
    /mcp for session, from the engine's own threads, and return a thread
    that stands for the server: alive while the session serves, with the
    address as .url. As the reference's, it is not a daemon thread, so a
    script that still holds its session keeps the UI up for post-mortem
    browsing after its loop ends (until Ctrl-C); a session dropped or
    garbage collected ends it. When the
    port cannot be bound, one line says why, training goes on, and the
    thread returned has already ended (url None). Returns None without
    starting anything on a disabled session.

    input_transform maps one input sample (a [C,H,W] CPU tensor, already
    denormalised with input_mean/input_std) to a displayable [1,H,W] or
    [3,H,W] image in 0..1, for inputs that are not gray or RGB images; a
    dict gives one per input name. The server's threads call it with the
    GIL: keep it a quick, pure function. log_level is accepted for the
    reference's signature; the native server prints only its banner and
    errors.
    """
    if not isinstance(session, Session):
        raise TypeError(f"serve takes the Session nansense.start returned, got {type(session).__name__}")
    if log_level not in _LOG_LEVELS:
        raise ValueError(f"log_level must be one of {', '.join(_LOG_LEVELS)}, got {log_level!r}")
    check_bool("mcp", mcp)
    mean, std, transform = check_serve_args(port, host, open_browser, input_mean, input_std, input_transform,
                                             port_none_ok=False)
    if session._engine is None:
        return None
    if session._coordinator is not None and not session._coordinator.leader:
        return None  # the UI lives on rank 0
    session._server = _ServerThread(session, session._engine.serve(port, host, open_browser, mcp, True, mean, std,
                                                                   transform))
    return session._server
