"""One rank of a DDP training run under nansense, for test_distributed.py.

Started like torchrun starts a worker (RANK, WORLD_SIZE, MASTER_ADDR,
MASTER_PORT in the environment), in the run's folder (its cwd). Options
(JSON in argv[1]):
  epochs, batches     the run's shape (a global batch of 4 * world samples)
  nan_rank, nan_batch the rank whose data holds a NaN, and in which batch
  no_start_rank       a rank that never calls nansense.start()
  time_travel         drive the epochs with session.epochs() / restore_point()
  scope               rank 0 alone sets this statistics scope (the others
                      follow rank 0's settings)
  dump_stats          rank 0 writes its statistics view to stats.json at the end
  bad_cache_rank      with time_travel: this rank's checkpoint folder cannot
                      be made (its time travel is off)
  checks_off          every rank turns the numerical checks off
  checks_off_rank     this rank alone turns them off
  longer_rank         this rank's loop has one batch more than the others'
  pg_timeout          the process group's timeout for collectives, in seconds
  unserved            rank 0 serves no UI either
  static_graph        DDP's static_graph=True (its first batch reduces the
                      gradients in a final callback of its own)
  sum_losses          each batch all-reduces its loss between backward and the
                      optimizer step (a collective of the loop's own there)
  by_hand             no DDP: the loop averages the gradients itself after
                      backward (nansense is given the bare model)
  tiny_rank, tiny_batch  this rank scales its loss of that batch (epoch 0) by
                      1e-39: its own gradients are subnormal (an underflow
                      trip), the averaged ones are not
  hold_on_error       rank 0, when its loop raises: print the traceback, write
                      the file `failed`, keep serving until the file
                      `release` exists, then exit 1 (the test reads rank 0's
                      UI after the error)
Each rank appends one JSON line per event to rank<r>.log: {"begin": [e, b]}
when a batch body begins, {"stepping": [e, b]} once its backward returned
(before the optimizer step), {"done": [e, b], "weights": [sum per
parameter]} when it ends, {"epoch": e,
"weights": sum} at each epoch's start, and a follower {"waited": k,
"cleans": c, "boundaries": n} before it closes (the boundaries where it
waited for rank 0's word, the batches it reported checked clean, of the
boundaries it met); rank 0 writes the UI's address to url; {"update": u} at the end: the
update of the batch whose checks tripped, "held", "applied", "skipped" or
None (debug_error.update).
"""

import json
import os
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F

import nansense


def stats_of(view):
    """A WatchSnapshot as JSON: per "layer/phase/epoch" its activation and
    gradient statistics."""
    def tensor(t):
        return None if t is None else {"n": t.n, "sum": t.sum, "min": t.min, "max": t.max,
                                       "hist": list(t.hist) if t.hist is not None else None,
                                       "dead": t.dead_channel_count, "median": t.median}
    return {"ranks": view.ranks,
            "buckets": {f"{layer}/{phase}/{epoch}": {"activation": tensor(b.activations), "gradient": tensor(b.gradients)}
                        for (layer, phase, epoch), b in view.stats.items()}}


