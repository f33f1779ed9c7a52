"""Distributed runs (torch.distributed, DDP): rank 0 leads, the other ranks follow.

nansense.start() on a rank of an initialised process group of two or more
ranks makes a Coordinator. Rank 0's session is the one the UI and MCP drive;
the other ranks' sessions never pause on their own (detached, no server, no
output beyond a NaN's log line). The rank protocol this module speaks over
the process group's TCPStore (its keys, a follower's messages, rank 0's
decisions, the batch ahead, holding the update before the optimizer step,
settled boundaries, jumps, closing, losing the run) is described once, in
docs/guide/distributed.md, "The rank protocol".

Its threads: the training thread meets the boundaries (boundary(),
release(), release_ahead()); a heartbeat thread per rank watches the peers;
rank 0 has a reader per follower (its messages, in order) and a follower a
fetcher (rank 0's decisions, ahead); a sender thread sets the keys the
training thread and the engine's callbacks (settled, update decided, await
leader, from the backward's final callback) hand it. Every wait blocks in
the store; losing the run sets every key this rank waits on to "!<why>".
"""

from __future__ import annotations

import datetime
import itertools
import json
import os
import queue
import threading
import time
import weakref
from typing import Any, NoReturn, Optional

import torch
from torch.utils import _pytree

from . import _nansense
# The engine's type (python/bindings.cpp), raised by this coordinator too.
from ._nansense import DistributedError as DistributedError

ENV_TIMEOUT = "NANSENSE_DDP_TIMEOUT"
_DEFAULT_TIMEOUT = 30.0

_SKIP_REFUSED = (
    "this is a distributed run and not every rank holds this batch's update before its optimizer step (a rank whose "
    "checks are off, or did not run on this batch, made its step with the averaged gradients), so skipping it on "
    "rank 0 alone would leave the model replicas different; apply it, and rewind with time travel (session.epochs) "
    "to undo it on every rank")
_sessions = itertools.count()  # per process: every rank starts its sessions in the same order


def process_group() -> Optional[Any]:
    """torch.distributed when a process group of 2+ ranks is initialised."""
    dist = getattr(torch, "distributed", None)
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return None
    return dist if dist.get_world_size() > 1 else None


def _timeout() -> float:
    raw = os.environ.get(ENV_TIMEOUT)
    if raw is None:
        return _DEFAULT_TIMEOUT
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise ValueError(f"{ENV_TIMEOUT} must be a number of seconds > 0, got {raw!r}")
    return value


def _tcp_store(dist) -> Any:
    store = dist.distributed_c10d._get_default_store()
    while isinstance(store, dist.PrefixStore):
        store = store.underlying_store
    if not isinstance(store, dist.TCPStore):
        raise _nansense.UsageError(
            f"nansense coordinates the ranks over the process group's TCPStore, but this group's store is a "
            f"{type(store).__name__}: initialise it with init_method='env://' or 'tcp://...' (torchrun does)")
    return store


class _Sender:
    """Sets store keys in a thread of its own, in the order posted: the
    training thread hands a decision or a report over and goes on (a set
    waits for the store's server thread, which on busy cores waits for a
    core: 0.26 ms a batch on rank 0 in bench/python/ddp.py). A set that
    fails goes to `failed(what, error)` (the store is gone: the coordinator
    ends this rank's waits with the reason)."""

    def __init__(self, store: Any, name: str, failed: Any):
        self._store = store
        self._failed = failed
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def post(self, key: str, value: Any) -> None:
        self._queue.put((key, value))

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            try:
                self._store.set(*item)
            except Exception as e:  # any error of the store's client: it is gone
                self._failed(f"setting {item[0]}", e)

    def close(self) -> None:
        """Sends what was posted, then ends (at most 5 s)."""
        self._queue.put(None)
        self._thread.join(timeout=5)
        self._store = None


