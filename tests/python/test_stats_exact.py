"""Every batch's statistics stay exact, whatever the live view does: over a
layer large enough that its histograms are sampled, the counts, sums, min,
max, NaN/Inf counts and dead channels of each (layer, epoch) equal those of
every tensor the loop produced (nansense._reference computes them from the
tensors themselves), with a capture and publish on every batch or at the
default cadence; and a sampled histogram says so (binned, sampled) while a
small layer's is whole and equals the reference's bins."""

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import nansense
from nansense._reference import _one_tensor_stats


class Net(nn.Module):
    """conv's output is [16, 8, 16, 16] (32768 values a batch, over the
    16384-value histogram sample). relu's channel 0 is dead by construction;
    its channel 1 (x - 10 at the centre tap) lives on one value of one batch,
    which a histogram sample would likely miss."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 8, 3, padding=1)
        self.relu = nn.ReLU()
        self.fc = nn.Linear(8 * 16 * 16, 10)
        with torch.no_grad():
            self.conv.weight[0].zero_()
            self.conv.bias[0] = -1.0
            self.conv.weight[1].zero_()
            self.conv.weight[1, 0, 1, 1] = 1.0
            self.conv.bias[1] = -10.0

    def forward(self, x):
        return self.fc(self.relu(self.conv(x)).flatten(1))


LAYERS = ("conv", "relu", "fc")


def batches(epoch, n=3):
    g = torch.Generator().manual_seed(epoch)
    out = []
    for b in range(n):
        x = torch.randn(16, 1, 16, 16, generator=g)
        if epoch == 0 and b == 0:
            x[3, 0, 8, 8] = 20.0  # relu's channel 1: its one value above zero this epoch
        if epoch == 1 and b == 1:  # non-finite inputs: NaN and +-inf spread through conv, relu and fc
            x[0, 0, 3, 3] = math.nan
            x[1, 0, 5, 5] = math.inf
            x[2, 0, 7, 7] = -math.inf
        out.append((x, torch.randint(0, 10, (16,), generator=g)))
    return out


def same(got, want, name):
    assert got is not None and want is not None, name
    assert (got.n, got.nan, got.pos_inf, got.neg_inf) == (want.n, want.nan, want.pos_inf, want.neg_inf), name
    assert got.sum == pytest.approx(want.sum, rel=1e-6, abs=1e-6), name
    assert got.sum_sq == pytest.approx(want.sum_sq, rel=1e-6, abs=1e-6), name
    assert got.std == pytest.approx(want.std, rel=1e-5, abs=1e-9) or (math.isnan(got.std) and math.isnan(want.std)), name
    for v in ("min", "max"):
        g, w = getattr(got, v), getattr(want, v)
        assert g == w or (math.isnan(g) and math.isnan(w)), f"{name}: {v} {g} != {w}"


@pytest.mark.parametrize("every_batch", [False, True], ids=["default-live-view", "publish-every-batch"])
def test_every_batch_folds_exactly_and_sampling_is_stated(every_batch):
    torch.manual_seed(0)
    model = Net()
    session = nansense.start(model)
    # A NaN is the data here, not a bug to stop at.
    session.set_debug_settings(nansense.DebugSettings(enabled=False))
    for layer in LAYERS:
        assert session.watch(layer)
    session.set_stats_scope("watched")
    if every_batch:
        session.set_update_frequency(unit="batch", n=1)
    session.run()

    seen = {(layer, kind, epoch): [] for layer in LAYERS for kind in ("act", "grad") for epoch in (0, 1)}
    epoch_now = [0]

    def record(layer):
        def hook(module, args, output):
            seen[(layer, "act", epoch_now[0])].append(output.detach().clone())
            output.register_hook(lambda g: seen[(layer, "grad", epoch_now[0])].append(g.detach().clone()))
        return hook

    for layer in LAYERS:
        getattr(model, layer).register_forward_hook(record(layer))
    for epoch in (0, 1):
        epoch_now[0] = epoch
        for x, y in session.batches(batches(epoch), phase="train", epoch=epoch):
            model.zero_grad()  # no step: the weights (and relu's dead channel) stay as built
            F.cross_entropy(model(x), y).backward()
    session.close()  # publishes what the last batches folded
    snap = session.watch_snapshot()

    for layer in LAYERS:
        for epoch in (0, 1):
            bucket = snap.stats[(layer, "train", epoch)]
            assert bucket.batches == 3, (layer, epoch)
            for kind, got in (("act", bucket.activations), ("grad", bucket.gradients)):
                want = _one_tensor_stats(torch.cat(seen[(layer, kind, epoch)]))
                name = f"{layer} {kind} epoch {epoch}"
                same(got, want, name)
                total = want.n + want.nan + want.pos_inf + want.neg_inf
                if epoch == 0:
                    continue  # collapsed by epoch 1: scalars, median and dead count kept
                if layer == "fc":  # 160 values a batch: binned whole, the reference's bins exactly
                    assert not got.sampled and got.binned == total, name
                    assert got.hist == want.hist, name
                else:  # 32768 values a batch: the histograms are a stated sample
                    assert got.sampled and 0 < got.binned < total, name
                    assert 0 < sum(got.hist) <= got.binned, name  # binned counts the sample's NaNs too
    # The non-finite batch reached every count.
    conv1 = snap.stats[("conv", "train", 1)].activations
    assert conv1.nan > 0 and conv1.pos_inf > 0 and conv1.neg_inf > 0
    # relu's channel 0 is dead in the clean epoch and channel 1 is not (its
    # one live value counted, not sampled away); the count is kept once the
    # epoch's bins are collapsed.
    relu0 = snap.stats[("relu", "train", 0)].activations
    want0 = _one_tensor_stats(torch.cat(seen[("relu", "act", 0)]))
    assert want0.dead_channels == (0,)
    assert relu0.dead_channel_count == 1
    # In epoch 1 a NaN or infinity keeps a channel alive (the NaN input
    # reaches every channel); the others are dead as their values say.
    relu1 = snap.stats[("relu", "train", 1)].activations
    acts1 = torch.cat(seen[("relu", "act", 1)])
    want1 = _one_tensor_stats(acts1)
    finite = torch.isfinite(acts1).transpose(0, 1).reshape(acts1.shape[1], -1).all(1)
    assert relu1.dead_channels == tuple(c for c in want1.dead_channels if finite[c])