def main():
    opts = json.loads(sys.argv[1])
    dist.init_process_group("gloo")
    if opts.get("pg_timeout"):
        # After the rendezvous: the collectives' timeout only.
        import datetime
        dist.set_timeout(datetime.timedelta(seconds=opts["pg_timeout"]))
    rank, world = dist.get_rank(), dist.get_world_size()
    log = open(f"rank{rank}.log", "a", buffering=1)

    def note(**event):
        log.write(json.dumps(event) + "\n")

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    if opts.get("by_hand"):
        ddp = model
    else:
        ddp = torch.nn.parallel.DistributedDataParallel(model, static_graph=bool(opts.get("static_graph")))
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.1)
    epochs, batches = opts.get("epochs", 2), opts.get("batches", 4)
    g = torch.Generator().manual_seed(1)
    data = [(torch.randn(4 * world, 4, generator=g), torch.randint(0, 2, (4 * world,), generator=g))
            for _ in range(batches)]
    shard = [(x[rank * 4:(rank + 1) * 4], y[rank * 4:(rank + 1) * 4]) for x, y in data]
    if opts.get("longer_rank") == rank:
        shard.append(shard[-1])
    if opts.get("nan_rank") == rank:
        # In the data itself, so the capsule's batch holds it (epoch 0 only).
        x = shard[opts["nan_batch"]][0]
        x[0, 0] = float("nan")

    if opts.get("no_start_rank") == rank:
        session = nansense.start(ddp, enabled=False)
    else:
        session = nansense.start(ddp, epochs=epochs, phases={"train": len(shard)}, optimizer=optimizer,
                                 port=0 if rank == 0 and not opts.get("unserved") else None, open_browser=False)
        if opts.get("checks_off") or opts.get("checks_off_rank") == rank:
            session.set_debug_settings(nansense.DebugSettings(enabled=False))
        if rank == 0 and opts.get("scope"):
            session.set_stats_scope(opts["scope"])
        if rank == 0 and session.url:
            with open("url.tmp", "w") as f:
                f.write(session.url)
            os.replace("url.tmp", "url")

    def run_epoch(epoch):
        note(epoch=epoch, weights=float(sum(p.detach().double().sum() for p in model.parameters())))
        for b, (x, y) in enumerate(session.batches(shard, phase="train", epoch=epoch)):
            note(begin=[epoch, b])
            optimizer.zero_grad()
            loss = F.cross_entropy(ddp(x), y)
            if opts.get("tiny_rank") == rank and epoch == 0 and b == opts.get("tiny_batch"):
                loss = loss * 1e-39
            loss.backward()
            if opts.get("by_hand"):
                for p in model.parameters():
                    dist.all_reduce(p.grad)
                    p.grad /= world
            if opts.get("sum_losses"):
                dist.all_reduce(loss.detach())
            note(stepping=[epoch, b])
            optimizer.step()
            note(done=[epoch, b], weights=[p.detach().double().sum().item() for p in model.parameters()])

    try:
        train(session, opts, rank, epochs, run_epoch)
    except BaseException:
        if not (rank == 0 and opts.get("hold_on_error")):
            raise
        import time
        import traceback
        traceback.print_exc()
        sys.stdout.flush()
        open("failed", "w").close()
        while not os.path.exists("release"):
            time.sleep(0.05)
        sys.exit(1)
    error = session.debug_error if opts.get("no_start_rank") != rank else None
    # What became of the update of the batch that tripped here.
    note(update=error.update if error is not None else None)
    coordinator = getattr(session, "_coordinator", None)
    if coordinator is not None and not coordinator.leader:
        # Where this follower had to wait for rank 0's word, of the boundaries it met.
        note(waited=coordinator._waited, cleans=coordinator._cleans, boundaries=coordinator._n)
    elif coordinator is not None:
        # The decisions rank 0 sent once the batch checked clean (by hand: on every rank).
        note(sent_clean=coordinator._sent_clean)
    session.close()
    if rank == 0 and opts.get("dump_stats"):
        with open("stats.json", "w") as f:
            json.dump(stats_of(session.watch_snapshot()), f)
    note(closed=True)
    dist.destroy_process_group()


def train(session, opts, rank, epochs, run_epoch):
    if opts.get("time_travel"):
        cache = {}
        if opts.get("bad_cache_rank") == rank:
            open("blocker", "w").close()  # a file where the folder's parent should be
            cache = {"cache_dir": "blocker/cache"}
        for epoch in session.epochs(epochs, **cache):
            with session.restore_point():
                run_epoch(epoch)
    else:
        for epoch in range(epochs):
            run_epoch(epoch)


if __name__ == "__main__":
    main()
