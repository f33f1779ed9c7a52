"""nansense for the Hugging Face Trainer: a callback that drives a session
from transformers.Trainer (one debugger batch per optimizer step, its
micro-batches named), and NaN capsules replayed through a Trainer.

    from nansense.transformers import NansenseCallback
    trainer = Trainer(model=model, args=args, train_dataset=data, callbacks=[NansenseCallback(port=8080)])
    trainer.train()

Needs transformers (``pip install transformers``; the Trainer needs
accelerate). A plain ``pip install nansense`` does not.
"""

from __future__ import annotations

import io
import math
import os
import sys
import types
import weakref
from typing import Any, Optional, Union

import torch

try:
    from transformers import Trainer, TrainerCallback
except ImportError:
    raise ImportError("nansense.transformers needs transformers: pip install transformers accelerate") from None

from . import _nansense, _setups
from ._adapters import OpenBatch, network_at, pickled, rng_state, serve_options, set_rng_state, unpickled
from ._arguments import check_cache_dir
from ._capsule import Capsule
from ._errors import TimeTravelJump
from ._session import DEFAULT_CACHE_DIR, Session, start
from ._state import module_specs, optimizer_reader, restore_state, state_kind, state_of

__all__ = ["NansenseCallback", "train_with_time_travel", "replay_capsule", "TrainerCapsule"]


# ---------------------------------------------------------------- state saved with capsules

def _find_trainer() -> Optional[Trainer]:
    """The Trainer whose method called this callback: TrainerCallback's
    events carry the model, optimizer and scheduler but not the Trainer, and
    the step's micro-batches are only the Trainer's to see."""
    frame: Optional[types.FrameType] = sys._getframe(1)
    while frame is not None:
        candidate = frame.f_locals.get("self")
        if isinstance(candidate, Trainer):
            return candidate
        frame = frame.f_back
    return None


def _inner(optimizer: Any) -> Any:
    """The torch optimizer inside accelerate's AcceleratedOptimizer."""
    inner = getattr(optimizer, "optimizer", None)
    return inner if isinstance(inner, torch.optim.Optimizer) else optimizer


def _weakly(method: Any) -> Any:
    """method, called through a weak reference to its object."""
    ref = weakref.WeakMethod(method)

    def call(*args: Any) -> Any:
        bound = ref()
        return bound(*args) if bound is not None else None
    return call


def _on_device(micro: list, device: Any) -> list:
    return [{k: (v.to(device) if isinstance(v, torch.Tensor) else v) for k, v in m.items()}
            if isinstance(m, dict) else m for m in micro]


# What a traced re-run repeats under the Trainer (the debug report, the banner
# and the NaN's log line say it; docs/guide/hf_trainer.md).
_RERUN_NOTE = dict(
    ran_twice="the Trainer's training_step (forward and backward) ran this optimizer step's micro-batches twice (the "
              "optimizer step, the LR scheduler's step and global_step count it once)",
    restored=["weights and buffers", "the optimizer's state", "the Trainer's LR scheduler",
              "the GradScaler's scale (fp16)", "torch's, Python's and NumPy's RNG states"],
    seen_twice=["training_step and compute_loss for each micro-batch of that step (a compute_loss override's "
                "counters and prints see it twice)",
                "the backward pass and gradient clipping (max_grad_norm)",
                "the first run's optimizer step runs with its gradients dropped, so it changes nothing (it is the "
                "one global_step counts; the second run steps the optimizer itself)"],
    detect="callback.rerunning (NansenseCallback) is true during the second run, which calls only training_step, "
           "gradient clipping, the optimizer step and the scheduler step: on_step_begin, on_substep_end, "
           "on_pre_optimizer_step, on_step_end and the other callbacks see the step once",
)


# ---------------------------------------------------------------- the callback


