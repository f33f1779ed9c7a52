"""Time travel from Python: session.epochs() + restore_point(), a jump over
HTTP, and the replayed epochs' losses bit for bit (shuffling DataLoader,
SGD with momentum and a StepLR schedule restored from the checkpoints)."""

import pytest
import torch
import torch.nn.functional as F

import nansense
from torch.utils.data import DataLoader

from conftest import Api, SmallCnn, TrainingThread, make_data


def test_a_jump_replays_the_losses_bit_for_bit(tmp_path):
    model = SmallCnn()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    # Shuffles every epoch from torch's global RNG, as a DataLoader does by default.
    loader = DataLoader(make_data(32), batch_size=8, shuffle=True)
    session = nansense.start(model, optimizer=optimizer, scheduler=scheduler, port=0, open_browser=False)
    losses = []       # (epoch, batch, loss, lr) in the order the bodies ran
    bodies_entered = []

    def loop():
        for epoch in session.epochs(3, cache_dir=tmp_path / "cache"):
            bodies_entered.append(epoch)
            with session.restore_point():
                for i, (x, y) in enumerate(session.batches(loader, phase="train")):
                    optimizer.zero_grad()
                    loss = F.cross_entropy(model(x), y)
                    try:
                        loss.backward()
                        optimizer.step()
                    except Exception:  # a broad handler must not swallow a jump
                        raise
                    losses.append((epoch, i, loss.detach().clone(), optimizer.param_groups[0]["lr"]))
                scheduler.step()
        session.close()

    thread = TrainingThread(loop)
    api = Api(session.url)
    assert session.wait_until_stopped(60) == nansense.RunState.PAUSED
    status = api.post("/api/run_until", {"phase": "train", "epoch": 2, "batch": 1, "timeout_seconds": 30})
    assert status["live_position"]["epoch"] == 2
    assert session.time_travel_status().cached_epochs == (0, 1, 2)
    first_timeline = list(losses)
    assert [(e, i) for e, i, _, _ in first_timeline] == [(0, 0), (0, 1), (0, 2), (0, 3), (1, 0), (1, 1), (1, 2),
                                                         (1, 3), (2, 0), (2, 1)]

    status = api.post("/api/time_travel", {"epoch": 1, "timeout_seconds": 30})
    assert status["state"] == "paused"
    assert status["live_position"]["epoch"] == 1 and status["live_position"]["batch_idx"] == 0
    assert bodies_entered == [0, 1, 2, 1]
    session.detach()
    thread.join()
    assert session.state == nansense.RunState.FINISHED

    replay = losses[len(first_timeline):]
    assert [(e, i) for e, i, _, _ in replay] == [(1, 0), (1, 1), (1, 2), (1, 3), (2, 0), (2, 1), (2, 2), (2, 3)]
    before = {(e, i): (loss, lr) for e, i, loss, lr in first_timeline}
    for e, i, loss, lr in replay:
        if (e, i) in before:
            assert torch.equal(loss, before[(e, i)][0]), (e, i)
            assert lr == before[(e, i)][1], (e, i)
    assert replay[0][3] == 0.025  # the schedule came back with epoch 1


def test_epochs_refuses_bad_arguments_and_restore_point_needs_the_loop(tmp_path):
    session = nansense.start(SmallCnn())
    with pytest.raises(ValueError, match="needs the epoch count"):
        session.epochs()
    with pytest.raises(ValueError, match="n must be >= 1"):
        session.epochs(0)
    with pytest.raises(ValueError, match="start_epoch must be < n"):
        session.epochs(2, start_epoch=2)
    with pytest.raises(RuntimeError, match="inside a `for epoch in session.epochs"):
        with session.restore_point():
            pass
    with pytest.raises(nansense.TimeTravelError, match="epoch"):
        session.request_time_travel(0)
    assert not session.time_travel_status().available
    session.close()


