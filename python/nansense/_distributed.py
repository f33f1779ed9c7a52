"""Distributed runs (torch.distributed, DDP): rank 0 leads, the other ranks follow.

nansense.start() on a rank of an initialised process group of two or more
ranks makes a _Coordinator. Rank 0's session is the one the UI and MCP drive;
the other ranks' sessions never pause on their own (detached, no server, no
output beyond a NaN's log line). At every batch boundary (before a batch
begins, when a jump unwinds rank 0's batch, and at close()) every rank meets
at one exchange over the process group's own store (a TCPStore):

  each follower r   sets  a/<n>/<r>  = its news since the last boundary
                                       (b"" or JSON: a trip, its DebugError;
                                       its layer statistics, when it
                                       collected since the last boundary)
  rank 0            reads them all (multi_get, waits for every follower),
                    adds the followers' statistics to its own (the Stats
                    page shows the global batch), pauses there when a
                    follower tripped (the UI names the ranks), then sets
                    g/<n>  = the decision (b"" = go on, or JSON: jump to
                    epoch k, stop, the statistics settings changed)
  each follower     reads g/<n> and applies it.

So no follower begins batch n before rank 0 has left its pause at the end of
batch n-1: whenever the UI shows a pause, every rank stands at the same
boundary. The waits block in the store (no polling); a heartbeat thread per
rank (its own store connection) bumps hb/<r> and watches its peers: a peer
whose heartbeat stops for NANSENSE_DDP_TIMEOUT seconds (default 30), or that
says it left (x/<r>), is lost, and the watcher sets the key the training
thread waits on, so that wait ends with a DistributedError naming the rank
(on rank 0 the UI shows the loss too). A store that stops answering (rank 0
hosting it died) ends the wait with an error at once.
"""

from __future__ import annotations

import datetime
import itertools
import json
import os
import threading
import time
from typing import Any, Optional

import torch

from . import _nansense

ENV_TIMEOUT = "NANSENSE_DDP_TIMEOUT"
_DEFAULT_TIMEOUT = 30.0

_sessions = itertools.count()  # per process: every rank starts its sessions in the same order


class DistributedError(RuntimeError):
    """A distributed run cannot go on together: a rank was lost (died,
    hung, left its loop) or the ranks disagree (nansense started on only
    some ranks). The message names the rank."""


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