class NansenseCallback(OpenBatch, TrainerCallback):
    """Drive a nansense session from a Hugging Face Trainer.

    One debugger batch is one optimizer step: its position is
    (epoch, batch_idx) with batch_idx the step within the epoch, and the
    Trainer's state.global_step counts the same steps. With gradient
    accumulation the step's micro-batches run inside that batch: a captured
    step shows each micro-batch's layers (the second micro-batch's "h.0" is
    "h.0#2"), and a NaN names the micro-batch it arose in
    (callback.tripped_micro_batch, the log line). The session is created
    when training begins and closed when it ends; the UI stays up for
    post-mortem browsing. port / host / open_browser / enabled /
    input_mean / input_std / input_transform mean what they mean on
    nansense.start. model="base_model.model" (an attribute path inside the
    Trainer's model) points nansense at an inner network; without it the
    Trainer's model is watched.

    The schedule comes from the Trainer: its epochs, optimizer steps per
    epoch (max_steps shortens the last), and, with eval_strategy="epoch",
    the evaluation after each epoch as the "val" phase. Evaluation at other
    times (eval_strategy="steps", trainer.evaluate()) runs outside the
    debugger. Distributed, DeepSpeed and FSDP runs and datasets without a
    length are refused with an error saying so.

    The numerical checks hold the update before optimizer.step(): with a
    UI the run pauses in the backward that made the NaN, and skipping the
    update there leaves the weights, the optimizer, the LR scheduler and a
    GradScaler as if the step had not run. Without a UI the first NaN stops
    the Trainer (control.should_training_stop) with a line naming its
    capsule; replay it with nansense.transformers.replay_capsule.
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
                                    enabled=enabled, inside='the Trainer\'s model such as "base_model.model"')
        self._model_attr = model
        self._enabled = enabled
        # Set once training begins, and read only from then on.
        self._session: Any = None                 # the Session
        self._trainer: Any = None                 # the Trainer
        self._patched: dict[str, Any] = {}        # the Trainer's methods this callback wraps, to put back
        self._epoch = 0
        self._phase: Any = None                   # [phase, batches done] of the phase under way
        self._steps_at_epoch = 0                  # global_step when the epoch began
        self._open: Any = None                    # (phase, hooks) of the batch under way
        self._micro: list = []                    # the step's micro-batches, as the Trainer fetched them
        self._num_items: Any = None               # and the token count it passed with them
        self._micro_idx: Optional[int] = None     # the micro-batch running (None between them)
        self._tripped_micro: Optional[int] = None  # the micro-batch of this step a check tripped in
        self._error_before: Any = None            # the standing error when the step began
        self._scheduler_mark: Any = None          # the scheduler's last_epoch when the step began
        self._decided: Optional[bool] = None      # the update held this step: True skipped, False applied
        self._undo: Optional[dict] = None         # what a skipped update restores after the Trainer's step
        self._halted: Optional[str] = None        # the capsule a no-UI stop named
        self._rerunning = False
        self._val_count = 0
        self._eval_epoch = False                  # eval_strategy="epoch": evaluation is the val phase
        self._evaluating = False                  # a val phase's batches are under way
        self._travel: Optional[_TimeTravel] = None  # set by train_with_time_travel

    @property
    def session(self) -> Optional[Session]:
        """The live session, or None before training has begun."""
        return self._session

    @property
    def rerunning(self) -> bool:
        """True while the step's micro-batches run for the second time: the
        traced re-run of a step that tripped a numerical check untraced. The
        weights, buffers, optimizer, LR scheduler, GradScaler and RNG were
        restored to where the step began; what a compute_loss override keeps
        itself was not."""
        return self._rerunning

    @property
    def micro_batch(self) -> Optional[tuple[int, int]]:
        """(index, count) of the micro-batch running now, 0-based; None
        between micro-batches."""
        if self._micro_idx is None:
            return None
        return self._micro_idx, len(self._micro)

    @property
    def tripped_micro_batch(self) -> Optional[int]:
        """The 0-based micro-batch of the last step whose checks tripped, in
        which the non-finite value first showed (None when none tripped)."""
        return self._tripped_micro

    def __repr__(self) -> str:
        state = "not started" if self._session is None else repr(self._session)
        return f"<nansense.transformers.NansenseCallback {state}>"

    # ---- the session

    def _network(self, model: torch.nn.Module) -> torch.nn.Module:
        return network_at(model, self._model_attr)

    @property
    def _engine(self):
        session = self._session
        return session._engine if session is not None and not session._closed else None

    def _check_trainer(self, trainer: Trainer, args: Any, train_dataloader: Any) -> None:
        if args.world_size > 1:
            raise RuntimeError(f"NansenseCallback does not follow distributed Trainer runs yet (world_size="
                               f"{args.world_size}): debug on one process, or use accelerate's plain loop with "
                               "nansense.start")
        if getattr(trainer, "is_deepspeed_enabled", False) or getattr(trainer, "is_fsdp_enabled", False):
            raise RuntimeError("NansenseCallback does not support DeepSpeed or FSDP runs (their gradients are "
                               "sharded or handled outside torch's optimizer)")
        try:
            n = len(train_dataloader)
        except TypeError:
            n = None
        if not n:
            raise RuntimeError("NansenseCallback needs a train dataset with a length (an IterableDataset has "
                               "none): the schedule and the UI's progress are declared from it")

    def on_train_begin(self, args, state, control, model=None, optimizer=None, lr_scheduler=None,
                       train_dataloader=None, **kwargs):
        trainer = _find_trainer()
        if not self._enabled:
            if self._session is None:
                self._session = start(self._network(model), enabled=False)
            return
        if trainer is None:
            raise RuntimeError("NansenseCallback must be called by a transformers.Trainer (its callbacks=[...] or "
                               "trainer.add_callback)")
        reentering = self._travel is not None and self._travel.target is not None
        if self._session is not None and not reentering:
            raise RuntimeError("this NansenseCallback's session closed when its training ended (its UI stays up "
                               "for browsing): give the next trainer.train() a new NansenseCallback")
        self._check_trainer(trainer, args, train_dataloader)
        self._trainer = trainer
        self._network_module = self._network(model)
        self._per_epoch = max(math.ceil(len(train_dataloader) / args.gradient_accumulation_steps), 1)
        self._eval_epoch = str(getattr(args, "eval_strategy", "no")) in ("epoch", "IntervalStrategy.EPOCH") and \
            trainer.eval_dataset is not None
        if self._session is None:
            self._start_session(trainer, state, model)
        self._patch(trainer)
        if self._travel is not None:
            self._travel.train_begin(self, trainer, state)

    def _start_session(self, trainer: Trainer, state: Any, model: Any) -> None:
        # model_wrapped is the compiled module under torch_compile: start()
        # unwraps it and knows the steps that capture nothing run compiled.
        wrapped = trainer.model_wrapped if self._model_attr is None else self._network(model)
        scaler = getattr(trainer.accelerator, "scaler", None)
        self._session = start(wrapped, epochs=state.num_train_epochs, phases={"train": 1}, scaler=scaler,
                              **self._serve)
        engine = self._session._engine
        engine.set_unserved_nan_note("NansenseCallback stops the Trainer after this optimizer step")
        engine.set_rerun_note(_RERUN_NOTE["ran_twice"], _RERUN_NOTE["restored"], _RERUN_NOTE["seen_twice"],
                              _RERUN_NOTE["detect"])
        # The engine holds what it is handed: weakly here, so the Trainer and
        # this callback stay collectable (and a script's server thread ends).
        engine.set_optimizer_reader(_weakly(self._read_optimizer))
        engine.set_state_adapter(state_kind(_inner(trainer.optimizer), trainer.lr_scheduler),
                                 _weakly(self._save_state), _weakly(self._load_state))
        engine.set_update_decided_callback(_weakly(self._update_decided))

    def _patch(self, trainer: Trainer) -> None:
        get_batch_samples, training_step = trainer.get_batch_samples, trainer.training_step
        prediction_step = trainer.prediction_step
        self._training_step = training_step

        def fetched(epoch_iterator, num_batches, device):
            samples, num_items = get_batch_samples(epoch_iterator, num_batches, device)
            self._micro, self._num_items = list(samples), num_items
            return samples, num_items

        def micro_step(model, inputs, num_items_in_batch=None):
            if self._open is None or self._open[0] != "train":
                return training_step(model, inputs, num_items_in_batch)
            self._micro_idx = 0 if self._micro_idx is None else self._micro_idx + 1
            self._engine.set_micro_batch(self._micro_idx)
            try:
                loss = training_step(model, inputs, num_items_in_batch)
            except BaseException as e:
                self._abandon(e)
                raise
            self._note_trip()
            return loss

        def predicted(model, inputs, prediction_loss_only, ignore_keys=None):
            if not self._evaluating:
                return prediction_step(model, inputs, prediction_loss_only, ignore_keys=ignore_keys)
            self._engine.clear_trainer_step()
            self._begin("val", inputs)
            try:
                out = prediction_step(model, inputs, prediction_loss_only, ignore_keys=ignore_keys)
            except BaseException as e:
                self._abandon(e)
                raise
            self._finish(lambda: prediction_step(model, inputs, prediction_loss_only, ignore_keys=ignore_keys))
            return out

        for name, fn in (("get_batch_samples", fetched), ("training_step", micro_step),
                         ("prediction_step", predicted)):
            self._patched[name] = trainer.__dict__.get(name)
            setattr(trainer, name, fn)

    def _unpatch(self) -> None:
        trainer = self._trainer
        for name, previous in self._patched.items():
            if previous is None:
                trainer.__dict__.pop(name, None)
            else:
                trainer.__dict__[name] = previous
        self._patched = {}

    def _read_optimizer(self):
        return optimizer_reader(self._network_module, _inner(self._trainer.optimizer))()

    def _save_state(self) -> bytes:
        """What checkpoints and capsules hold besides the weights: the
        optimizer's, scheduler's and GradScaler's state (as a plain loop's
        session holds them, so nansense.replay_capsule reads them too) and,
        for the Trainer, the step's micro-batches, the one running, every
        RNG and the Trainer's counters."""
        trainer = self._trainer
        state = state_of(_inner(trainer.optimizer), trainer.lr_scheduler, self._session._scaler)
        state["transformers"] = {
            "global_step": trainer.state.global_step, "epoch": self._epoch,
            "step_in_epoch": self._phase[1] if self._phase else 0,
            "micro_batches": pickled(self._micro), "num_items": pickled(self._num_items),
            "micro_batch": -1 if self._micro_idx is None else self._micro_idx,
            "max_steps": trainer.state.max_steps, "rng": rng_state()}
        buffer = io.BytesIO()
        torch.save(state, buffer)
        return buffer.getvalue()

    def _load_state(self, data: bytes) -> None:
        state = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
        trainer = self._trainer
        restore_state(_inner(trainer.optimizer), trainer.lr_scheduler, state, self._session._scaler)
        if self._travel is not None:
            # A jump: the next trainer.train() enters the target with it.
            self._travel.restored = state

    def _update_decided(self, skipped: bool) -> None:
        # The engine's pause before the optimizer step (in the backward of the
        # micro-batch that tripped) ended: skip or apply the whole step.
        self._decided = bool(skipped)

    # ---- the schedule

    def on_epoch_begin(self, args, state, control, **kwargs):
        if self._engine is None:
            return
        self._end_phase()
        epoch = int(round(state.epoch or 0))
        if self._travel is not None:
            self._travel.epoch_end(self)  # the epoch before, evaluation included
        self._epoch = epoch
        self._micro = []
        self._steps_at_epoch = state.global_step
        left = state.max_steps - state.global_step if state.max_steps > 0 else self._per_epoch
        phases = {"train": max(min(self._per_epoch, left), 1)}
        if self._eval_epoch:
            try:
                n_val = len(self._trainer.get_eval_dataloader())
            except TypeError:
                n_val = 0
            if n_val:
                phases["val"] = n_val
        self._session.set_schedule(phases=phases)
        if self._travel is not None:
            self._travel.epoch_begin(self, epoch)

    def on_epoch_end(self, args, state, control, **kwargs):
        if self._engine is None:
            return
        self._end_phase()
        # The Trainer evaluates right after this event when control says so.
        self._evaluating = self._eval_epoch and bool(control.should_evaluate)

    def on_evaluate(self, args, state, control, **kwargs):
        if self._evaluating:
            self._evaluating = False
            self._end_phase()

    def _end_phase(self) -> None:
        if self._phase is not None:
            phase, count = self._phase
            self._phase = None
            self._engine.end_phase(phase, count)

    # ---- batches (train: one optimizer step; val: one prediction step)

    def _begin(self, phase: str, item: Any) -> None:
        session = self._session
        session._first_batch()
        if self._phase is None or self._phase[0] != phase:
            self._end_phase()
            self._phase = [phase, 0]
        self._open = (phase, session._open_batch(phase, self._epoch, item))

    def _abandon(self, e: BaseException) -> None:
        if self._drop_open_batch():
            self._session._left_by(e)
        self._micro_idx = None

    def _note_trip(self) -> None:
        # Which micro-batch the step's checks first tripped in (the check
        # runs at the end of each micro-batch's backward).
        if self._tripped_micro is None and len(self._micro) > 1:
            error = self._engine.debug_error()
            if error is not None and error != self._error_before:
                self._tripped_micro = self._micro_idx

    def _finish(self, rerun) -> None:
        """End the batch under way; while the engine asks, run it again
        (traced: the root cause of a NaN the untraced run found)."""
        phase = self._take_hooks_off()
        session = self._session
        while session._end_batch():
            self._open = (phase, session._open_batch(phase, self._epoch, self._micro if phase == "train" else None))
            self._rerunning = True
            try:
                rerun()
            except BaseException as e:
                self._rerunning = False
                self._abandon(e)
                raise
            self._rerunning = False
            self._take_hooks_off()
        self._phase[1] += 1

    def on_step_begin(self, args, state, control, **kwargs):
        if self._engine is None:
            return
        trainer = self._trainer
        self._micro_idx = None
        self._tripped_micro = None
        self._decided = None
        self._undo = None
        self._error_before = self._engine.debug_error() if len(self._micro) > 1 else None
        self._scheduler_mark = getattr(trainer.lr_scheduler, "last_epoch", None)
        # The UI's words for it: the step's number as the Trainer logs it, its micro-batches.
        self._engine.set_trainer_step(state.global_step + 1, max(len(self._micro), 1))
        self._begin("train", self._micro)

    def on_pre_optimizer_step(self, args, state, control, **kwargs):
        if self._open is None or self._open[0] != "train":
            return
        self._micro_idx = None
        self._engine.set_micro_batch(-1)
        if self._decided:
            self._drop_update()

    def _drop_update(self) -> None:
        """The held update was skipped: the whole step's gradients go (under
        a GradScaler they are made NaN, so its step() skips), and what the
        Trainer's step still moves (the LR scheduler, the scaler's scale) is
        put back once it has run."""
        trainer = self._trainer
        scaler = self._session._scaler.scaler if self._session._scaler is not None else None
        optimizer = _inner(trainer.optimizer)
        scheduler = trainer.lr_scheduler
        self._undo = {"scheduler": scheduler.state_dict() if scheduler is not None else None,
                      "lrs": [group["lr"] for group in optimizer.param_groups],
                      "scaler": scaler.state_dict() if scaler is not None and scaler.is_enabled() else None}
        for group in optimizer.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                if self._undo["scaler"] is not None:
                    p.grad.fill_(float("nan"))
                else:
                    p.grad = None

    def _put_back(self) -> None:
        undo, self._undo = self._undo, None
        if undo is None:
            return
        trainer = self._trainer
        if undo["scheduler"] is not None:
            trainer.lr_scheduler.load_state_dict(undo["scheduler"])
        for group, lr in zip(_inner(trainer.optimizer).param_groups, undo["lrs"]):
            group["lr"] = lr
        if undo["scaler"] is not None:
            self._session._scaler.scaler.load_state_dict(undo["scaler"])

    def on_step_end(self, args, state, control, **kwargs):
        if self._open is None or self._open[0] != "train":
            return
        trainer = self._trainer
        self._micro_idx = None
        self._put_back()
        scheduler_stepped = getattr(trainer.lr_scheduler, "last_epoch", None) != self._scheduler_mark
        self._finish(lambda: self._rerun_step(scheduler_stepped))
        self._halt_without_ui(control)
        return control

    def _rerun_step(self, step_scheduler: bool) -> None:
        """The Trainer's optimizer step by hand, after the engine restored
        where it began: each micro-batch's training_step, clipping, the
        optimizer's step and the scheduler's. The optimizer is stepped
        directly, so global_step does not count the step again."""
        trainer, args = self._trainer, self._trainer.args
        model = trainer.model_wrapped
        self._decided = None
        self._undo = None
        model.zero_grad()
        trainer.current_gradient_accumulation_steps = len(self._micro)
        training_step = self._training_step
        for i, inputs in enumerate(self._micro):
            self._micro_idx = i
            self._engine.set_micro_batch(i)
            training_step(model, inputs, self._num_items)
            if self._decided:
                break  # skipped in this micro-batch's backward: the rest cannot bring the step back
        self._micro_idx = None
        self._engine.set_micro_batch(-1)
        if args.max_grad_norm is not None and args.max_grad_norm > 0:
            trainer.accelerator.clip_grad_norm_(model.parameters(), args.max_grad_norm)
        if self._decided:
            self._drop_update()
        trainer.optimizer.step()
        if step_scheduler and not trainer.accelerator.optimizer_step_was_skipped:
            trainer.lr_scheduler.step()
        model.zero_grad()
        self._put_back()

    def _halt_without_ui(self, control: Any) -> None:
        session = self._session
        if session.url is not None:
            return
        error = session.debug_error
        if error is None or error.capsule is None or error.capsule == self._halted:
            return
        self._halted = error.capsule
        control.should_training_stop = True
        where = f"{error.position.phase} epoch {error.position.epoch} step {error.position.batch_idx}"
        micro = ""
        if self._tripped_micro is not None:
            # Counted from 1, as the engine's text and the page say it.
            micro = f", micro-batch {self._tripped_micro + 1} of {len(self._micro)}"
        print(f"[nansense] the Trainer stops at the NaN of {where} (global_step {self._trainer.state.global_step})"
              f"{micro} (no UI is served); replay it with nansense.transformers.replay_capsule({error.capsule!r}, "
              "trainer)", file=sys.stderr)

    # ---- the end of training

    def on_train_end(self, args, state, control, **kwargs):
        if self._engine is not None:
            self._drop_open_batch(lost=False)
            self._end_phase()
            if self._travel is not None:
                self._travel.epoch_end(self)
                self._travel.abort(self)
        if self._trainer is not None:
            self._unpatch()
        if self._session is not None:
            self._session.close()

    def _left_by_jump(self) -> None:
        """A time-travel jump unwound trainer.train(): the batch under way is
        dropped, and the Trainer's methods are its own again until the next
        attempt patches them."""
        self._drop_open_batch()
        self._phase = None
        self._micro_idx = None
        self._evaluating = False
        if self._trainer is not None:
            self._unpatch()


