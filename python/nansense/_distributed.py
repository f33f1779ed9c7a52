"""Distributed runs (torch.distributed, DDP): rank 0 leads, the other ranks follow.

nansense.start() on a rank of an initialised process group of two or more
ranks joins the run: the engine's coordinator (src/distributed/coordinator.h,
the one implementation of the rank protocol, shared with C++ programs)
speaks it over the process group's TCPStore. The protocol is described once,
in docs/guide/distributed.md, "The rank protocol". What is left here is what
only Python can do: find the process group and its store, and hook a DDP
wrapper so that its first static-graph backward is checked before DDP
averages the gradients.
"""

from __future__ import annotations

import os
import weakref
from typing import Any, Optional

import torch
from torch.utils import _pytree

from . import _nansense
# The engine's type (python/bindings.cpp), raised by its coordinator.
from ._nansense import DistributedError as DistributedError


def process_group() -> Optional[Any]:
    """torch.distributed when a process group of 2+ ranks is initialised."""
    dist = getattr(torch, "distributed", None)
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return None
    return dist if dist.get_world_size() > 1 else None


def _tcp_store(dist) -> Any:
    store = dist.distributed_c10d._get_default_store()
    while isinstance(store, dist.PrefixStore):
        store = store.underlying_store
    if not isinstance(store, dist.TCPStore):
        raise _nansense.UsageError(
            f"nansense coordinates the ranks over the process group's TCPStore, but this group's store is a "
            f"{type(store).__name__}: initialise it with init_method='env://' or 'tcp://...' (torchrun does)")
    return store


class Coordinator:
    """One rank's place in the run, as the front end (the session,
    lightning.py) asks about it; the engine speaks the protocol."""

    def __init__(self, engine: Any, dist: Any):
        self.engine = engine
        self.rank = dist.get_rank()
        self.world = dist.get_world_size()
        self.leader = self.rank == 0
        tcp = _tcp_store(dist)
        engine.join_run(tcp.host, tcp.port, self.rank, self.world)

    def check_ahead_of(self, wrapper: Any) -> None:
        """The run's DDP wrapper: where its first backward would average the
        gradients before this rank's own are checked, check them first.

        With static_graph=True, DDP's first backward averages the gradients
        in a final callback that the node after its forward's output queues,
        ahead of the check (queued by the first parameter hook to fire),
        which would then take the averaged gradients for this rank's own. A
        hook on the wrapper's outputs queues the check ahead of DDP's; the
        forward hook goes once DDP has queued its averaging.
        """
        ddp = torch.nn.parallel.DistributedDataParallel
        # DDP averages every rank's gradients before the check of the
        # averaged ones: a NaN or Inf that arose on any rank trips rank 0's
        # own check of that batch, so a served rank 0 sends the next
        # decision without waiting for the followers' word of a clean batch.
        averaged = isinstance(wrapper, ddp)
        self.engine.set_gradients_averaged(averaged)
        if not averaged or not getattr(wrapper, "static_graph", False):
            return
        engine = weakref.ref(self.engine)

        def first(_grad: torch.Tensor) -> None:
            live = engine()
            if live is not None:
                live.check_gradients_first()

        def forwarded(module: Any, _inputs: Any, output: Any) -> None:
            if getattr(module, "_static_graph_delay_allreduce_enqueued", True) or engine() is None:
                handle.remove()
                return
            try:
                tensors = _pytree.tree_flatten(output)[0]
            except Exception:  # an output pytree cannot walk: its outermost tensor, if it is one
                tensors = [output]
            for t in tensors:
                if isinstance(t, torch.Tensor) and t.requires_grad and t.grad_fn is not None:
                    t.register_hook(first)
        handle = wrapper.register_forward_hook(forwarded)

    def meet_after_batch(self) -> None:
        """Lightning: the ranks meet right after a batch ended, not as the
        next begins (its loop makes a collective of its own in between); the
        next batch begins with begin_batch(settled=True). May raise
        TimeTravelJump or DistributedError."""
        self.engine.meet_after_batch()

    def abandon(self, why: str) -> None:
        """This rank left its loop by an exception: the others stop at their
        next boundary instead of waiting for it."""
        self.engine.leave_run(why)

    def request_halt(self) -> None:
        """Rank 0: every rank's `halted` turns true at one boundary, the one
        whose decision is sent next (a driver that stops its loop there,
        such as Lightning's Trainer, stops every rank after the same batch)."""
        self.engine.request_halt()

    @property
    def halted(self) -> bool:
        """True from the boundary that carried rank 0's request_halt() on."""
        return self.engine.halted()

    # What the distributed tests count (tests/python/ddp_worker.py).
    @property
    def _n(self) -> int:
        return self.engine.run_counts()[0]

    @property
    def _waited(self) -> int:
        return self.engine.run_counts()[1]

    @property
    def _cleans(self) -> int:
        return self.engine.run_counts()[2]

    @property
    def _sent_clean(self) -> int:
        return self.engine.run_counts()[3]


def rank_dir(path: str, rank: int) -> str:
    """Where rank `rank` keeps what is its own (NaN capsules, epoch checkpoints)."""
    tail = f"rank_{rank}"
    return path if os.path.basename(os.path.normpath(path)) == tail else os.path.join(path, tail)


def start(session: Any, engine: Any, dist: Any, wrapper: Any = None) -> Coordinator:
    """The distributed side of nansense.start() on one rank (every rank calls it); `wrapper`: the model
    as passed, its DDP wrapper where it had one. The engine makes its check settings and checkpoints the
    rank's own (rank_<r> folders, no traced re-run) and detaches a follower."""
    coordinator = Coordinator(engine, dist)
    coordinator.check_ahead_of(wrapper)
    return coordinator