class _Lost(Exception):
    pass


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
        self._main = client()   # the training thread's waits
        self._side = client()   # the heartbeat thread's
        self._n = 0             # boundaries met
        self._awaiting: list[str] = []   # the keys the training thread waits for
        self._deleted = 0       # boundaries whose keys the heartbeat thread removed
        self._lost: Optional[str] = None
        self._lost_lock = threading.Lock()
        self._closed = False
        self._seen_error: Optional[tuple] = None
        self._trips: dict[int, dict] = {}   # rank -> its first trip (leader)
        self._trips_lock = threading.Lock()
        self._peeked: set[tuple[int, int]] = set()  # (boundary, rank) news read early (leader)
        self._pending: Optional[int] = None  # the boundary gathered, its decision not yet sent (leader)
        self._rejoin = False  # a follower that made a jump: its engine landed paused, detach it again
        self._stats_sent: Optional[dict] = None  # the statistics settings the followers have (leader)
        self._shard_warned: set[int] = set()  # ranks whose malformed statistics were reported (leader)
        self._checkpoints_sent: Optional[tuple] = None  # the epochs this follower last reported
        self._handshake()
        self._stop = threading.Event()
        self._heartbeat = threading.Thread(target=self._beat, name=f"nansense-ddp-heartbeat-{self.rank}", daemon=True)
        self._heartbeat.start()

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
        while not self._stop.wait(interval):
            try:
                self._side.add(f"hb/{self.rank}", 1)
                # This rank's keys of boundaries every rank has passed.
                own = "g/{}" if self.leader else "a/{}/" + str(self.rank)
                while self._deleted < self._n - 2:
                    self._side.delete_key(own.format(self._deleted))
                    self._deleted += 1
                if self.leader:
                    self._peek(peers)
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
                self._lose(f"the process group's store stopped answering ({type(e).__name__}: {e}); the rank "
                           "that hosts it (rank 0, or torchrun's agent) probably died")
                return

    def _peek(self, peers: list[int]) -> None:
        # A follower's trip, read as soon as it reaches the boundary: rank 0
        # may be paused in that batch for its own trip (the all-reduce
        # carried the NaN to it), and the UI names every rank meanwhile.
        n = self._n
        self._peeked = {k for k in self._peeked if k[0] >= n}
        for r in peers:
            key = f"a/{n}/{r}"
            if (n, r) in self._peeked or not self._side.check([key]):
                continue
            self._peeked.add((n, r))
            value = self._side.get(key)
            if value.startswith(b"{"):
                news = json.loads(value)
                # Rank 0 may be paused at this boundary: its view adds the
                # follower's statistics up to the same batch now.
                self._add_shard(r, news)
                self._note_checkpoints(r, news)
                trip = news.get("trip")
                if trip:
                    tripped = {r: trip}
                    own = self.engine.debug_error()
                    if own is not None and self._trip_of(own)["position"] == trip.get("position"):
                        tripped[0] = self._trip_of(own)  # rank 0 tripped on the same batch
                    self._record_trips(tripped)

    def _record_trips(self, tripped: dict) -> None:
        with self._trips_lock:
            fresh = {r: t for r, t in tripped.items() if r not in self._trips}
            self._trips.update(fresh)
            if fresh:
                self._note_trips(tripped)

    def _lose(self, why: str) -> None:
        with self._lost_lock:
            if self._lost is not None:
                return
            self._lost = why
            awaiting = list(self._awaiting)
        if self.leader:
            # The UI shows it, and a pause in progress ends.
            self.engine.mark_lost(why)
        # End the training thread's wait in the store.
        for key in awaiting:
            try:
                self._side.set(key, b"!" + why.encode())
            except Exception:
                break  # the store is gone: the wait fails by itself

    def _raise_lost(self) -> None:
        # The peers still waiting stop too, with the reason.
        self._leave(f"rank {self.rank} stopped: {self._lost}")
        raise DistributedError(f"nansense (rank {self.rank}): {self._lost}")

    # ---- waits

    def _wait(self, keys: list[str]) -> list[bytes]:
        """The values of keys, once every one is set (a lost peer sets them to "!why")."""
        with self._lost_lock:
            if self._lost is not None:
                self._raise_lost()
            self._awaiting = keys
        try:
            values = self._main.multi_get(keys)
        except Exception as e:
            with self._lost_lock:
                if self._lost is None:
                    self._lost = (f"the process group's store stopped answering ({type(e).__name__}: {e}); the rank "
                                  "that hosts it (rank 0, or torchrun's agent) probably died")
            if self.leader:
                self.engine.mark_lost(self._lost)
            self._raise_lost()
        finally:
            self._awaiting = []
        if any(v.startswith(b"!") for v in values):
            self._raise_lost()
        return values

    # ---- the boundary

    @staticmethod
    def _trip_of(error: dict) -> dict:
        return {"position": (error.get("position") or {}).get("text"), "reasons": error.get("reasons") or [],
                "checks_used": error.get("checks_used") or [], "capsule": error.get("capsule") or ""}

    def _news(self) -> bytes:
        """This rank's trip since the last boundary, as JSON (b"" if none)."""
        error = self.engine.debug_error()
        if error is None:
            self._seen_error = None
            return b""
        key = (error.get("capsule"), json.dumps(error.get("position")), tuple(error.get("reasons") or ()))
        if key == self._seen_error:
            return b""
        self._seen_error = key
        return json.dumps({"trip": self._trip_of(error)}).encode()

    def boundary(self, *, jump: Optional[int] = None, close: bool = False) -> None:
        """Meet the other ranks at this batch boundary. Raises
        DistributedError when a rank is lost.

        Rank 0 gathers the followers' news here (and pauses when one
        tripped); unless this boundary ends in a jump (`jump`: the epoch of
        the TimeTravelJump unwinding rank 0's batch) or the end (`close`),
        its decision is sent by release(), once its next batch has begun
        (begin_batch may raise a jump requested meanwhile: release(jump=k)
        sends it). A follower waits here for the decision; a jump arms the
        same jump on its engine, so its begin_batch raises it."""
        if self._closed:
            return
        if self._rejoin:
            # The engine pauses on a jump's target whatever its mode; a
            # follower's pauses are rank 0's, so it goes on detached.
            self._rejoin = False
            self.engine.detach()
        n = self._n
        self._n += 1
        if self.leader:
            self._gather(n, close)
            if jump is not None or close:
                self.release(jump=jump, close=close)
        else:
            self._follow(n, close)

    def _gather(self, n: int, close: bool) -> None:
        own = self._news()
        values = self._wait([f"a/{n}/{r}" for r in range(1, self.world)])
        tripped = {}
        for r, value in enumerate(values, start=1):
            if not value:
                continue
            news = json.loads(value)
            if (n, r) not in self._peeked:
                self._add_shard(r, news)
                self._note_checkpoints(r, news)
            if news.get("trip"):
                tripped[r] = news["trip"]
            if news.get("close") and not close:
                why = (f"rank {r} of {self.world} closed its session while rank 0 was still in its loop: every rank "
                       "must run the same batches")
                with self._lost_lock:
                    self._lost = why
                self.engine.mark_lost(why)
                self._raise_lost()
        if own:
            tripped[0] = json.loads(own)["trip"]
        if tripped:
            self._record_trips(tripped)
            if any(r != 0 for r in tripped) and 0 not in tripped and self.engine.url():
                # A follower tripped (rank 0, which did not, has not paused
                # for it): every rank stands here, before the next batch,
                # until the UI resumes rank 0.
                self.engine.hold_at_boundary()
                if self._lost is not None:
                    self._raise_lost()
        self._pending = n

    def _add_shard(self, rank: int, news: dict) -> None:
        """Rank 0 (any thread): a follower's layer statistics, added to the view."""
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
        """Rank 0 (any thread): the epochs a follower can be rewound to."""
        if "checkpoints" in news:
            held = news["checkpoints"]
            self.engine.set_peer_checkpoints(rank, [int(e) for e in held["epochs"]], str(held["where"]))

    def _stats_settings(self) -> dict:
        s = self.engine.settings()
        return {"scope": s["stats_scope"], "watched": list(s["watched_layers"]),
                "performance": dict(s["watch_performance"])}

    def release(self, *, jump: Optional[int] = None, close: bool = False) -> None:
        """Rank 0: send the decision of the boundary gathered last."""
        if not self.leader or self._pending is None:
            return
        n, self._pending = self._pending, None
        decision = b""
        if jump is not None:
            decision = json.dumps({"jump": jump}).encode()
        elif close:
            decision = json.dumps({"close": True}).encode()
        else:
            # The followers collect what rank 0 collects (as of this batch),
            # so that their shards add up to the global batch.
            settings = self._stats_settings()
            if settings != self._stats_sent:
                self._stats_sent = settings
                decision = json.dumps({"stats_settings": settings}).encode()
        self._main.set(f"g/{n}", decision)
        if close:
            self.close()

    def _note_trips(self, tripped: dict) -> None:
        ranks = sorted(self._trips)
        parts = []
        for r in ranks:
            news = self._trips[r]
            where = f"rank {r} at {news['position']}" if news.get("position") else f"rank {r}"
            parts.append(where + (f" (capsule {news['capsule']})" if news.get("capsule") else ""))
        note = (f"The checks tripped on rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))} of "
                f"{self.world}: " + "; ".join(parts) + ". Every rank is paused at the same batch boundary; "
                "each rank's capsule replays that rank's batch.")
        first = tripped[min(tripped)]
        self.engine.note_rank_trip(note, first.get("reasons") or ["nan"], first.get("checks_used") or ["nan_inf"],
                                   first.get("capsule") or "")

    def _follow(self, n: int, close: bool) -> None:
        news = self._news()
        extra = {}
        shard = self.engine.take_stats_shard()
        if shard:
            extra["stats"] = shard.decode()
        # The epochs this rank could be rewound to: rank 0 refuses a jump
        # to any other for every rank.
        tt = self.engine.time_travel_status()
        where = tt["cache_dir"] + ("" if tt["available"] or not tt["reason"] else f" ({tt['reason']})")
        held = (tuple(tt["cached_epochs"]), where)
        if held != self._checkpoints_sent and (tt["available"] or tt["cached_epochs"] or tt["total_epochs"]):
            self._checkpoints_sent = held
            extra["checkpoints"] = {"epochs": list(held[0]), "where": held[1]}
        if extra:
            news = json.dumps({**(json.loads(news) if news else {}), **extra}).encode()
        if close:
            news = json.dumps({"close": True, **(json.loads(news) if news else {})}).encode()
        self._main.set(f"a/{n}/{self.rank}", news)
        value, = self._wait([f"g/{n}"])
        if close:
            self.close()
            return
        if not value:
            return
        decision = json.loads(value)
        if decision.get("close"):
            self._leave(f"rank 0 closed its session while rank {self.rank} was still in its loop: every rank must "
                        "run the same batches")
            raise DistributedError(f"nansense (rank {self.rank}): rank 0 closed its session while this rank was "
                                   "still in its loop: every rank must run the same batches")
        if "stats_settings" in decision:
            self._apply_stats_settings(decision["stats_settings"])
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

    def _apply_stats_settings(self, settings: dict) -> None:
        """A follower: collect what rank 0 collects, from this batch on.
        Min/Max patches stay rank 0's: a follower collects none."""
        engine = self.engine
        try:
            engine.set_stats_scope(settings["scope"])
            have = set(engine.settings()["watched_layers"])
            want = settings["watched"]
            gone = [name for name in have if name not in want]
            if gone:
                engine.unwatch_layers(gone)
            new = [name for name in want if name not in have]
            if new:
                engine.watch_layers(new)
            p = settings["performance"]
            engine.set_watch_performance(p["channel_limit_enabled"], p["channel_limit"], p["histogram_sample"], 0,
                                         False)
        except Exception as e:  # training goes on; rank 0's statistics then lack this rank's shard
            print(f"[nansense] rank {self.rank} could not apply rank 0's statistics settings: {e}", flush=True)

    # ---- the end

    def _leave(self, why: str) -> None:
        if self._main is None:
            return
        try:
            self._main.set(f"x/{self.rank}", why.encode())
        except Exception:
            pass

    def abandon(self, why: str) -> None:
        """This rank left its loop by an exception: the others stop at their
        next boundary instead of waiting for it."""
        if self._closed:
            return
        self._leave(why)
        self.close()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        if threading.current_thread() is not self._heartbeat:
            self._heartbeat.join(timeout=5)
        # This rank's store connections end before the process group does
        # (a TCPStore server torn down under live clients aborts the process).
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


def start(session: Any, engine: Any, dist: Any) -> Coordinator:
    """The distributed side of nansense.start() on one rank (every rank calls it)."""
    rank = dist.get_rank()
    engine.set_debug_settings(json.dumps(settings_for_rank(engine.debug_settings(), rank)))
    if rank != 0:
        # Followers never pause on their own: rank 0 decides at every boundary.
        engine.detach()
        engine.set_unserved_nan_note(f"rank {rank} follows rank 0, which pauses every rank at this batch's boundary")
    return Coordinator(engine, dist)