# ---------------------------------------------------------------- time travel


class _TimeTravel:
    """The engine's epoch loop across trainer.train() attempts: a jump
    unwinds train(), and the next attempt enters the target epoch with the
    Trainer's counters, the optimizer, the LR scheduler, the GradScaler
    and every RNG as that epoch began (the engine restores the weights)."""

    def __init__(self, cache_dir: str):
        self.cache_dir = cache_dir
        self.opened = False
        self.closed = False
        self.target: Optional[int] = None     # the epoch the next attempt enters
        self.restored: Optional[dict] = None  # the target's saved state (the engine loaded it)
        self.epoch: Optional[int] = None      # the epoch under way, checkpointed as it began
        self.log_history: list = []           # the Trainer's log, kept up to the target

    def train_begin(self, callback: NansenseCallback, trainer: Trainer, state: Any) -> None:
        engine = callback._engine
        if not self.opened:
            cache_dir = callback._session._own_dir(self.cache_dir)
            engine.open_epochs(int(state.num_train_epochs), cache_dir, 0, "", None, None)
            self.opened = True
        if self.target is not None and self.restored is not None:
            # This attempt's LR scheduler (and a first attempt's optimizer
            # made anew) get the target's state.
            restore_state(_inner(trainer.optimizer), trainer.lr_scheduler, self.restored, callback._session._scaler)
        trainer.__dict__.pop("_init_training_state", None)

    def epoch_begin(self, callback: NansenseCallback, epoch: int) -> None:
        if self.target is not None:
            if epoch != self.target:
                raise RuntimeError(f"the Trainer entered epoch {epoch}, not the time-travel target {self.target}")
            # The RNG the epoch began with: the loader's shuffle and dropout.
            if self.restored is not None:
                set_rng_state(self.restored["transformers"]["rng"])
            self.target, self.restored = None, None
        self.epoch = epoch
        callback._engine.start_epoch(epoch)

    def epoch_end(self, callback: NansenseCallback) -> None:
        """The epoch under way is over (its evaluation too). A jump asked
        for after its last batch comes back restored: it unwinds train()."""
        epoch, self.epoch = self.epoch, None
        if epoch is None or self.closed:
            return
        try:
            following = callback._engine.end_epoch(epoch, None)
        except BaseException:
            self.abort(callback)
            raise
        if following is None:
            self.closed = True
        elif following != epoch + 1:
            jump = TimeTravelJump(following)
            jump._nansense_restored = True  # type: ignore[attr-defined]
            raise jump

    def jumped(self, callback: NansenseCallback, trainer: Trainer, jump: TimeTravelJump) -> None:
        """A jump unwound train(): restore its target (unless the engine
        did) and set the Trainer up to enter it."""
        last = self.epoch if self.epoch is not None else callback._epoch
        self.epoch = None
        callback._left_by_jump()
        if not getattr(jump, "_nansense_restored", False):
            try:
                callback._engine.end_epoch(last, jump.epoch)
            except BaseException:
                self.abort(callback)
                raise
        if self.restored is None:
            raise RuntimeError(f"the time-travel jump to epoch {jump.epoch} restored no Trainer state")
        self.target = jump.epoch
        # accelerate wraps the optimizer again on the next train(): hand it the torch one.
        trainer.optimizer = _inner(trainer.optimizer)
        self.log_history = list(trainer.state.log_history)
        saved = self.restored["transformers"]
        target, history = self.target, self.log_history
        init_training_state = trainer._init_training_state

        def enter_target(*args: Any, **kwargs: Any) -> tuple[int, int]:
            # The Trainer's state as the target epoch began: its counters,
            # and its log up to there. The loop starts at the target epoch.
            init_training_state(*args, **kwargs)
            trainer.state.global_step = int(saved["global_step"])
            trainer.state.epoch = float(target)
            trainer.state.log_history = [h for h in history if h.get("step", 0) <= trainer.state.global_step]
            return target, 0

        trainer.__dict__["_init_training_state"] = enter_target

    def abort(self, callback: NansenseCallback) -> None:
        if self.opened and not self.closed:
            self.closed = True
            callback._engine.abort_epochs()


