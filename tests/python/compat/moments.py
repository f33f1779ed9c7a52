"""The reference's playground shape: a detached run freezes one moment,
then load_moment rebuilds it around a fresh model; served, the showcase is
locked and parked until Ctrl-C."""

import signal

import torch
import torch.nn.functional as F

import nansense
from common import arguments, loaders, make_model, report

args = arguments(moment="moment.pt")
torch.manual_seed(0)
model = make_model()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
train_loader, _ = loaders()
EPOCHS = 2

# --prepare: train without the UI, freezing the last training batch.
prepare = nansense.start(model, optimizer=optimizer, phases={"train": len(train_loader)}, open_browser=False)
prepare.set_stats_scope(nansense.StatsScope.ALL)
prepare.watch("1")
prepare.freeze_moment(args.moment, phase="train", epoch=EPOCHS - 1, batch_idx=len(train_loader) - 1)
prepare.detach()
for epoch in range(EPOCHS):
    for inputs, targets in prepare.batches(train_loader, phase="train", epoch=epoch):
        optimizer.zero_grad()
        F.cross_entropy(model(inputs), targets).backward()
        optimizer.step()
prepare.close()

# serve: the moment around a fresh model of the same architecture.
fresh = make_model()
viewer = nansense.load_moment(fresh, args.moment, replay=lambda m, batch: F.cross_entropy(m(batch[0]), batch[1]))
position = viewer.snapshot.position
same = all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), fresh.state_dict().values()))
if args.port is not None:
    viewer.lock()  # before serving: every visitor finds it locked
    signal.signal(signal.SIGINT, lambda *_: viewer.close())
    nansense.serve(viewer, port=args.port, open_browser=False)
    viewer.park()  # until Ctrl-C
    signal.signal(signal.SIGINT, signal.default_int_handler)
report("moments", position=[position.phase, position.epoch, position.batch_idx], weights_restored=same,
       watched=sorted(viewer.watched_layers), scope=str(viewer.stats_scope),
       stats_layers=sorted({layer for layer, _, _ in viewer.watch_snapshot(include_patches=False).stats}),
       locked_mode=str(viewer.mode))
