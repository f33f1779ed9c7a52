"""The reference's standard loop under DDP (torchrun, gloo on CPU): start()
on every rank with the DDP-wrapped model, the time-travel epoch loop, a
DistributedSampler; rank 0 serves."""

import hashlib

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler

import nansense
from common import arguments, loaders, make_model, report

args = arguments()
dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = DistributedDataParallel(make_model())
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
train_set = loaders()[0].dataset
sampler = DistributedSampler(train_set, shuffle=True, seed=0)
train_loader = DataLoader(train_set, batch_size=8, sampler=sampler)
val_loader = loaders()[1]

session = nansense.start(model, optimizer=optimizer, port=args.port, open_browser=False)
for epoch in session.epochs(2):
    sampler.set_epoch(epoch)
    with session.restore_point():
        for inputs, targets in session.batches(train_loader, phase="train"):
            optimizer.zero_grad()
            F.cross_entropy(model(inputs), targets).backward()
            optimizer.step()
        with torch.no_grad():
            for inputs, _ in session.batches(val_loader, phase="val"):
                model(inputs)
session.close()

last = session.live_position
# The replicas stay identical: DDP averaged every step's gradients. Each rank
# reports a digest of its weights and the test compares them; no collective
# runs after training, so no gloo worker still holds a Python tensor when the
# interpreter finalizes (a PyTorch race that aborts the process at exit).
weights = torch.cat([p.detach().flatten() for p in model.parameters()])
report("ddp", rank=rank, world=dist.get_world_size(), closed=session.closed, pause_count=session.pause_count,
       last=[last.phase, last.epoch, last.batch_idx], weights=hashlib.sha256(weights.numpy().tobytes()).hexdigest(),
       cached_epochs=session.time_travel_status().cached_epochs if rank == 0 else None)
dist.destroy_process_group()
