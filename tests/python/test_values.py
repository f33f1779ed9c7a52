"""The engine's values reach Python as typed values (python/values.cpp) and
as copies: the published views they come from are shared by every reader
(the UI, MCP, this script), so an in-place edit of what the package hands
out must leave the next read unchanged, as it did when they came as dicts."""

import math

import torch
import torch.nn.functional as F

import nansense
from nansense import _nansense
from conftest import SmallCnn, TrainingThread, make_data, make_loader


def train(session, model, optimizer, batches=3):
    for x, y in session.batches(make_loader(make_data(8 * batches), shuffle=False), phase="train"):
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()


def test_a_watch_snapshot_is_read_from_the_typed_view_and_its_patches_are_copies():
    model = SmallCnn()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    session = nansense.start(model, optimizer=optimizer)
    session.set_stats_scope(nansense.StatsScope.ALL)
    session.watch("features.0")
    session.detach()
    train(session, model, optimizer)
    session.close()

    view = session._engine.watch_snapshot()
    assert isinstance(view, _nansense.WatchSnapshot)
    bucket = next(b for b in view.buckets if b.layer == "features.0" and b.phase == "train")
    assert isinstance(bucket.activation, _nansense.TensorStatsSnapshot) and bucket.activation.n > 0
    assert bucket.batches >= 1 and len(bucket.activation.hist) == len(nansense.histogram_edges()) - 1

    snap = session.watch_snapshot()
    stats = snap.stats[("features.0", "train", 0)]
    assert stats.activations.n == bucket.activation.n and stats.activations.sum == bucket.activation.sum
    assert math.isclose(stats.activations.mean, bucket.activation.sum / bucket.activation.n)
    gallery = next(g for g in stats.galleries if g.ranking == "max_pixel")
    filled = [s for row in gallery.slots for s in row if s is not None]
    assert filled and set(filled[0]) == {"score", "batch", "sample", "y", "x", "top", "left"}
    kept = gallery.crops.clone()
    gallery.crops.fill_(123.0)
    stats.patches.by_type["max_pixel"].patches.zero_()
    again = session.watch_snapshot().stats[("features.0", "train", 0)]
    crops = next(g for g in again.galleries if g.ranking == "max_pixel").crops
    assert torch.equal(crops.nan_to_num(), kept.nan_to_num())
    # The parameter samples come from the same view.
    history = session.watch_snapshot().weight_history("features.0")
    assert [epoch for epoch, _ in history["features.0.weight"]] == [0]
    assert history["features.0.weight"][0][1].value_norm > 0


def test_a_probe_result_and_the_positions_are_copies():
    model = SmallCnn()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    session = nansense.start(model, optimizer=optimizer)
    session.stop()
    thread = TrainingThread(lambda: (train(session, model, optimizer), session.close()))
    assert session.wait_until_paused(timeout=60)
    assert session.live_position == nansense.BatchPosition("train", 0, 0)
    assert isinstance(session._engine.live_position(), _nansense.BatchPosition)
    assert session.pin_current_batch()
    assert session.wait_for_probe(after_count=0, timeout=60)
    first = session.probe_result
    kept = {name: t.clone() for name, t in first.activations.items()}
    for t in first.activations.values():
        t.fill_(-1.0)
    first.inputs[0].zero_()
    again = session.probe_result
    assert again.run == first.run and again.position == first.position
    for name, t in kept.items():
        assert torch.equal(again.activations[name], t), name
    assert not torch.equal(again.inputs[0], torch.zeros_like(again.inputs[0]))
    session.detach()
    thread.join()