def train_with_time_travel(trainer: Trainer, *, callback: Optional[NansenseCallback] = None,
                           cache_dir: Union[str, os.PathLike] = DEFAULT_CACHE_DIR, **train_kwargs: Any) -> Any:
    """Run trainer.train(**train_kwargs) under nansense time travel.

    Equivalent to trainer.train() with the NansenseCallback attached (the
    trainer's own, or callback, which is added), plus the UI's Time
    Travel: each epoch's start is checkpointed to cache_dir (weights,
    buffers, the optimizer, the LR scheduler, a GradScaler, every RNG and
    the Trainer's global_step), and a jump unwinds train() and calls it
    again on the same Trainer, entering the chosen epoch with that state
    restored: the replayed epochs' losses, learning rates and global_step
    are the first timeline's, bit for bit on the CPU. The log history is
    cut back to the target; loggers (report_to) and the Trainer's own
    checkpoints cannot time-travel and see the replayed steps again.
    resume_from_checkpoint applies to the first attempt only. Returns the
    last attempt's TrainOutput.
    """
    if not isinstance(trainer, Trainer):
        raise TypeError(f"trainer must be a transformers.Trainer, got {type(trainer).__name__}")
    if callback is None:
        found = [c for c in trainer.callback_handler.callbacks if isinstance(c, NansenseCallback)]
        if not found:
            raise TypeError("train_with_time_travel needs a NansenseCallback: pass callback=NansenseCallback(...) "
                            "or give the Trainer one (callbacks=[...])")
        callback = found[0]
    elif not isinstance(callback, NansenseCallback):
        raise TypeError(f"callback must be a nansense.transformers.NansenseCallback, got {type(callback).__name__}")
    elif callback not in trainer.callback_handler.callbacks:
        trainer.add_callback(callback)
    cache_dir = check_cache_dir(cache_dir)
    if callback._travel is not None:
        raise RuntimeError("this NansenseCallback is already in a train_with_time_travel run")
    travel = _TimeTravel(cache_dir) if callback._enabled else None
    callback._travel = travel
    model_init = trainer.model_init
    try:
        while True:
            try:
                return trainer.train(**train_kwargs)
            except TimeTravelJump as jump:
                if travel is None:
                    raise
                travel.jumped(callback, trainer, jump)
                # The next attempt goes on from the restored state: no
                # checkpoint to load, no model to make anew.
                train_kwargs.pop("resume_from_checkpoint", None)
                trainer.model_init = None  # type: ignore[assignment]
    finally:
        trainer.model_init = model_init
        trainer.__dict__.pop("_init_training_state", None)
        callback._travel = None


