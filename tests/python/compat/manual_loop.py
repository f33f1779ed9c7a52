"""The reference's manual loop: a batch context around each batch body,
the schedule declared up front, the epochs counted by the script."""

import torch
import torch.nn.functional as F

import nansense
from common import arguments, loaders, make_model, report

args = arguments()
torch.manual_seed(0)
model = make_model()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
train_loader, val_loader = loaders()
EPOCHS = 2

session = nansense.start(model, epochs=EPOCHS, phases={"train": len(train_loader), "val": len(val_loader)},
                         optimizer=optimizer, port=args.port, open_browser=False)
before = {name: p.detach().clone() for name, p in model.named_parameters()}
for epoch in range(EPOCHS):
    model.train()
    for inputs, targets in train_loader:
        with session.batch(phase="train", epoch=epoch, item=(inputs, targets)):
            optimizer.zero_grad()
            loss = F.cross_entropy(model(inputs), targets)
            loss.backward()
            optimizer.step()
    model.eval()
    with torch.no_grad():
        for inputs, targets in val_loader:
            with session.batch(phase="val", epoch=epoch, item=(inputs, targets)):
                model(inputs)
session.close()

last = session.live_position
trained = any(not torch.equal(before[name], p) for name, p in model.named_parameters())
report("manual_loop", closed=session.closed, pause_count=session.pause_count, trained=trained,
       last=[last.phase, last.epoch, last.batch_idx, last.is_last_overall],
       phases=session.schedule.phases, lost=session.training_lost)
