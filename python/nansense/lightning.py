"""nansense for PyTorch Lightning: a callback that drives a session from a
Trainer, time travel across fit attempts, and NaN capsules replayed as a
Lightning run.

    from nansense.lightning import NansenseCallback
    trainer = Trainer(max_epochs=5, callbacks=[NansenseCallback(port=8080, model="net")])
    trainer.fit(module, datamodule=data)

Needs Lightning (``pip install lightning``; ``pytorch_lightning`` works too).
"""

from __future__ import annotations

import io
import os
import sys
import weakref
from collections.abc import Callable
from typing import Any, Optional, Union

import torch

try:
    import lightning.pytorch as pl
except ImportError:  # pragma: no cover - the older package name
    try:
        import pytorch_lightning as pl
    except ImportError:
        raise ImportError("nansense.lightning needs PyTorch Lightning: pip install lightning") from None

from . import _nansense
from ._adapters import OpenBatch, network_at, pickled, rng_state, serve_options, set_rng_state, unpickled
from ._arguments import check_cache_dir
from ._capsule import Capsule
from ._errors import TimeTravelJump
from ._session import DEFAULT_CACHE_DIR, Session, start
from ._state import module_specs, optimizer_reader, restore_state, state_kind, state_of

__all__ = ["NansenseCallback", "fit_with_time_travel", "replay_capsule", "LightningCapsule"]

Callback = pl.Callback
LightningModule = pl.LightningModule
Trainer = pl.Trainer


# ---------------------------------------------------------------- state saved with checkpoints and capsules

def _scheduler_of(trainer: Trainer) -> Any:
    configs = trainer.lr_scheduler_configs
    return configs[0].scheduler if configs else None


def _scheduler_mark(trainer: Trainer) -> Any:
    """Where the restored scheduler (the first configured) stands: its
    last_epoch, which moves on each of its steps."""
    scheduler = _scheduler_of(trainer)
    return None if scheduler is None else getattr(scheduler, "last_epoch", None)


# What a traced re-run repeats under Lightning (the debug report, the banner
# and the NaN's log line say it; docs/guide/lightning.md).
_RERUN_NOTE = dict(
    ran_twice="training_step and its backward ran this batch twice (the optimizer step, the LR scheduler's step "
              "and global_step count it once)",
    restored=["weights and buffers", "the optimizer's state",
              "the LR scheduler configure_optimizers returned (the first one; its step of this batch is made "
              "again after the second run's optimizer step, so it steps once per batch)",
              "torch's RNG states (CPU and every CUDA device)"],
    seen_twice=["training_step for that batch: its counters, prints and metric accumulators see it twice, and its "
                "self.log() calls run twice (an on_epoch aggregate counts the batch twice)",
                "the backward pass and gradient clipping",
                "the first run's optimizer step runs with cleared gradients, so it changes nothing (it is the one "
                "global_step counts; the second run steps the optimizer itself)",
                "a second LR scheduler or optimizer state nansense does not restore (only the first scheduler is "
                "restored)"],
    detect="callback.rerunning (NansenseCallback) is true during the second run, which calls only training_step, "
           "backward, gradient clipping, the optimizer step and the scheduler step: on_train_batch_start/end, "
           "on_before_backward, on_after_backward, on_before_optimizer_step and other callbacks see the batch once",
)


def _optimizer_of(trainer: Trainer) -> Optional[torch.optim.Optimizer]:
    return trainer.optimizers[0] if trainer.optimizers else None


def _loop_counters(trainer: Trainer) -> dict:
    epoch_loop = trainer.fit_loop.epoch_loop
    return {"global_step": trainer.global_step,
            "batches_that_stepped": epoch_loop._batches_that_stepped,
            "total_batches": epoch_loop.batch_progress.total.completed}


def _set_loop_counters(trainer: Trainer, epoch: int, counters: dict) -> None:
    """Make the Trainer stand at the start of epoch, as if it had trained
    the epochs before it (what resuming from a checkpoint does)."""
    def done(tracker, count: int) -> None:
        tracker.ready = tracker.started = tracker.processed = tracker.completed = count

    progress = trainer.fit_loop.epoch_progress
    done(progress.current, epoch)
    done(progress.total, epoch)
    epoch_loop = trainer.fit_loop.epoch_loop
    optimizer = epoch_loop.automatic_optimization.optim_progress.optimizer
    done(optimizer.step.total, counters["global_step"])
    done(optimizer.zero_grad.total, counters["global_step"])
    epoch_loop._batches_that_stepped = counters["batches_that_stepped"]
    done(epoch_loop.batch_progress.total, counters["total_batches"])