# ---------------------------------------------------------------- replaying a capsule through a Trainer


class TrainerCapsule(Capsule):
    """A capsule replayed through a Trainer (nansense.transformers.replay_capsule).

    micro_batches are the step's micro-batches as the Trainer fetched them;
    micro_batch the one the guard saw the NaN after (the replay ran the step
    up to and including it); global_step and epoch are where the run
    tripped. gradients_match() compares the replayed gradients with the
    recorded ones, bit for bit."""

    def __init__(self, native, saved: dict):
        super().__init__(native)
        self.micro_batches: list = unpickled(saved["micro_batches"]) or []
        self.micro_batch: int = int(saved["micro_batch"])
        self.global_step: int = int(saved["global_step"])
        self.epoch: int = int(saved["epoch"])


def replay_capsule(path: Union[str, os.PathLike], trainer: Trainer, *, module: Optional[str] = None) -> TrainerCapsule:
    """Replay a capsule NansenseCallback wrote, through trainer: a Trainer
    built as the recording one was (the same TrainingArguments and model
    class; a fresh model is fine). Its model gets the weights and buffers
    the tripping step began with, a new optimizer and LR scheduler (made by
    the Trainer) their state, torch's RNG and thread count come back, and
    the step's micro-batches run through trainer.training_step up to the one
    the NaN showed in, so the gradients are the recorded ones, bit for bit
    on the CPU (capsule.gradients_match()). Nothing is stepped: call
    trainer.optimizer.step() to make the recorded update. module is the
    callback's model= path. CapsuleError says why a capsule does not fit.
    """
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a capsule file path, got {type(path).__name__}")
    if not isinstance(trainer, Trainer):
        raise TypeError(f"trainer must be a transformers.Trainer built as the recording one was, got "
                        f"{type(trainer).__name__}")
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"no capsule at {path}")
    model: Any = trainer.model
    network = NansenseCallback(model=module)._network(model)
    if trainer.optimizer is None:
        trainer.create_optimizer()
    # The scheduler the Trainer makes for the capsule's max_steps (read
    # first, with one made for the arguments' own, which names its type).
    provisional = trainer.lr_scheduler is None
    if provisional:
        trainer.create_scheduler(num_training_steps=max(trainer.args.max_steps, 1), optimizer=trainer.optimizer)
    kind = state_kind(_inner(trainer.optimizer), trainer.lr_scheduler)
    saved: dict = {}

    def load(data: bytes) -> None:
        saved.update(torch.load(io.BytesIO(data), map_location="cpu", weights_only=True))

    rng = rng_state()
    try:
        _nansense.replay_capsule(path, module_specs(network), kind, load)
    finally:
        set_rng_state(rng)
    ours = saved.get("transformers")
    if ours is None:
        raise _nansense.CapsuleError(f"{path} was not recorded by nansense.transformers.NansenseCallback (it holds "
                                     "no micro-batches): replay it with nansense.replay_capsule")
    if provisional and int(ours["max_steps"]) != max(trainer.args.max_steps, 1):
        trainer.lr_scheduler = None
        trainer._created_lr_scheduler = False
        trainer.create_scheduler(num_training_steps=int(ours["max_steps"]), optimizer=trainer.optimizer)
    watch = _setups.ScalerWatch(getattr(trainer.accelerator, "scaler", None))

    def restore(data: bytes) -> None:
        restore_state(_inner(trainer.optimizer), trainer.lr_scheduler,
                       torch.load(io.BytesIO(data), map_location="cpu", weights_only=True), watch)

    native = _nansense.replay_capsule(path, module_specs(network), kind, restore)
    micro = unpickled(ours["micro_batches"]) or []
    num_items = unpickled(ours["num_items"])
    last = int(ours["micro_batch"])
    model.train()
    model.zero_grad()
    trainer.current_gradient_accumulation_steps = len(micro)
    for inputs in micro[:last + 1 if last >= 0 else len(micro)]:
        trainer.training_step(model, _on_device([inputs], trainer.args.device)[0], num_items)
    return TrainerCapsule(native, ours)

