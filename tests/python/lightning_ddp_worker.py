"""A Lightning DDP run under NansenseCallback, for test_lightning_ddp.py.

Run as a user runs a script: `python lightning_ddp_worker.py OPTIONS` in
the run's folder (its cwd); Trainer(strategy="ddp", devices=world) starts
the other ranks itself (Lightning's subprocess launcher runs this script
again with LOCAL_RANK set). Options (JSON in argv[1]):
  world               the number of ranks (processes)
  epochs, batches     the run's shape: each rank gets `batches` batches of 4
                      samples per epoch (Lightning's DistributedSampler deals
                      the dataset out, shuffled)
  nan_rank, nan_batch the rank whose train batch of that index (epoch 0) gets a
                      NaN (in place, before the forward: the batch the
                      capsule holds has it)
  served              rank 0 serves the UI (port 0); otherwise no UI
  time_travel         fit_with_time_travel (a fresh Trainer per attempt)
  val                 validation batches per rank each epoch (0: none)
  strategy            the Trainer's strategy (default "ddp")
  static_graph        DDPStrategy(static_graph=True) (its first batch reduces
                      the gradients in a final callback of DDP's own)
  pg_timeout          the process group's timeout for collectives, in seconds
                      (set once the group is up: its rendezvous keeps the default)
Each rank appends one JSON line per event to rank<r>.log: {"begin": [e, b]}
when training_step begins, {"stepping": [e, b]} once its backward returned
(on_before_optimizer_step), {"done": [e, b], "weights": [sum per parameter]}
once its optimizer step is made, {"val": [e, b]} per validation step, {"epoch": e, "weights": sum} at
each train epoch's start, {"pid": p} and {"fit_end": true} when fit
starts and returns; rank 0
writes the UI's address to url.
"""

import faulthandler
import datetime
import json
import os
import signal
import sys

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import lightning.pytorch as pl

from nansense.lightning import NansenseCallback, fit_with_time_travel


class Logged(pl.LightningModule):
    def __init__(self, nan_at=None, pg_timeout=None):
        super().__init__()
        self.pg_timeout = pg_timeout
        self.net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
        self._log = None
        self.nan_at = nan_at  # (rank, batch_idx) of epoch 0

    def note(self, **event):
        if self._log is None:
            self._log = open(f"rank{self.global_rank}.log", "a", buffering=1)
        self._log.write(json.dumps(event) + "\n")

    def setup(self, stage):
        if self.pg_timeout is not None:
            torch.distributed.set_timeout(datetime.timedelta(seconds=self.pg_timeout))

    def training_step(self, batch, batch_idx):
        self.note(begin=[self.current_epoch, batch_idx])
        x, y = batch
        if self.nan_at == (self.global_rank, batch_idx) and self.current_epoch == 0:
            x[0, 0] = float("nan")
        return F.cross_entropy(self.net(x), y)

    def on_before_optimizer_step(self, optimizer):
        self.note(stepping=[self.current_epoch, self.trainer.fit_loop.epoch_loop.batch_idx])

    def optimizer_step(self, *args, **kwargs):
        super().optimizer_step(*args, **kwargs)
        self.note(done=[self.current_epoch, self.trainer.fit_loop.epoch_loop.batch_idx],
                  weights=[p.detach().double().sum().item() for p in self.net.parameters()])

    def validation_step(self, batch, batch_idx):
        self.note(val=[self.current_epoch, batch_idx])
        x, y = batch
        F.cross_entropy(self.net(x), y)

    def on_fit_start(self):
        self.note(pid=os.getpid())

    def on_train_epoch_start(self):
        self.note(epoch=self.current_epoch,
                  weights=float(sum(p.detach().double().sum() for p in self.net.parameters())))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


class Reporting(NansenseCallback):
    """Rank 0 writes its UI's address for the test."""

    def on_fit_start(self, trainer, pl_module):
        super().on_fit_start(trainer, pl_module)
        if trainer.global_rank == 0 and self.session.url:
            with open("url.tmp", "w") as f:
                f.write(self.session.url)
            os.replace("url.tmp", "url")


def main():
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # a hung rank's stacks, for a failing test's output
    opts = json.loads(sys.argv[1])
    world, epochs, batches = opts.get("world", 2), opts.get("epochs", 2), opts.get("batches", 3)
    torch.manual_seed(0)
    module = Logged((opts["nan_rank"], opts["nan_batch"]) if "nan_rank" in opts else None, opts.get("pg_timeout"))
    g = torch.Generator().manual_seed(1)
    n = 4 * batches * world
    x, y = torch.randn(n, 4, generator=g), torch.randint(0, 2, (n,), generator=g)
    train = DataLoader(TensorDataset(x, y), batch_size=4)
    val_n = 4 * opts.get("val", 0) * world
    val = DataLoader(TensorDataset(torch.randn(val_n, 4, generator=g), torch.randint(0, 2, (val_n,), generator=g)),
                     batch_size=4) if val_n else None
    callback = Reporting(port=0 if opts.get("served") else None, open_browser=False)

    def make_trainer():
        return pl.Trainer(accelerator="cpu", strategy=(pl.strategies.DDPStrategy(static_graph=True) if opts.get("static_graph")
                                                    else opts.get("strategy", "ddp")), devices=world, max_epochs=epochs, logger=False,
                          enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                          num_sanity_val_steps=0, callbacks=[callback])

    if opts.get("time_travel"):
        fit_with_time_travel(make_trainer, module, callback=callback, train_dataloaders=train, val_dataloaders=val)
    else:
        make_trainer().fit(module, train, val)
    module.note(fit_end=True)


if __name__ == "__main__":
    main()