class _OneBatch:
    """A one-item loader: the capsule's batch, for Lightning's fit."""

    def __init__(self, batch: Any):
        self._batch = batch

    def __iter__(self):
        yield self._batch

    def __len__(self) -> int:
        return 1


# ---------------------------------------------------------------- the callback


class NansenseCallback(OpenBatch, Callback):
    """Drive a nansense session from a Lightning Trainer.

    The session is created when fit starts (the optimizers exist by then)
    and closed when it ends; the UI stays up for post-mortem browsing, as
    with a hand-written loop. model="net" (an attribute path inside the
    LightningModule) points nansense at the actual network; without it the
    LightningModule itself is watched. port / host / open_browser / enabled
    / input_mean / input_std / input_transform mean what they mean on
    nansense.start; the UI comes up once fit begins.

    The schedule is declared from the Trainer at each training epoch:
    phases "train" and, on the epochs that validate, "val" (so
    check_val_every_n_epoch > 1 works); sanity-check batches are not
    debugger batches. Mid-epoch validation, loaders without a length,
    manual optimization and gradient accumulation are refused with an
    error saying so. enabled=False is the zero-overhead off switch.

    Without a served UI, training runs on with the numerical checks on, and
    the first NaN stops the Trainer (trainer.should_stop) with a message
    naming its capsule; replay it with nansense.lightning.replay_capsule or,
    on the bare network, nansense.replay_capsule. With a UI, the NaN pauses
    the run at the op that made it. Time travel needs fit_with_time_travel.
    """

    def __init__(
        self,
        *,
        port: Optional[int] = None,
        host: str = "127.0.0.1",
        open_browser: bool = True,
        model: Optional[str] = None,
        input_mean: Any = None,
        input_std: Any = None,
        input_transform: Any = None,
        enabled: bool = True,
    ) -> None:
        super().__init__()
        self._serve = serve_options(port=port, host=host, open_browser=open_browser, model=model,
                                    input_mean=input_mean, input_std=input_std, input_transform=input_transform,
                                    enabled=enabled, inside='the LightningModule such as "net"')
        self._model_attr = model
        self._enabled = enabled
        self._session: Optional[Session] = None
        self._trainer: Optional[Trainer] = None
        self._travel: Optional[_TimeTravel] = None   # set by fit_with_time_travel
        self._epoch = 0
        self._open: Optional[tuple] = None           # (phase, hooks) of the batch under way
        self._phase: Optional[tuple] = None          # [phase, batches] of the phase under way
        self._batch: Any = None                      # the train batch under way (capsules hold it)
        self._batch_idx = 0
        self._scheduler_mark: Any = None             # the restored scheduler's place when the batch began
        self._halted: Optional[str] = None           # the capsule a no-UI stop named
        self._halt_note: Optional[str] = None        # distributed: what rank 0 says when every rank stops
        self._settled = False                        # distributed: the ranks met when the last batch ended

    @property
    def session(self) -> Optional[Session]:
        """The live session, or None before fit has started."""
        return self._session

    @property
    def rerunning(self) -> bool:
        """True while training_step runs a batch for the second time: the
        traced re-run of a batch that tripped a numerical check untraced.
        The weights, buffers, optimizer, the first LR scheduler and torch's
        RNG were restored to where the batch began, and the scheduler steps
        once for the batch; what training_step keeps itself was not, so a
        counter that must count each batch once skips this run::

            def training_step(self, batch, batch_idx):  # callback: the Trainer's NansenseCallback
                if not callback.rerunning:
                    self.seen += 1
        """
        session = self._session
        return session is not None and session.enabled and session.rerunning

    def __repr__(self) -> str:
        state = "not started" if self._session is None else repr(self._session)
        return f"<nansense.lightning.NansenseCallback {state}>"

    # ---- the session

    def _network(self, pl_module: LightningModule) -> torch.nn.Module:
        return network_at(pl_module, self._model_attr)

    @property
    def _engine(self):
        session = self._session
        return session._engine if session is not None else None

    def _in_fit(self, trainer: Trainer) -> bool:
        # trainer.validate() / test() after fit run the validation hooks too:
        # those batches are no debugger batches (the session has closed).
        session = self._session
        return (session is not None and session._engine is not None and not session._closed
                and trainer.state.fn == "fit")

    def _check_trainer(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if not pl_module.automatic_optimization:
            raise RuntimeError("NansenseCallback supports automatic optimization only (the LightningModule sets "
                               "automatic_optimization = False)")
        if len(trainer.optimizers) > 1:
            raise RuntimeError("NansenseCallback supports one optimizer (configure_optimizers returned "
                               f"{len(trainer.optimizers)})")
        if trainer.accumulate_grad_batches != 1:
            raise RuntimeError("NansenseCallback does not support gradient accumulation (accumulate_grad_batches="
                               f"{trainer.accumulate_grad_batches}): a debugger batch is one optimizer step")
        if trainer.world_size > 1:
            strategy = trainer.strategy
            ddp = getattr(getattr(pl, "strategies", None), "DDPStrategy", None)
            deepspeed = getattr(getattr(pl, "strategies", None), "DeepSpeedStrategy", None)
            if (ddp is None or not isinstance(strategy, ddp) or (deepspeed is not None and isinstance(strategy, deepspeed))
                    or getattr(strategy, "_start_method", "popen") != "popen"):
                raise RuntimeError(f"NansenseCallback follows multi-process runs on Lightning's DDP strategy started as "
                                   f"processes (strategy=\"ddp\", or under torchrun), not {type(strategy).__name__}"
                                   f"{' with start_method=' + repr(strategy._start_method) if hasattr(strategy, '_start_method') else ''}")
        if not isinstance(trainer.max_epochs, int) or trainer.max_epochs <= 0:
            raise RuntimeError(f"NansenseCallback needs Trainer(max_epochs=N) with N >= 1 (got {trainer.max_epochs!r}): "
                               "the schedule and the UI's progress are declared from it")

    def on_fit_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._trainer = trainer
        self._settled = False
        if not self._enabled:
            if self._session is None:
                self._session = start(self._network(pl_module), enabled=False)
            return
        self._check_trainer(trainer, pl_module)
        if self._session is not None and self._session._closed:
            raise RuntimeError("this NansenseCallback's session closed when its fit ended (its UI stays up for "
                               "browsing): give the next fit a new NansenseCallback")
        if self._session is None:
            network = self._network(pl_module)
            # Real batch counts are declared at each training epoch's start,
            # before its first batch.
            # 16-mixed: the precision plugin's GradScaler (bf16-mixed has none).
            scaler = getattr(trainer.precision_plugin, "scaler", None)
            self._session = start(network, epochs=trainer.max_epochs, phases={"train": 1}, scaler=scaler,
                                  **self._serve)
            engine = self._engine
            coordinator = self._session._coordinator
            if coordinator is None:
                engine.set_unserved_nan_note("NansenseCallback stops the trainer after this batch")
            else:
                coordinator.check_ahead_of(trainer.strategy.model)  # DDP's wrapper, set up by now
                engine.set_unserved_nan_note(
                    "NansenseCallback stops every rank's trainer together, a few batches on" if coordinator.leader else
                    f"rank {coordinator.rank} follows rank 0: served, it stops every rank in one batch, before its "
                    "optimizer step; "
                    "unserved, NansenseCallback stops every rank's trainer together a few batches on")
            engine.set_rerun_note(_RERUN_NOTE["ran_twice"], _RERUN_NOTE["restored"], _RERUN_NOTE["seen_twice"],
                                  _RERUN_NOTE["detect"])
            # The engine (native) holds what it is given: through weak
            # references to this callback, which holds the session, so that
            # no cycle the garbage collector cannot see keeps the session (and
            # the server thread that keeps a finished script up) alive.
            me = weakref.ref(self)
            engine.set_optimizer_reader(_weakly(me, lambda c: c._read_optimizer(network)()))
            optimizer, scheduler = _optimizer_of(trainer), _scheduler_of(trainer)
            if optimizer is not None or scheduler is not None:
                engine.set_state_adapter(state_kind(optimizer, scheduler), _weakly(me, lambda c: c._save_state()),
                                         lambda data: _weakly(me, lambda c: c._load_state(data))())
        if self._travel is not None:
            self._travel.fit_start(self, trainer)

    def _read_optimizer(self, network: torch.nn.Module):
        def read():
            optimizer = _optimizer_of(self._trainer) if self._trainer is not None else None
            return optimizer_reader(network, optimizer)() if optimizer is not None else ({}, {})
        return read

    def _save_state(self) -> bytes:
        """What checkpoints and capsules hold besides the weights: the
        optimizer's and scheduler's state_dict() (as a plain loop's session
        holds them, so nansense.replay_capsule reads them too) and, for
        Lightning, the loop's counters, every RNG and the batch under way."""
        trainer = self._trainer
        state = state_of(_optimizer_of(trainer), _scheduler_of(trainer), self._session._scaler)
        # The train batch under way (None between batches: epoch checkpoints).
        state["lightning"] = {"counters": _loop_counters(trainer), "rng": rng_state(), "epoch": self._epoch,
                              "batch_idx": self._batch_idx, "batch": pickled(self._batch)}
        buffer = io.BytesIO()
        torch.save(state, buffer)
        return buffer.getvalue()

    def _load_state(self, data: bytes) -> None:
        state = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
        trainer = self._trainer
        if trainer is not None:
            _apply_optimizer_state(trainer, state, self._session._scaler)
        if self._travel is not None:
            # A jump: the next fit attempt's new optimizers and loops get it.
            self._travel.restored = state

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self._engine is not None and self._travel is not None:
            self._travel.train_start(trainer)

    # ---- the schedule

    def on_train_epoch_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self._engine is None:
            return
        self._epoch = trainer.current_epoch
        self._declare_schedule(trainer)
        if self._travel is not None:
            self._travel.epoch_start(self._epoch)

    def on_validation_epoch_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if not self._in_fit(trainer) or trainer.sanity_checking:
            return
        self._end_phase()
        # The val count is known now even where it was not at the epoch's start.
        self._declare_schedule(trainer)

    def _declare_schedule(self, trainer: Trainer) -> None:
        n_train = trainer.num_training_batches
        if not isinstance(n_train, int) or n_train <= 0:
            raise RuntimeError("NansenseCallback needs a train dataloader with a length (got "
                               f"{n_train!r} batches per epoch): iterable-style loaders without __len__ are not "
                               "supported, the schedule is declared up front")
        phases = {"train": n_train}
        n_val = 0
        for n in trainer.num_val_batches:
            if not isinstance(n, int):
                raise RuntimeError(f"NansenseCallback needs val dataloaders with a length (got {n!r} batches)")
            n_val += n
        if n_val and trainer.limit_val_batches != 0:
            every = trainer.check_val_every_n_epoch
            if every is None or (isinstance(trainer.val_check_batch, (int, float))
                                 and trainer.val_check_batch < n_train):
                raise RuntimeError("NansenseCallback validates at epoch boundaries only: mid-epoch validation "
                                   "(val_check_interval < 1.0, a step count, or check_val_every_n_epoch=None) "
                                   "is not supported")
            if (trainer.current_epoch + 1) % every == 0:
                phases["val"] = n_val
        self._session.set_schedule(phases=phases)

    def _end_phase(self) -> None:
        if self._phase is not None:
            phase, count = self._phase
            self._phase = None
            self._engine.end_phase(phase, count)

    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self._engine is None:
            return
        self._end_phase()
        coordinator = self._session._coordinator
        if coordinator is not None and self._travel is not None:
            # Once more before the epoch ends (its validation and checkpoint
            # saving ran since the last batch): a jump asked for meanwhile is
            # carried out here by every rank, not at the epoch's end by rank
            # 0 alone.
            coordinator.meet_after_batch()
            self._settled = True
            self._apply_halt()
        if self._travel is not None:
            following = self._travel.epoch_end(self._epoch)
            if following is not None and following != self._epoch + 1:
                # A jump asked for after the epoch's last batch: the engine
                # has restored its target; the next fit attempt enters it.
                jump = TimeTravelJump(following)
                jump._nansense_restored = True
                raise jump

    # ---- batches

    def _begin(self, phase: str, batch: Any, batch_idx: int) -> None:
        session = self._session
        session._first_batch()
        if self._phase is None or self._phase[0] != phase:
            self._end_phase()
            self._phase = [phase, 0]
        if phase == "train":
            self._batch, self._batch_idx = batch, batch_idx
            self._scheduler_mark = _scheduler_mark(self._trainer)
        settled, self._settled = self._settled, False
        self._open = (phase, session._open_batch(phase, self._epoch, batch, settled))
        self._apply_halt()

    def _apply_halt(self) -> None:
        coordinator = self._session._coordinator
        if coordinator is not None and coordinator.halted and not self._trainer.should_stop:
            # Rank 0's halt, carried by the last boundary's decision: every
            # rank stops after the same batch.
            self._trainer.should_stop = True
            if self._halt_note:
                here = self._session.live_position
                print(f"[nansense] every rank's trainer stops after {here.phase} epoch {here.epoch} batch "
                      f"{here.batch_idx}, {self._halt_note}", file=sys.stderr)

    def _finish(self, trainer: Trainer, pl_module: LightningModule, batch: Any, batch_idx: int) -> None:
        phase = self._take_hooks_off()
        if phase is None:
            return
        session = self._session
        # Lightning steps a step-interval scheduler (and an epoch one on the
        # epoch's last batch) before on_train_batch_end: the restore below
        # takes that step back, so the re-run makes it again.
        scheduler_stepped = phase == "train" and _scheduler_mark(trainer) != self._scheduler_mark
        # True: the engine restored the batch's starting state to run it
        # again traced (the root cause of a NaN the untraced run found).
        while session._end_batch():
            self._open = (phase, session._open_batch(phase, self._epoch, batch))
            try:
                if phase == "train":
                    _rerun_training_step(trainer, pl_module, batch, batch_idx, scheduler_stepped)
                else:
                    _rerun_validation_step(trainer, pl_module, batch, batch_idx)
            except BaseException:
                self._drop_open_batch()
                raise
            self._take_hooks_off()
        self._phase[1] += 1
        if phase == "train":
            self._batch = None
        if phase == "train" or session._coordinator is not None:
            # (Distributed: a follower's trip may come to rank 0 in validation.)
            self._halt_without_ui(trainer)
        coordinator = session._coordinator
        if coordinator is not None:
            # Every rank meets rank 0 here, right after the batch, not at the
            # next batch's start: Lightning's loop makes a collective before
            # each train batch (its SIGTERM broadcast), where a rank waiting
            # for rank 0's pause would block until the process group's timeout.
            coordinator.meet_after_batch()
            self._settled = True
            self._apply_halt()

    def _halt_without_ui(self, trainer: Trainer) -> None:
        session = self._session
        if session.url is not None:
            return
        error = session.debug_error
        if error is None or error.capsule is None or error.capsule == self._halted:
            return
        coordinator = session._coordinator
        if coordinator is not None and not coordinator.leader:
            return  # rank 0 stops every rank together
        self._halted = error.capsule
        attr = f', module="{self._model_attr}"' if self._model_attr else ""
        where = f"{error.position.phase} epoch {error.position.epoch} batch {error.position.batch_idx}"
        replay = f"replay it with nansense.lightning.replay_capsule({error.capsule!r}, model{attr})"
        if coordinator is None:
            trainer.should_stop = True
            print(f"[nansense] the trainer stops at the NaN of {where} (no UI is served); {replay}", file=sys.stderr)
            return
        # Every rank must leave fit after the same batch (DDP's collectives
        # pair batches): the halt goes out with rank 0's next decision.
        self._halt_note = (f"for the NaN of {where} (no UI is served); {replay} (each rank's capsule is in its own "
                           "rank_<r> folder)")
        coordinator.request_halt()

    def on_train_batch_start(self, trainer: Trainer, pl_module: LightningModule, batch: Any, batch_idx: int) -> None:
        if self._engine is not None:
            self._begin("train", batch, batch_idx)

    def on_train_batch_end(self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        if self._engine is not None:
            self._finish(trainer, pl_module, batch, batch_idx)

    def on_validation_batch_start(self, trainer: Trainer, pl_module: LightningModule, batch: Any, batch_idx: int,
                                  dataloader_idx: int = 0) -> None:
        if self._in_fit(trainer) and not trainer.sanity_checking:
            self._begin("val", batch, batch_idx)

    def on_validation_batch_end(self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any,
                                batch_idx: int, dataloader_idx: int = 0) -> None:
        if self._in_fit(trainer) and not trainer.sanity_checking:
            self._finish(trainer, pl_module, batch, batch_idx)

    # ---- the end of fit

    def on_exception(self, trainer: Trainer, pl_module: LightningModule, exception: BaseException) -> None:
        if self._engine is None:
            return
        # A jump unwinding is no loss; any other exception loses the loop.
        self._drop_open_batch()
        self._phase = None
        self._batch = None
        self._settled = False
        if not isinstance(exception, TimeTravelJump):
            # Under torch.distributed the other ranks stop at their next
            # boundary instead of waiting for this one.
            self._session._left_by(exception)
            if self._travel is not None:
                self._travel.abort()

    def on_fit_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        # Only a completed fit gets here: a jump unwinds past it, keeping the
        # session for the next attempt.
        if self._engine is not None:
            self._end_phase()
            if self._travel is not None:
                self._travel.abort()
        if self._session is not None:
            self._session.close()


def _weakly(ref: "weakref.ref[NansenseCallback]", call: Callable[[NansenseCallback], Any]) -> Callable[[], Any]:
    """call(callback) while the callback lives (a function the engine holds)."""
    def run() -> Any:
        callback = ref()
        if callback is None:
            raise RuntimeError("the NansenseCallback is gone")
        return call(callback)
    return run


def _apply_optimizer_state(trainer: Trainer, state: dict, scaler: Any = None) -> None:
    restore_state(_optimizer_of(trainer), _scheduler_of(trainer), state, scaler)


class _AsStep:
    """Runs a LightningModule method as the Trainer runs training_step, so
    self.log() inside it is accepted."""

    def __init__(self, pl_module: LightningModule, name: str):
        self._module, self._name = pl_module, name

    def __enter__(self):
        self._saved = getattr(self._module, "_current_fx_name", None)
        self._module._current_fx_name = self._name

    def __exit__(self, *exc):
        self._module._current_fx_name = self._saved
        return False


def _loss_of(output: Any) -> Optional[torch.Tensor]:
    if output is None or isinstance(output, torch.Tensor):
        return output
    if isinstance(output, dict) and "loss" in output:
        return output["loss"]
    raise RuntimeError("training_step must return a loss tensor, a dict with 'loss', or None")


def _rerun_training_step(trainer: Trainer, pl_module: LightningModule, batch: Any, batch_idx: int,
                         step_scheduler: bool) -> None:
    """One automatic-optimization step of Lightning's, by hand: zero_grad,
    training_step, backward, clipping, optimizer step, and the restored
    scheduler's step when Lightning made one in the first run (the restore
    took it back). The torch optimizer is stepped directly, so Lightning's
    global_step does not count the batch again."""
    optimizer = _optimizer_of(trainer)
    if optimizer is not None:
        optimizer.zero_grad()
    with torch.enable_grad(), _AsStep(pl_module, "training_step"):
        loss = _loss_of(pl_module.training_step(batch, batch_idx))
    if loss is not None:
        trainer.strategy.backward(loss, optimizer)
        if optimizer is not None:
            if trainer.gradient_clip_val:
                pl_module.configure_gradient_clipping(optimizer, trainer.gradient_clip_val,
                                                      trainer.gradient_clip_algorithm)
            optimizer.step()
    if step_scheduler:
        # As Lightning stepped it: through the module's hook (a plateau
        # scheduler never steps before on_train_batch_end).
        pl_module.lr_scheduler_step(_scheduler_of(trainer), None)


def _rerun_validation_step(trainer: Trainer, pl_module: LightningModule, batch: Any, batch_idx: int) -> None:
    with torch.no_grad(), _AsStep(pl_module, "validation_step"):
        pl_module.validation_step(batch, batch_idx)


# ---------------------------------------------------------------- time travel


class _TimeTravel:
    """The engine's epoch loop across fit attempts: each attempt is a fresh
    Trainer (Lightning's are single-use), the session and its checkpoints
    live on in the callback."""

    def __init__(self, cache_dir: str):
        self.cache_dir = cache_dir
        self.opened = False
        self.closed = False
        self.target: Optional[int] = None     # the epoch the next attempt enters
        self.restored: Optional[dict] = None  # the target's saved state (the engine loaded it)
        self.epoch: Optional[int] = None      # the epoch under way
        self.started_at_fit = False           # this attempt's epoch 0 was checkpointed at fit start

    def fit_start(self, callback: NansenseCallback, trainer: Trainer) -> None:
        self.callback = callback
        engine = callback._engine
        self.started_at_fit = False
        if not self.opened:
            # Under torch.distributed each rank checkpoints to cache_dir/rank_<r>.
            cache_dir = callback._session._own_dir(self.cache_dir)
            start_epoch = engine.open_epochs(trainer.max_epochs, cache_dir, 0, "", None, None)
            self.opened = True
            if start_epoch != 0:
                self.target = start_epoch
        state = self.restored
        if state is not None:
            # The new Trainer's optimizer and scheduler were just made.
            _apply_optimizer_state(trainer, state, callback._session._scaler)
        if self.target in (None, 0):
            # Epoch 0 is checkpointed before Lightning builds the loaders: the
            # first loader iterator draws its seed before on_train_epoch_start.
            if state is not None:
                set_rng_state(state["lightning"]["rng"])
            callback._epoch = 0
            self._begin(0)
            self.started_at_fit = True
            self.target, self.restored = None, None

    def train_start(self, trainer: Trainer) -> None:
        if self.target is None:
            return
        target, state = self.target, self.restored
        self.target, self.restored = None, None
        # Entering epoch target > 0: this Trainer's loops stand at its start
        # and the RNG is the epoch's (its loader iterator is made after this).
        _set_loop_counters(trainer, target, state["lightning"]["counters"])
        set_rng_state(state["lightning"]["rng"])

    def _begin(self, epoch: int) -> None:
        self.epoch = epoch
        self.callback._engine.start_epoch(epoch)

    def epoch_start(self, epoch: int) -> None:
        if epoch == 0 and self.started_at_fit:
            self.started_at_fit = False
            return
        self.started_at_fit = False
        self._begin(epoch)

    def epoch_end(self, epoch: int) -> Optional[int]:
        self.epoch = None
        try:
            following = self.callback._engine.end_epoch(epoch, None)
        except BaseException:
            self.abort()
            raise
        if following is None:
            self.closed = True
        return following

    def jumped(self, jump: TimeTravelJump, last_epoch: int) -> None:
        """A jump unwound fit: restore its target (unless the engine did)."""
        if not getattr(jump, "_nansense_restored", False):
            try:
                self.callback._engine.end_epoch(last_epoch, jump.epoch)
            except BaseException:
                self.abort()
                raise
        self.target = jump.epoch

    def abort(self) -> None:
        if self.opened and not self.closed:
            self.closed = True
            self.callback._engine.abort_epochs()


def fit_with_time_travel(
    make_trainer: Callable[[], Trainer],
    model: LightningModule,
    *,
    callback: NansenseCallback,
    train_dataloaders: Any = None,
    val_dataloaders: Any = None,
    datamodule: Any = None,
    cache_dir: Union[str, os.PathLike] = DEFAULT_CACHE_DIR,
) -> None:
    """Run trainer.fit under nansense time travel.

    Equivalent to make_trainer().fit(model, ...) with callback attached,
    plus the UI's Time Travel: every epoch's start is checkpointed to
    cache_dir (weights, buffers, optimizer, scheduler, every RNG, the loop's
    counters), and a jump re-enters training at the chosen epoch, in a fresh
    Trainer from make_trainer (Lightning's Trainer is single-use), with that
    state restored; the callback and its session (the UI) live across
    attempts. Loggers cannot time-travel: after a jump they see the replayed
    epochs again.
    """
    if not callable(make_trainer):
        raise TypeError(f"make_trainer must be a function returning a new Trainer, got {type(make_trainer).__name__}")
    if not isinstance(callback, NansenseCallback):
        raise TypeError(f"callback must be a NansenseCallback, got {type(callback).__name__}")
    if not isinstance(model, LightningModule):
        raise TypeError(f"model must be a LightningModule, got {type(model).__name__}")
    cache_dir = check_cache_dir(cache_dir)
    if callback._travel is not None:
        raise RuntimeError("this NansenseCallback is already in a fit_with_time_travel run")
    travel = _TimeTravel(cache_dir) if callback._enabled else None
    callback._travel = travel
    try:
        while True:
            trainer = make_trainer()
            if not isinstance(trainer, Trainer):
                raise TypeError(f"make_trainer must return a lightning Trainer, got {type(trainer).__name__}")
            if callback not in trainer.callbacks:
                trainer.callbacks.append(callback)
            try:
                trainer.fit(model, train_dataloaders=train_dataloaders, val_dataloaders=val_dataloaders,
                            datamodule=datamodule)
                return
            except TimeTravelJump as jump:
                if travel is None:
                    raise
                last = travel.epoch if travel.epoch is not None else callback._epoch
                travel.jumped(jump, last)
    finally:
        callback._travel = None


# ---------------------------------------------------------------- replaying a capsule as a Lightning run


class LightningCapsule(Capsule):
    """A capsule replayed by a Lightning run (nansense.lightning.replay_capsule).

    gradients_match() compares the gradients the replayed step computed
    (before the optimizer step, as the guard saw them) with the recorded
    ones; epoch, batch_idx and global_step are where the run tripped."""

    def __init__(self, native, lightning: dict, match: Optional[tuple[bool, str]]):
        super().__init__(native)
        self.epoch: int = lightning["epoch"]
        self.batch_idx: int = lightning["batch_idx"]
        self.global_step: int = lightning["counters"]["global_step"]
        self._match = match

    def gradients_match(self) -> tuple[bool, str]:
        if self._match is None:
            return False, "the replayed run made no optimizer step (training_step returned None?)"
        return self._match


_FORCED = ("max_epochs", "max_steps", "limit_train_batches", "limit_val_batches", "num_sanity_val_steps",
           "accumulate_grad_batches")


def _read_capsule(path: str, network: torch.nn.Module, kind: str) -> dict:
    """The Lightning part of a capsule (its batch, counters and position).
    Reading it restores the weights too, as the replay proper does again
    right before its step; the RNG is left as it was."""
    seen: dict = {}

    def load(data: bytes) -> None:
        seen.update(torch.load(io.BytesIO(data), map_location="cpu", weights_only=True))

    rng = rng_state()
    try:
        _nansense.replay_capsule(path, module_specs(network), kind, load)
    finally:
        set_rng_state(rng)
    lightning = seen.get("lightning")
    if lightning is None or lightning.get("batch") is None:
        raise _nansense.CapsuleError(f"{path} was not recorded by NansenseCallback (it holds no Lightning batch): "
                                     "replay it with nansense.replay_capsule")
    return lightning


def replay_capsule(path: Union[str, os.PathLike], model: LightningModule, *, module: Optional[str] = None,
                   **trainer_kwargs: Any) -> LightningCapsule:
    """Replay a capsule NansenseCallback wrote as a Lightning run: a fresh
    Trainer fits model on the capsule's batch alone, entering at the
    tripping step with the weights, buffers, optimizer and scheduler state,
    RNG and loop counters (current_epoch, global_step) it had, so the NaN
    happens again, bit for bit on the CPU. module is the callback's model=
    path. Other keyword arguments go to the Trainer (callbacks, accelerator,
    precision...; pass a NansenseCallback to watch the replay in the UI);
    the batch count and epochs are the replay's own. The batch is the one
    training_step received: on_before_batch_transfer and
    on_after_batch_transfer are skipped for it. CapsuleError says why a
    capsule does not fit the model (or its configure_optimizers).
    """
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a capsule file path, got {type(path).__name__}")
    if not isinstance(model, LightningModule):
        raise TypeError(f"model must be the LightningModule the capsule was recorded from, got "
                        f"{type(model).__name__}")
    forced = [k for k in _FORCED if k in trainer_kwargs]
    if forced:
        raise TypeError(f"replay_capsule runs one batch: it sets {', '.join(forced)} itself")
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"no capsule at {path}")
    network = NansenseCallback(model=module)._network(model)
    loader = _OneBatch(None)
    replay = _Replay(path, network, loader)
    callbacks = list(trainer_kwargs.pop("callbacks", None) or [])
    options = dict(logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    options.update(trainer_kwargs)
    trainer = Trainer(max_epochs=1, limit_val_batches=0, num_sanity_val_steps=0, callbacks=[replay, *callbacks],
                      **options)
    # The batch is already past the transfer hooks: let it through as it is.
    overridden = {name: model.__dict__.get(name) for name in ("on_before_batch_transfer", "on_after_batch_transfer")}
    model.on_before_batch_transfer = lambda batch, dataloader_idx: batch
    model.on_after_batch_transfer = lambda batch, dataloader_idx: batch
    try:
        trainer.fit(model, train_dataloaders=loader)
    finally:
        for name, value in overridden.items():
            if value is None:
                model.__dict__.pop(name, None)
            else:
                model.__dict__[name] = value
    if replay.native is None:
        raise _nansense.CapsuleError(f"the replay of {path} ran no training batch")
    return LightningCapsule(replay.native, replay.lightning, replay.match)


class _Replay(Callback):
    def __init__(self, path: str, network: torch.nn.Module, loader: _OneBatch):
        self.path, self.network, self.loader = path, network, loader
        self.kind = ""
        self.lightning: dict = {}
        self.native = None
        self.match: Optional[tuple[bool, str]] = None

    def on_fit_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        # The capsule names its state after the optimizer and scheduler the
        # recording run's configure_optimizers made: this run's must match.
        optimizer, scheduler = _optimizer_of(trainer), _scheduler_of(trainer)
        self.kind = state_kind(optimizer, scheduler) if optimizer is not None or scheduler is not None else ""
        self.lightning = _read_capsule(self.path, self.network, self.kind)
        self.loader._batch = unpickled(self.lightning["batch"])

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        # The Trainer stands where the recording run tripped: current_epoch
        # and global_step as they were, one epoch (one batch) left to run.
        epoch = self.lightning["epoch"]
        _set_loop_counters(trainer, epoch, self.lightning["counters"])
        trainer.fit_loop.max_epochs = epoch + 1

    def on_train_batch_start(self, trainer: Trainer, pl_module: LightningModule, batch: Any, batch_idx: int) -> None:
        # Right before the step: the weights, buffers, RNG and thread count
        # the tripping batch began with, and the optimizer's state.
        def load(data: bytes) -> None:
            _apply_optimizer_state(trainer, torch.load(io.BytesIO(data), map_location="cpu", weights_only=True))
        self.native = _nansense.replay_capsule(self.path, module_specs(self.network), self.kind, load)

    def on_before_optimizer_step(self, trainer: Trainer, pl_module: LightningModule, optimizer) -> None:
        if self.native is not None and self.match is None:
            self.match = self.native.gradients_match()
