#!/usr/bin/env python3
"""A LightningModule debugged by nansense: the Fashion-MNIST CNN of
fashion_mnist.py as `self.net`, trained by a Lightning Trainer on the CPU
with nansense.lightning's callback and time travel.

    PYTHONPATH=build/python .venv/bin/python examples/python/lightning_classifier.py

The UI and the MCP endpoint come up on 127.0.0.1:8080 once fit starts; the
run pauses on its first batch. Layer names are the network's module paths
(model="net": "features.0", "classifier.1"). A jump in the UI's Time Travel
re-enters fit at that epoch in a fresh Trainer. With --no-ui --nan the
trainer stops at the first NaN and prints where its capsule is.
"""

import sys
import warnings

import torch
import torch.nn.functional as F

import common
from fashion_mnist import DATA_DIR, MEAN, STD, FashionCnn, loaders, per_class_nll

try:
    import lightning.pytorch as pl
except ImportError:
    sys.exit("this example needs PyTorch Lightning: pip install lightning")

from nansense.lightning import NansenseCallback, fit_with_time_travel


class Classifier(pl.LightningModule):
    def __init__(self, nan: bool = False, lr: float = 0.05):
        super().__init__()
        self.net = FashionCnn()
        self.loss_fn = per_class_nll if nan else F.nll_loss
        self.lr = lr
        self.correct = self.total = 0

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return self.loss_fn(self(x), y)

    def on_validation_epoch_start(self):
        self.correct = self.total = 0

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.correct += (self(x).argmax(1) == y).sum().item()
        self.total += len(y)

    def on_validation_epoch_end(self):
        if not self.trainer.sanity_checking:
            print(f"epoch {self.current_epoch}: val accuracy {self.correct / max(self.total, 1):.3f}", flush=True)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.lr)


class DetachedCallback(NansenseCallback):
    """--detach: the session exists once fit starts; detach it then (once:
    after a time-travel jump the run pauses on the target epoch as asked)."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self._detached = False

    def on_fit_start(self, trainer, pl_module):
        super().on_fit_start(trainer, pl_module)
        if not self._detached:
            self._detached = True
            self.session.detach()


def main() -> int:
    p = common.arguments(__doc__, data_dir=DATA_DIR, data_help="Fashion-MNIST's IDX files")
    p.add_argument("--nan", action="store_true", help="a per-class loss that turns NaN when a batch lacks a class")
    p.add_argument("--cache-dir", default=".nansense_cache", help="where time travel keeps its epoch checkpoints")
    args = p.parse_args()
    # The loaders are in-memory tensors: worker processes would only cost.
    warnings.filterwarnings("ignore", ".*does not have many workers.*")

    torch.manual_seed(0)
    train_loader, val_loader = loaders(args)
    module = Classifier(nan=args.nan)
    callback = (DetachedCallback if args.detach else NansenseCallback)(
        port=common.port(args), host=args.host, open_browser=not args.no_browser, enabled=not args.disabled,
        model="net", input_mean=MEAN, input_std=STD)

    def make_trainer():
        # fit_with_time_travel makes a fresh Trainer per fit attempt.
        return pl.Trainer(accelerator="cpu", devices=1, max_epochs=args.epochs, logger=False,
                          enable_checkpointing=False, enable_model_summary=False, num_sanity_val_steps=0)

    fit_with_time_travel(make_trainer, module, callback=callback, train_dataloaders=train_loader,
                         val_dataloaders=val_loader, cache_dir=args.cache_dir)
    session = callback.session
    common.keep_serving(session.url if session is not None and session.enabled else None, args)
    # No UI: a NaN stopped the trainer (the callback said where its capsule is).
    return 1 if session is not None and session.enabled and session.debug_error is not None else 0


if __name__ == "__main__":
    sys.exit(main())