def test_disabled_epochs_is_range_and_touches_no_disk(tmp_path):
    session = nansense.start(SmallCnn(), enabled=False, epochs=3)
    epochs = []
    for epoch in session.epochs(cache_dir=tmp_path / "never"):
        with session.restore_point():
            epochs.append(epoch)
    assert epochs == [0, 1, 2]
    # As the reference's: nothing to resume from, so start_epoch is ignored.
    assert list(session.epochs(cache_dir=tmp_path / "never", start_epoch=1)) == [0, 1, 2]
    with pytest.raises(ValueError, match="start_epoch must be < n"):
        session.epochs(cache_dir=tmp_path / "never", start_epoch=3)
    assert not (tmp_path / "never").exists()
    assert issubclass(nansense.TimeTravelJump, BaseException)
    assert not issubclass(nansense.TimeTravelJump, Exception)


def test_the_nested_training_restorer_shape_jumps_and_replays(tmp_path):
    model = SmallCnn()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loader = DataLoader(make_data(16), batch_size=8, shuffle=True)
    session = nansense.start(model, optimizer=optimizer, epochs=3, port=0, open_browser=False)
    restorer = session.training_restorer(cache_dir=tmp_path / "cache")
    assert isinstance(restorer, nansense.TrainingRestorer) and restorer.pending() and not restorer.finished
    losses, attempts = [], []

    def loop():
        while restorer.pending():
            with restorer as entered:
                assert entered is restorer
                attempts.append(restorer.start_epoch)
                for epoch in restorer.epochs():
                    for i, (x, y) in enumerate(session.batches(loader, phase="train")):
                        optimizer.zero_grad()
                        loss = F.cross_entropy(model(x), y)
                        loss.backward()
                        optimizer.step()
                        losses.append((epoch, i, loss.detach().clone()))
        session.close()

    thread = TrainingThread(loop)
    api = Api(session.url)
    assert session.wait_until_stopped(60) == nansense.RunState.PAUSED
    api.post("/api/run_until", {"phase": "train", "epoch": 2, "batch": 0, "timeout_seconds": 30})
    first = list(losses)
    status = api.post("/api/time_travel", {"epoch": 1, "timeout_seconds": 30})
    assert (status["live_position"]["epoch"], status["live_position"]["batch_idx"]) == (1, 0)
    session.detach()
    thread.join()
    # The jump unwound the with block; the second attempt started at epoch 1.
    assert attempts == [0, 1]
    assert restorer.finished and not restorer.pending()
    replay = losses[len(first):]
    assert [(e, i) for e, i, _ in replay] == [(1, 0), (1, 1), (2, 0), (2, 1)]
    before = {(e, i): loss for e, i, loss in first}
    assert all(torch.equal(loss, before[(e, i)]) for e, i, loss in replay if (e, i) in before)


def test_the_training_restorer_refuses_misuse_and_is_inert_when_disabled(tmp_path):
    with pytest.raises(ValueError, match="needs the epoch count"):
        nansense.start(SmallCnn()).training_restorer()
    with pytest.raises(TypeError, match="cache_dir must be a folder path"):
        nansense.start(SmallCnn(), epochs=2).training_restorer(cache_dir=3)
    restorer = nansense.start(SmallCnn(), epochs=2).training_restorer(cache_dir=tmp_path / "c")
    with pytest.raises(RuntimeError, match="inside `with restorer:`"):
        restorer.epochs()
    # Any other exception leaves the with block as it came.
    with pytest.raises(KeyError):
        with restorer:
            raise KeyError("boom")

    off = nansense.start(SmallCnn(), enabled=False, epochs=2)
    restorer = off.training_restorer(cache_dir=tmp_path / "never")
    runs = []
    while restorer.pending():
        with restorer:
            runs.append(list(restorer.epochs()))
    assert runs == [[0, 1]] and restorer.finished
    assert not (tmp_path / "never").exists()
    # restore_point() yields the loop's TrainingRestorer.
    session = nansense.start(SmallCnn(), epochs=1)
    for _ in session.epochs(cache_dir=tmp_path / "flat"):
        with session.restore_point() as point:
            assert isinstance(point, nansense.TrainingRestorer)
    session.close()
