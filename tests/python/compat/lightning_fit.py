"""The reference's Lightning shape: NansenseCallback with model="net", run
under fit_with_time_travel with a Trainer factory."""

import lightning as L
import torch
import torch.nn.functional as F

from common import arguments, loaders, make_model, report
from nansense.lightning import NansenseCallback, fit_with_time_travel

args = arguments()
torch.manual_seed(0)


class Classifier(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = make_model()

    def training_step(self, batch, batch_idx):
        inputs, targets = batch
        return F.cross_entropy(self.net(inputs), targets)

    def validation_step(self, batch, batch_idx):
        inputs, targets = batch
        self.log("val_loss", F.cross_entropy(self.net(inputs), targets))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


train_loader, val_loader = loaders()
module = Classifier()
callback = NansenseCallback(port=args.port, open_browser=False, model="net")


def make_trainer():
    return L.Trainer(max_epochs=2, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                     enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0)


fit_with_time_travel(make_trainer, module, callback=callback, train_dataloaders=train_loader,
                     val_dataloaders=val_loader)
session = callback.session
last = session.live_position
report("lightning_fit", closed=session.closed, pause_count=session.pause_count,
       last=[last.phase, last.epoch, last.batch_idx], phases=session.schedule.phases,
       time_travel_epochs=session.time_travel_status().cached_epochs)