class Coordinator:
    """One rank's side of the boundary exchange (see the module docstring)."""

    def __init__(self, engine: Any, dist: Any):
        self.dist = dist
        self.engine = engine
        self.rank = dist.get_rank()
        self.world = dist.get_world_size()
        self.leader = self.rank == 0
        self.timeout = _timeout()
        tcp = _tcp_store(dist)
        prefix = f"nansense/{next(_sessions)}/"
        long = datetime.timedelta(days=7)

        def client():
            return dist.PrefixStore(prefix, dist.TCPStore(tcp.host, tcp.port, is_master=False, timeout=long,
                                                          wait_for_workers=False))
        self._main = client()   # the training thread's keys
        self._side = client()   # the heartbeat thread's
        self._n = 0             # boundaries met
        self._cond = threading.Condition()  # guards what the threads below hand over
        self._awaiting: dict[str, list[str]] = {}  # thread name -> the keys it waits for in the store
        self._lost: Optional[str] = None
        self._closed = False
        self._left: Optional[str] = None  # why this rank left the run (_leave)
        # Rank 0: what its readers (one per follower) read.
        self._seen: dict[int, int] = {r: -1 for r in range(1, self.world)}  # rank -> the last boundary of its news
        self._tripped_at: dict[int, dict] = {}   # boundary -> {rank: trip} of the followers
        self._closed_at: dict[int, list[int]] = {}  # boundary -> followers that closed there
        self._trips: dict[int, dict] = {}    # rank -> its first trip
        self._own_trip_at: set[int] = set()  # boundaries where rank 0's own trip was news
        self._hold_wanted = False            # a follower tripped where rank 0 did not wait: hold at the next wait
        self._pending: Optional[int] = None  # the boundary gathered, its decision not yet sent
        self._sent = -1                      # the last boundary whose decision is sent (under _cond)
        self._gathering = -1                 # the boundary rank 0's training thread gathers last (under _cond)
        self._clean: dict[int, set] = {}     # boundary -> followers whose batch before it checked clean
        self._ready: Optional[tuple] = None  # (boundary, its decision): rank 0's batch before it checked clean
        self._clean_sent: Optional[bool] = None  # whether the followers were last told to report clean batches
        self._sent_clean = 0                 # decisions sent once the batch checked clean (see _take_ready)
        self._stats_sent: Optional[dict] = None  # the statistics settings the followers have
        self._halt_asked = False             # request_halt(): the next decision sent carries it
        self._halt_at: Optional[int] = None  # every rank: the boundary whose decision carried the halt
        self._stats_version: Optional[int] = None  # the engine's settings version they were read at
        self._shard_warned: set[int] = set()  # ranks whose malformed statistics were reported
        # Rank 0: the followers holding the update of the batch before boundary n, before their optimizer step
        # (under _cond).
        self._holding: dict[int, set] = {}
        self._answered: set[int] = set()     # boundaries whose held updates rank 0 decided (h/<n> set)
        self._decided: dict[int, bool] = {}  # boundary -> rank 0 skipped its update of the batch before it
        self._past = -1                      # the last boundary rank 0's training thread reached
        # A follower: the decisions fetched ahead; its news sent so far.
        self._decisions: dict[int, bytes] = {}
        self._posted = 0
        self._waited = 0        # boundaries where this follower waited for rank 0's decision
        self._cleans = 0        # batches this follower reported checked clean
        self._report_clean = False  # rank 0 wants word of each batch checked clean
        # Rank 0: the run's gradients are averaged by DDP before every
        # rank's second check, so rank 0's own clean check of them says the
        # followers' NaN/Inf checks pass too (check_ahead_of).
        self._averaged = False
        self._rejoin = False  # a follower that made a jump: its engine landed paused, detach it again
        self._checkpoints_sent: Optional[tuple] = None  # the epochs this follower last reported
        self._handshake()
        self._stop = threading.Event()
        self._said_failed = False  # a store failure while closing was printed
        self._settle_off: Optional[str] = None  # why _settled() is off (it failed once)
        self._sender = _Sender(client(), f"nansense-ddp-sender-{self.rank}", self._store_failed)
        self._heartbeat = threading.Thread(target=self._beat, name=f"nansense-ddp-heartbeat-{self.rank}", daemon=True)
        if self.leader:
            self._feeds = [threading.Thread(target=self._read_news, args=(r, client()), daemon=True,
                                            name=f"nansense-ddp-news-{r}") for r in range(1, self.world)]
        else:
            self._feeds = [threading.Thread(target=self._fetch_decisions, args=(client(),), daemon=True,
                                            name=f"nansense-ddp-decisions-{self.rank}")]
        self._heartbeat.start()
        for feed in self._feeds:
            feed.start()
        # A batch whose checks are over (its backward checked clean) can no
        # longer pause: once rank 0's and every follower's are, rank 0
        # sends the next boundary's decision, while the ranks make their
        # optimizer step.
        me = weakref.ref(self)

        def settled() -> None:
            coordinator = me()
            if coordinator is not None:
                coordinator._settled()
        engine.set_settled_callback(settled)
        # A batch that tripped stops every rank before its optimizer step:
        # its gradients are checked once averaged too (DDP averages them
        # inside backward, so a NaN that arose on any rank is in every
        # rank's), rank 0 pauses there, and a follower waits there for rank
        # 0's choice: apply the update or skip it (where every rank holds).
        engine.check_after_reduction(True)
        if self.leader:
            engine.refuse_skip(_SKIP_REFUSED)

            def decided(skipped: bool) -> None:
                coordinator = me()
                if coordinator is not None:
                    coordinator._update_decided(skipped)
            engine.set_update_decided_callback(decided)
        else:
            def await_leader() -> Optional[bool]:
                coordinator = me()
                return None if coordinator is None else coordinator._await_leader()
            engine.set_await_leader_callback(await_leader)

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
        self._averaged = isinstance(wrapper, ddp)
        if not self._averaged or not getattr(wrapper, "static_graph", False):
            return
        me = weakref.ref(self)

        def first(_grad: torch.Tensor) -> None:
            coordinator = me()
            if coordinator is not None and not coordinator._closed:
                coordinator.engine.check_gradients_first()

        def forwarded(module: Any, _inputs: Any, output: Any) -> None:
            if getattr(module, "_static_graph_delay_allreduce_enqueued", True) or me() is None:
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

    # ---- start

    def _handshake(self) -> None:
        self._main.set(f"start/{self.rank}", b"1")
        keys = [f"start/{r}" for r in range(self.world)]
        try:
            self._main.wait(keys, datetime.timedelta(seconds=self.timeout))
        except Exception:
            missing = [r for r in range(self.world) if not self._main.check([f"start/{r}"])]
            if not missing:
                return
            started = [r for r in range(self.world) if r not in missing]
            raise DistributedError(
                f"nansense.start() ran on rank(s) {', '.join(map(str, started))} but not on rank(s) "
                f"{', '.join(map(str, missing))} within {self.timeout:g} s ({ENV_TIMEOUT}): call nansense.start() "
                f"on every rank of the process group (enabled=False on every rank turns it off)") from None

    # ---- heartbeat and the watch on the peers

    def _beat(self) -> None:
        interval = min(1.0, self.timeout / 10)
        peers = [r for r in range(self.world) if r != self.rank] if self.leader else [0]
        last: dict[int, tuple[int, float]] = {}
        deleted = 0  # rank 0: boundaries whose decisions are removed
        reported = 0  # a follower: the boundaries it said it met
        while not self._stop.wait(interval):
            try:
                self._side.add(f"hb/{self.rank}", 1)
                if self.leader:
                    # Decisions every follower has passed.
                    passed = min(self._side.add(f"at/{r}", 0) for r in peers) - 1
                    while deleted < passed:
                        self._side.delete_key(f"g/{deleted}")
                        deleted += 1
                else:
                    # The boundaries this rank has met (rank 0 removes the decisions of those passed).
                    met = self._n
                    self._side.add(f"at/{self.rank}", met - reported)
                    reported = met
                now = time.monotonic()
                for r in peers:
                    if self._side.check([f"x/{r}"]):
                        why = self._side.get(f"x/{r}").decode(errors="replace")
                        self._lose(f"rank {r} of {self.world} left the run: {why}")
                        return
                    count = self._side.add(f"hb/{r}", 0)
                    seen = last.get(r)
                    if seen is None or seen[0] != count:
                        last[r] = (count, now)
                    elif now - seen[1] > self.timeout:
                        self._lose(f"rank {r} of {self.world} stopped answering: no heartbeat for "
                                   f"{now - seen[1]:.0f} s (it died or hangs; {ENV_TIMEOUT}={self.timeout:g})")
                        return
            except Exception as e:  # the store itself is gone
                if self._stop.is_set():
                    return
                self._lose(self._store_gone(e))
                return

    @staticmethod
    def _store_gone(e: Exception) -> str:
        return (f"the process group's store stopped answering ({type(e).__name__}: {e}); the rank that hosts it "
                "(rank 0, or torchrun's agent) probably died")

    def _lose(self, why: str) -> None:
        with self._cond:
            if self._lost is not None:
                return
            self._lost = why
            awaiting = [key for keys in self._awaiting.values() for key in keys]
            self._cond.notify_all()
        if self.leader:
            # The UI shows it, and a pause in progress ends.
            self.engine.mark_lost(why)
        # End the feed thread's wait in the store.
        for key in awaiting:
            try:
                self._side.set(key, b"!" + why.encode())
            except Exception:
                break  # the store is gone: the wait fails by itself

    def _raise_lost(self) -> NoReturn:
        # The peers still waiting stop too, with the reason.
        self._leave(f"rank {self.rank} stopped: {self._lost}")
        raise DistributedError(f"nansense (rank {self.rank}): {self._lost}")

    # ---- the feed threads: each waits in the store for the next boundary's keys

    def _feed_wait(self, store: Any, keys: list[str]) -> Optional[list[bytes]]:
        """The values of keys once all are set; None when the run is lost
        or this rank closed (a key set to "!why")."""
        name = threading.current_thread().name
        with self._cond:
            if self._lost is not None or self._stop.is_set():
                return None
            self._awaiting[name] = keys
        try:
            values = store.multi_get(keys)
        except Exception as e:
            if not self._stop.is_set():
                self._lose(self._store_gone(e))
            return None
        finally:
            with self._cond:
                self._awaiting.pop(name, None)
        return None if any(v.startswith(b"!") for v in values) else values

    def _read_news(self, r: int, store: Any) -> None:
        """Rank 0's reader of follower r: its news, message after message
        (q/<r>/<k>; each names its boundary, "b")."""
        k = 0
        while True:
            key = f"q/{r}/{k}"
            values = self._feed_wait(store, [key])
            if values is None:
                return
            try:
                news = json.loads(values[0])
                if "clean" in news:
                    # Its batch before boundary `clean` checked clean (it has
                    # not reached the boundary yet).
                    with self._cond:
                        self._clean.setdefault(int(news["clean"]), set()).add(r)
                        ready = self._take_ready()
                    self._send(store, ready)
                    self._delete(store, key)
                    k += 1
                    continue
                if "held" in news:
                    self._note_held(r, int(news["held"]), news.get("trip"), store)
                    self._delete(store, key)
                    k += 1
                    continue
                n = int(news["b"])
                self._add_shard(r, news)
                self._note_checkpoints(r, news)
            except Exception as e:  # the run goes on; this news is not taken
                if self._stop.is_set():
                    return
                print(f"[nansense] rank {r}'s news {k} could not be read: {e}", flush=True)
                k += 1
                continue
            trip = news.get("trip")
            if trip:
                self._record_trip(r, trip)
            with self._cond:
                if trip:
                    self._tripped_at.setdefault(n, {})[r] = trip
                    if n <= self._sent:
                        self._hold_wanted = True  # rank 0 did not wait here: it holds at its next wait
                if news.get("close"):
                    self._closed_at.setdefault(n, []).append(r)
                self._seen[r] = n
                self._cond.notify_all()
            self._delete(store, key)
            k += 1

    def _record_trip(self, r: int, trip: dict) -> None:
        """Rank 0 (a reader): follower r's trip, named at once (rank 0 may be
        paused in that batch for its own trip)."""
        tripped = {r: trip}
        own = self.engine.standing_trip()
        if own is not None and own["position"] == trip.get("position"):
            tripped[0] = own  # rank 0 tripped on the same batch
        self._record_trips(tripped)

    def _note_held(self, r: int, n: int, trip: Optional[dict], store: Any) -> None:
        """Rank 0 (a reader): follower r holds the update of the batch
        before boundary n, before its optimizer step, until h/<n> says
        what to do with it."""
        if trip:
            self._record_trip(r, trip)
        with self._cond:
            held = self._holding.setdefault(n, set())
            held.add(r)
            if trip:
                self._tripped_at.setdefault(n, {})[r] = trip
                if n <= self._sent:
                    self._hold_wanted = True  # rank 0 did not wait here: it holds at its next wait
            # Rank 0 decided its own update of that batch already (or went
            # past it: applied): the follower's goes the same way.
            answer = n not in self._answered and (n in self._decided or n <= self._past)
            skip = self._decided.get(n, False)
            # Every rank holds it: rank 0's pause there may skip it.
            if not answer and n not in self._answered and len(held) == self.world - 1:
                self.engine.refuse_skip("")
        if answer:
            self._answer(n, skip, store)

    def _answer(self, n: int, skip: bool, store: Any) -> None:
        """Rank 0: the followers holding the update of the batch before
        boundary n apply (or skip) it."""
        with self._cond:
            if n in self._answered:
                return
            self._answered.add(n)
            self._holding.pop(n, None)
            self.engine.refuse_skip(_SKIP_REFUSED)
        try:
            store.set(f"h/{n}", b"skip" if skip else b"apply")
        except Exception as e:  # any error of the store's client: it is gone
            self._store_failed(f"answering the held updates of boundary {n}", e)

    def _update_decided(self, skipped: bool) -> None:
        """Rank 0's update of this batch is decided, before its optimizer
        step (from the backward's final callback): where its pause there
        ended, or its checks of the averaged gradients are over without
        one. The followers holding theirs do the same; one whose word comes
        later is answered by the reader."""
        n = self._n
        with self._cond:
            self._decided[n] = skipped
            for k in [k for k in self._decided if k < n - 1]:
                del self._decided[k]
            due = n in self._holding and n not in self._answered
        if due and not self._closed and self._main is not None:
            self._answer(n, skipped, self._main)

    def _await_leader(self) -> Optional[bool]:
        """A follower whose batch tripped, before its optimizer step (from
        the backward's final callback): tells rank 0 and waits for its
        choice about the update. True: skip it; None: the run was lost
        (the next boundary says so)."""
        if self._closed or self._main is None:
            return None
        n = self._n
        news: dict[str, Any] = {"held": n}
        trip = self.engine.standing_trip()
        if trip is not None:
            news["trip"] = trip
            self.engine.trip_news()  # told now: not again at the boundary
        try:
            self._main.set(f"q/{self.rank}/{self._posted}", json.dumps(news).encode())
            self._posted += 1
        except Exception as e:
            self._lose(self._store_gone(e))
            return None
        values = self._feed_wait(self._main, [f"h/{n}"])
        return None if values is None else values[0] == b"skip"

    def _fetch_decisions(self, store: Any) -> None:
        """A follower's fetcher: rank 0's decisions, boundary after boundary."""
        n = 0
        while True:
            values = self._feed_wait(store, [f"g/{n}"])
            if values is None:
                return
            with self._cond:
                self._decisions[n] = values[0]
                self._cond.notify_all()
            try:
                if values[0] and json.loads(values[0]).get("close"):
                    return
            except ValueError:
                pass
            n += 1

    def _await(self, ready, timeout: Optional[float] = None) -> bool:
        """The training thread: until ready() (under the lock); raises
        DistributedError when the run is lost first. With a timeout, False
        when it passed first."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while not ready() and self._lost is None:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._cond.wait(left)
            if ready():
                return True
        self._raise_lost()

    # ---- the boundary

    def boundary(self, *, jump: Optional[int] = None, close: bool = False, settled: bool = False) -> None:
        """Meet the other ranks at this batch boundary. Raises
        DistributedError when a rank is lost.

        Rank 0 gathers the followers' news here (and pauses when one
        tripped) unless it let them past this boundary a batch ahead;
        unless this boundary ends in a jump (`jump`: the epoch of the
        TimeTravelJump unwinding rank 0's batch) or the end (`close`), its
        decision is sent by release(), once its next batch has begun
        (begin_batch may raise a jump requested meanwhile: release(jump=k)
        sends it). A follower waits here for the decision; a jump arms the
        same jump on its engine, so its begin_batch raises it.

        `settled`: a boundary met right after a batch ended instead of
        before the next begins (Lightning's loop runs a collective of its
        own in between, which a rank waiting for a paused rank 0 would
        block in): rank 0 sends its decision at once, holding jumps until
        its next batch has begun (release_ahead() then may send the next
        boundary's ahead), and a follower raises a jump here."""
        if self._closed:
            return
        if self._lost is not None:
            self._raise_lost()
        if self._rejoin:
            # The engine pauses on a jump's target whatever its mode; a
            # follower's pauses are rank 0's, so it goes on detached.
            self._rejoin = False
            self.engine.detach()
        n = self._n
        self._n += 1
        if self.leader:
            self._pass(n)
            self._gather(n, close=close, jump=jump is not None)
            if jump is not None or close:
                self.release(jump=jump, close=close)
            elif settled:
                if n > self._sent:
                    # A jump asked for while rank 0 waited here (held for a
                    # follower's trip) is carried out here, by every rank.
                    from ._errors import TimeTravelJump
                    try:
                        self.engine.raise_armed_jump()
                    except TimeTravelJump as jump_now:
                        self.release(jump=jump_now.epoch)
                        raise
                self.release(ahead=False)
        else:
            self._follow(n, close, settled)

    def _pass(self, n: int) -> None:
        """Rank 0 at boundary n: past the batches before it, whose updates
        it applied unless its own pause said otherwise (_update_decided), so
        the followers still holding one do the same."""
        with self._cond:
            self._past = n
            due = [(k, self._decided.get(k, False)) for k in self._holding if k <= n and k not in self._answered]
        for k, skip in due:
            self._answer(k, skip, self._main)

    def _gather(self, n: int, *, close: bool = False, jump: bool = False) -> None:
        if self.engine.trip_news() is not None:
            with self._cond:
                self._own_trip_at.add(n)
        self._pending = n
        with self._cond:
            self._gathering = n
            for k in [k for k in self._clean if k <= n]:
                del self._clean[k]
            let_past = n <= self._sent
        if let_past and not (close or jump):
            return  # let past a batch ahead: the reader takes the news as it comes
        # Every rank waits here: a jump armed meanwhile is made here (a
        # decision prepared but never sent held it).
        self.engine.hold_jumps(False)
        everyone = lambda: min(self._seen.values()) >= n  # noqa: E731
        timed_out = False
        if close and let_past:
            # Let past this boundary, a follower still in its loop (a longer
            # one than rank 0's) would never say so here: rank 0 waits for
            # the followers' last news for as long as for a lost rank.
            timed_out = not self._await(everyone, self.timeout)
        else:
            self._await(everyone)
        if close:
            # A follower whose word of this boundary came without its end
            # runs on (a longer loop than rank 0's).
            with self._cond:
                ended = set(self._closed_at.get(n, []))
                silent = [r for r, seen in self._seen.items() if seen < n]
                going = [r for r, seen in self._seen.items() if seen >= n and r not in ended]
            if silent or going:
                reasons = ([f"no word within {self.timeout:g} s ({ENV_TIMEOUT})"] if silent else []) + (
                    ["its loop went on past rank 0's last batch"] if going else [])
                print(f"[nansense] rank(s) {', '.join(map(str, sorted(silent + going)))} did not reach the end of "
                      f"the loop with rank 0 ({'; '.join(reasons)}): every rank must run the same batches; rank 0 closes "
                      "without their last statistics", flush=True)
            if timed_out:
                return
        with self._cond:
            closed = self._closed_at.pop(n, [])
            tripped = self._tripped_at.pop(n, {})
            hold = self._hold_wanted
            self._hold_wanted = False
            own = n in self._own_trip_at
            self._own_trip_at.discard(n)
            for k in [k for k in self._tripped_at if k < n]:
                del self._tripped_at[k]
            self._own_trip_at = {k for k in self._own_trip_at if k > n}
        if closed and not close:
            why = (f"rank {closed[0]} of {self.world} closed its session while rank 0 was still in its loop: every "
                   "rank must run the same batches")
            with self._cond:
                if self._lost is None:
                    self._lost = why
            self.engine.mark_lost(why)
            self._raise_lost()
        if (tripped or hold) and not own and self.engine.url():
            # A follower tripped (rank 0, which did not, has not paused for
            # it): every rank stands here, before the next batch, until the
            # UI resumes rank 0.
            self.engine.hold_at_boundary()
            if self._lost is not None:
                self._raise_lost()

    def _record_trips(self, tripped: dict) -> None:
        with self._cond:
            fresh = {r: t for r, t in tripped.items() if r not in self._trips}
            self._trips.update(fresh)
            trips = dict(self._trips)
        if fresh:
            # The engine words the note (the C++ coordinator's too).
            self.engine.note_rank_trips(json.dumps(trips), json.dumps(tripped), self.world)

    def _add_shard(self, rank: int, news: dict) -> None:
        """Rank 0 (the reader): a follower's layer statistics, added to the view."""
        shard = news.get("stats")
        if not shard:
            return
        try:
            self.engine.add_stats_shard(rank, self.world, shard)
        except Exception as e:  # the run goes on; the Stats page shows rank 0's own then
            if rank not in self._shard_warned:
                self._shard_warned.add(rank)
                print(f"[nansense] the statistics of rank {rank} could not be added to rank 0's: {e}", flush=True)

    def _note_checkpoints(self, rank: int, news: dict) -> None:
        """Rank 0 (the reader): the epochs a follower can be rewound to."""
        if "checkpoints" in news:
            held = news["checkpoints"]
            self.engine.set_peer_checkpoints(rank, [int(e) for e in held["epochs"]], str(held["where"]))

    def _decision(self, n: int) -> bytes:
        out: dict[str, Any] = {}
        if self._halt_asked and self._halt_at is None:
            self._halt_at = n
            out["halt"] = True
        # The followers collect what rank 0 collects (as of this batch), so
        # that their shards add up to the global batch.
        clean = bool(self.engine.checks_can_pause()) and not self._averaged
        if clean != self._clean_sent:
            self._clean_sent = clean
            out["report_clean"] = clean
        version = self.engine.stats_settings_version()
        if version != self._stats_version:
            self._stats_version = version
            settings = self.engine.stats_settings_for_followers()
            if settings != self._stats_sent:
                self._stats_sent = settings
                out["stats_settings"] = settings
        return json.dumps(out).encode() if out else b""

    def request_halt(self) -> None:
        """Rank 0: every rank's `halted` turns true at one boundary, the one
        whose decision is sent next (a driver that stops its loop there,
        such as Lightning's Trainer, stops every rank after the same batch)."""
        if self.leader:
            self._halt_asked = True

    @property
    def halted(self) -> bool:
        """True from the boundary that carried rank 0's request_halt() on."""
        return self._halt_at is not None and self._halt_at < self._n

    def release(self, *, jump: Optional[int] = None, close: bool = False, ahead: bool = True) -> None:
        """Rank 0: send the decision of the boundary gathered last, and
        (`ahead`) the next one's when nothing can stop rank 0 before it;
        without `ahead`, jumps are held until release_ahead()."""
        if not self.leader or self._pending is None:
            return
        n, self._pending = self._pending, None
        if jump is not None or close:
            self.engine.hold_jumps(False)
            with self._cond:
                self._sent = n
                if self._ready and self._ready[0] == n:
                    # Prepared, never sent: what it told the followers is
                    # told again with the next decision.
                    self._ready = None
                    self._stats_version = self._stats_sent = self._clean_sent = None
                    if self._halt_at == n:
                        self._halt_at = None
            self._main.set(f"g/{n}", json.dumps({"jump": jump}).encode() if jump is not None else self._end_decision())
            if close:
                self.close()
            return
        with self._cond:
            send = n > self._sent
            if send:
                self._sent = n
                # Prepared when rank 0's batch checked clean (it may carry a halt).
                ready = self._ready[1] if self._ready and self._ready[0] == n else None
                self._ready = None
        if send:
            self._sender.post(f"g/{n}", ready if ready is not None else self._decision(n))
        if ahead:
            self.release_ahead()
        else:
            self.engine.hold_jumps(True)

    def release_ahead(self) -> None:
        """Rank 0, its batch begun: send the next boundary's decision now
        when nothing can stop rank 0 before it."""
        if not self.leader or self._closed:
            return
        with self._cond:
            ahead = not self._hold_wanted and self._lost is None
        ahead = ahead and self.engine.runs_through_next_boundary()
        # Held while the followers may pass the next boundary: a jump armed
        # meanwhile is raised a batch later, where every rank waits.
        self.engine.hold_jumps(ahead)
        following = self._n
        with self._cond:
            send = ahead and following > self._sent
            if send:
                self._sent = following
        if send:
            self._sender.post(f"g/{following}", self._decision(following))

    def _settled(self) -> None:
        # From the backward's final callback, with the training thread
        # inside backward(). What fails here turns the early word off, said
        # once: the ranks then meet at every boundary (the full exchange).
        if self._settle_off is not None:
            return
        try:
            if not self.leader:
                if self._report_clean and not self._closed:
                    self._sender.post(f"q/{self.rank}/{self._posted}", json.dumps({"clean": self._n}).encode())
                    self._posted += 1
                    self._cleans += 1
                return
            if self._closed:
                return
            with self._cond:
                # Sent already as the batch began (nothing could stop it).
                ahead = not self._hold_wanted and self._lost is None and self._n > self._sent
            if not ahead or not self.engine.runs_through_next_boundary():
                return
            # Held while the followers may pass the next boundary: a jump
            # armed meanwhile is raised a batch later, where every rank waits.
            self.engine.hold_jumps(True)
            decision = self._decision(self._n)
            with self._cond:
                self._ready = (self._n, decision)
                ready = self._take_ready()
            if ready is not None:
                self._sender.post(f"g/{ready[0]}", ready[1])
        except Exception as e:  # the engine's or the coordinator's own fault: this part alone turns off
            self._settle_off = f"{type(e).__name__}: {e}"
            print(f"[nansense] rank {self.rank}: word of a batch checked clean failed ({self._settle_off}); from "
                  "here on the ranks meet at every boundary", flush=True)

    def _take_ready(self) -> Optional[tuple]:
        """Rank 0, under _cond: the prepared decision, to send now that rank
        0's and every follower's batch before its boundary checked clean
        (under DDP rank 0's says so for all) and no follower's tripped
        (None while one has not, or once rank 0's training thread gathers
        that boundary itself); marked sent."""
        if self._ready is None or self._closed or self._lost is not None or self._hold_wanted:
            return None
        n, decision = self._ready
        # Every follower's word of a clean batch, unless DDP averaged their
        # gradients into rank 0's (whose own check passed); never past a
        # follower's trip in the batch before it (rank 0 holds there).
        need = 0 if self._averaged else self.world - 1
        if n <= self._sent or self._gathering >= n or len(self._clean.get(n, ())) < need or n in self._tripped_at:
            return None
        self._sent = n
        self._ready = None
        self._sent_clean += 1
        return n, decision

    def _send(self, store: Any, ready: Optional[tuple]) -> None:
        if ready is None:
            return
        try:
            store.set(f"g/{ready[0]}", ready[1])
        except Exception as e:  # any error of the store's client: it is gone
            self._store_failed(f"sending the decision of boundary {ready[0]}", e)

    def _delete(self, store: Any, key: str) -> None:
        """Rank 0's reader: removes a follower's news once taken."""
        try:
            store.delete_key(key)
        except Exception as e:  # any error of the store's client: it is gone
            self._store_failed(f"removing {key}", e)

    def _store_failed(self, what: str, e: Exception) -> None:
        """A store operation failed, so the store is gone: in the run, every
        wait of this rank ends with the reason (rank 0's UI shows it); while
        closing, it is said once (the peers' own waits name the loss)."""
        if not self._stop.is_set():
            self._lose(f"{what} failed: " + self._store_gone(e))
        elif not self._said_failed:
            self._said_failed = True
            print(f"[nansense] rank {self.rank}, closing: {what} failed: {self._store_gone(e)}; the other ranks "
                  "still in their loop stop at their next boundary, saying that this rank is lost", flush=True)

    def _follow(self, n: int, close: bool, settled: bool = False) -> None:
        trip = self.engine.trip_news()
        news = json.dumps({"trip": trip}).encode() if trip is not None else b""
        extra = {}
        shard = self.engine.take_stats_shard()
        if shard:
            extra["stats"] = shard.decode()
        # The epochs this rank could be rewound to: rank 0 refuses a jump
        # to any other for every rank.
        tt = self.engine.time_travel_status()
        where = tt.cache_dir + ("" if tt.available or not tt.reason else f" ({tt.reason})")
        held = (tuple(tt.cached_epochs), where)
        if held != self._checkpoints_sent and (tt.available or tt.cached_epochs or tt.total_epochs):
            self._checkpoints_sent = held
            extra["checkpoints"] = {"epochs": list(held[0]), "where": held[1]}
        if extra:
            news = json.dumps({**(json.loads(news) if news else {}), **extra}).encode()
        if close:
            news = json.dumps({"close": True, **(json.loads(news) if news else {})}).encode()
        with self._cond:
            # In hand already: rank 0 let this rank past a batch ahead, and
            # does not wait for its word here (only for news).
            ahead = n in self._decisions
        if not ahead:
            self._waited += 1
        if news or not ahead:
            news = json.dumps({"b": n, **(json.loads(news) if news else {})}).encode()
            self._main.set(f"q/{self.rank}/{self._posted}", news)
            self._posted += 1
        self._await(lambda: n in self._decisions)
        with self._cond:
            value = self._decisions.pop(n)
        if close:
            self.close()
            return
        if not value:
            return
        decision = json.loads(value)
        if decision.get("close"):
            by = decision.get("by", 0)
            if decision.get("left"):
                why = f"rank {by} of {self.world} left the run: {decision['left']}"
            else:
                why = (f"rank {by} closed its session while rank {self.rank} was still in its loop: every rank must "
                       "run the same batches")
            self._leave(why)
            raise DistributedError(f"nansense (rank {self.rank}): {why}")
        if decision.get("halt"):
            self._halt_at = n
        if "report_clean" in decision:
            self._report_clean = bool(decision["report_clean"])
        if "stats_settings" in decision:
            # Collected from this batch on, as rank 0 collects (a failure is printed; training goes on).
            self.engine.apply_stats_settings(json.dumps(decision["stats_settings"]))
        jump = decision.get("jump")
        if jump is not None:
            # Armed here, the jump is raised by this rank's next batch start.
            try:
                self.engine.request_time_travel(jump)
                self._rejoin = True
            except Exception as e:
                why = f"rank {self.rank} cannot jump to epoch {jump}: {e}"
                self._leave(why)
                raise DistributedError(f"nansense: {why}") from e
            if settled:
                self.engine.raise_armed_jump()

    # ---- the end

    def _leave(self, why: str) -> None:
        self._left = why
        if self._main is None:
            return
        try:
            self._main.set(f"x/{self.rank}", why.encode())
        except Exception as e:  # any error of the store's client: it is gone
            self._store_failed(f"saying that rank {self.rank} left", e)

    def abandon(self, why: str) -> None:
        """This rank left its loop by an exception: the others stop at their
        next boundary instead of waiting for it."""
        if self._closed:
            return
        self._leave(why)
        self.close()

    def _end_decision(self) -> bytes:
        """The decision that ends the followers' fetchers: this rank closed
        its session (or left the run, and why)."""
        end = {"close": True, "by": self.rank}
        if self._left:
            end["left"] = self._left
        return json.dumps(end).encode()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        self.engine.set_settled_callback(None)
        if self.leader and self._main is not None:
            # The followers' fetchers wait for the decision after the last
            # one sent: the end. (A follower still in its loop reads it at
            # its next boundary.) Reserved first: no prepared decision goes
            # out under the same key.
            with self._cond:
                self._ready = None
                self._sent += 1
                end_at = self._sent
                self._past = max(self._past, end_at)
                due = [(k, self._decided.get(k, False)) for k in self._holding if k not in self._answered]
            for k, skip in due:
                self._answer(k, skip, self._main)
            try:
                self._main.set(f"g/{end_at}", self._end_decision())
                # The reader waits for news that will not come.
                with self._cond:
                    awaiting = [key for keys in self._awaiting.values() for key in keys]
                for key in awaiting:
                    self._main.set(key, b"!closed")
            except Exception as e:  # any error of the store's client: it is gone
                self._store_failed("telling the followers that rank 0 closed", e)
        elif self._main is not None:
            # The fetcher waits for the decision after this boundary: unless
            # rank 0 sent it, this rank's end is that decision (a rank still
            # in its loop reads there that this one left).
            try:
                self._main.compare_set(f"g/{self._n}", "", self._end_decision().decode())
            except Exception as e:  # any error of the store's client: it is gone
                self._store_failed(f"saying that rank {self.rank} closed", e)
        self._sender.close()  # what it holds goes out before the store connections end
        current = threading.current_thread()
        for thread in [self._heartbeat] + self._feeds:
            if thread is not current:
                thread.join(timeout=5)
        # This rank's store connections end before the process group does
        # (a TCPStore server torn down under live clients aborts the process).
        # A follower's fetcher may still wait for rank 0's end: its
        # connection goes when that comes or the store closes.
        self._main = self._side = None


def rank_dir(path: str, rank: int) -> str:
    """Where rank `rank` keeps what is its own (NaN capsules, epoch checkpoints)."""
    tail = f"rank_{rank}"
    return path if os.path.basename(os.path.normpath(path)) == tail else os.path.join(path, tail)


def settings_for_rank(settings: dict, rank: int) -> dict:
    """A rank's numerical-check settings: its own capsule folder, and no traced
    re-run of a tripped batch (a re-run on one rank would run one more
    forward and backward there than on the others, and DDP's collectives
    would pair the wrong batches)."""
    out = dict(settings)
    if out.get("capsule_dir"):
        out["capsule_dir"] = rank_dir(out["capsule_dir"], rank)
    out["rerun_to_trace"] = False
    return out


def start(session: Any, engine: Any, dist: Any, wrapper: Any = None) -> Coordinator:
    """The distributed side of nansense.start() on one rank (every rank calls it); `wrapper`: the model
    as passed, its DDP wrapper where it had one."""
    rank = dist.get_rank()
    engine.set_debug_settings(settings_for_rank(engine.debug_settings(), rank))
    # Its check settings stay the rank's own whatever sets them (rank 0's UI too).
    engine.set_rank(rank)
    if rank != 0:
        # Followers never pause on their own: rank 0 decides at every boundary.
        engine.detach()
        engine.set_unserved_nan_note(f"rank {rank} follows rank 0, which stops every rank in this batch: before its "
                                     "optimizer step where the averaged gradients are checked, else at its boundary")
    coordinator = Coordinator(engine, dist)
    coordinator.check_ahead_of(wrapper)
    return coordinator
