"""Non-float tensors are first-class (masks, token ids, labels): drawn as
values over HTTP, counted by the statistics, and a tensor the checks cannot
read turns off only its own check. And the traced re-run of a tripped batch:
what it restores, what runs twice, and how the loop tells."""

import io
import json
import urllib.parse

import pytest
import torch
import torch.nn.functional as F
from PIL import Image

import nansense
from conftest import Api, Mlp, TrainingThread
from test_numerics import _MaskedClassifier, class_batches, per_class_loss

TRUE = (31, 78, 140)  # render/colormap.cpp boolean_colour
FALSE = (222, 226, 232)


def picture(api, path, **query):
    status, body, headers = api.request("GET", path + "?" + urllib.parse.urlencode(query))
    assert status == 200, f"GET {path}: {status} {body[:300]!r}"
    assert body[:8] == b"\x89PNG\r\n\x1a\n", f"GET {path}: not a PNG: {body[:16]!r}"
    return Image.open(io.BytesIO(body)).convert("RGBA"), json.loads(headers["X-Nansense-Render"])


def masked_batches(n):
    g = torch.Generator().manual_seed(0)
    out = []
    for _ in range(n):
        pad = torch.zeros(4, 6, dtype=torch.bool)
        pad[:, 4:] = True
        pad[1, 2:] = True  # sample 1 keeps 2 tokens
        out.append((torch.randint(1, 50, (4, 6), generator=g), pad, torch.randint(0, 3, (4,), generator=g)))
    return out


def test_a_padding_mask_and_token_ids_are_drawn_as_values_over_http(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # where the NaN capsules go
    model = _MaskedClassifier()
    optimizer = torch.optim.Adam(model.parameters(), 1e-3)
    batches = masked_batches(3)
    session = nansense.start(model, optimizer=optimizer, port=0, open_browser=False)

    def loop():
        for ids, pad, y in session.batches(batches, phase="train"):
            optimizer.zero_grad()
            F.cross_entropy(model(ids, pad), y).backward()
            optimizer.step()
        session.close()

    thread = TrainingThread(loop)
    try:
        assert session.wait_until_stopped(60) == nansense.RunState.PAUSED
        api = Api(session.url)
        snapshot = api.get("/api/snapshot")
        inputs = {i["dtype"]: i for i in snapshot["inputs"]}
        assert set(inputs) == {"int64", "bool"}, snapshot["inputs"]
        ids, pad = batches[0][0], batches[0][1]

        # The token ids: a grid of cells with the numbers written in them.
        image, info = picture(api, "/api/render/input", input=inputs["int64"]["index"], sample=1)
        assert info["layout"] == "values" and info["dtype"] == "int64", info
        assert info["value_min"] == ids[1].min().item() and info["value_max"] == ids[1].max().item()
        assert (image.width, image.height) == (info["width"], info["height"])
        assert image.width > 6 * 12, "six cells wide enough to write a number in each"
        colours = {image.getpixel((x, 1))[:3] for x in range(image.width)}
        assert len(colours) >= 4, "cells of different ids differ"

        # The mask: two colours, the true count said.
        image, info = picture(api, "/api/render/input", input=inputs["bool"]["index"], sample=1)
        assert info["layout"] == "values" and info["dtype"] == "bool", info
        assert info["true_count"] == pad[1].sum().item() == 4
        pitch = (image.width + 1) // 6  # six cells in one row, a 1-pixel gap between them
        assert image.getpixel((1, 1))[:3] == FALSE  # token 0 is kept: false
        assert image.getpixel((5 * pitch + 1, 1))[:3] == TRUE  # token 5 is padding: true

        # The same tensors as the strips of their input layers: one pixel per value.
        image, info = picture(api, "/api/render/strip", layer=inputs["bool"]["name"], kind="activation", sample=1)
        assert info["scale"] == "boolean" and info["dtype"] == "bool" and info["true_count"] == 4, info
        assert image.size == (6, 1)
        assert [image.getpixel((x, 0))[:3] for x in range(6)] == [FALSE, FALSE, TRUE, TRUE, TRUE, TRUE]
        # Averaging and |x| do not apply to values: the picture is the same.
        again, info = picture(api, "/api/render/strip", layer=inputs["bool"]["name"], kind="activation", sample=1,
                              average="true", values="abs")
        assert info["scale"] == "boolean" and again.tobytes() == image.tobytes()
        image, info = picture(api, "/api/render/strip", layer=inputs["int64"]["name"], kind="activation", sample=0)
        assert info["scale"] == "categorical" and info["dtype"] == "int64", info
        assert info["distinct"] == len(set(ids[0].tolist()))
        row = [image.getpixel((x, 0))[:3] for x in range(6)]
        for a in range(6):
            for b in range(6):
                assert (row[a] == row[b]) == bool(ids[0][a] == ids[0][b]), (a, b, ids[0].tolist())
        # A float layer beside them keeps its diverging scale.
        _, info = picture(api, "/api/render/strip", layer="emb", kind="activation", sample=0)
        assert info["scale"] == "diverging" and info["dtype"] == "float32"

        # Statistics: counted, never a mean of ids; the history says why it has none.
        current = api.get("/api/stats/current?layer=" + inputs["bool"]["name"])
        assert current["activation"] is None and current["values"]["true_count"] == pad.sum().item()
        assert abs(current["values"]["true_fraction"] - pad.sum().item() / pad.numel()) < 1e-12
        session.set_stats_scope(nansense.StatsScope.WATCHED)
        assert session.watch(inputs["bool"]["name"]) and session.watch("emb")
        session.step_batch()
        assert session.wait_until_stopped(60) == nansense.RunState.PAUSED
        status, body, _ = api.request("GET", "/api/stats/history?layer=" + inputs["bool"]["name"])
        assert status == 404 and b"floating-point tensors only" in body, body
        assert session.internal_errors == []
    finally:
        session.detach()
        thread.join()


def test_a_tensor_the_checks_cannot_read_turns_off_only_its_own_check(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # where the NaN capsules go
    # A sparse embedding gradient: its |g| sum reads, its band statistics do
    # not. A NaN everywhere still trips on the dense layer, and the sparse
    # one's check alone goes off, said in the report and the banner's errors.
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(20, 8, sparse=True), torch.nn.Linear(8, 3))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(1)
    batches = [(torch.randint(0, 20, (4,), generator=g), torch.randint(0, 3, (4,), generator=g)) for _ in range(6)]
    session = nansense.start(model, optimizer=optimizer, port=0, open_browser=False)
    session.detach()

    def loop():
        # The batch's index, not the body's: the traced re-run of a tripped
        # batch runs the body again (counted with enumerate, the re-run of
        # batch 2 was "batch 3", stayed finite, and the NaN went "not
        # reproduced" with the re-run's finite update applied).
        b = -1
        for ids, y in session.batches(batches, phase="train"):
            if not session.rerunning:
                b += 1
            optimizer.zero_grad()
            loss = F.cross_entropy(model(ids), y)
            if b in (2, 4):
                loss = loss * float("nan")
            loss.backward()
            optimizer.step()
        session.close()

    thread = TrainingThread(loop)
    api = Api(session.url)
    try:
        assert session.wait_until_stopped(60) == nansense.RunState.PAUSED
        error = session.debug_error
        assert error is not None and error.position.batch_idx == 2 and "nan" in error.reasons
        assert "1" in [row.layer for row in error.layers], error.layers
        report = api.get("/api/debug")
        unchecked = report["unchecked_tensors"]
        assert [u["tensor"] for u in unchecked] == ["0.weight"], unchecked
        assert unchecked[0]["source"] == "weight_gradient" and unchecked[0]["layer"] == "0"
        assert unchecked[0]["checks"] == ["nan_inf", "under_over"]
        assert unchecked[0]["position"]["batch_idx"] == 2
        # torch's message, without the C++ backtrace c10::Error carries.
        assert unchecked[0]["error"] and "frame #0" not in unchecked[0]["error"], unchecked[0]["error"]
        assert error.root_cause is not None and error.root_cause["status"] == "found", error.root_cause
        # Said once, where the banner shows nansense's own failures; the
        # checks as a whole stay on.
        errors = api.get("/api/status").get("internal_errors", [])
        checks = [e for e in errors if "numerical check" in e]
        assert len(checks) == 1 and "0.weight" in checks[0], errors
        assert "every other tensor stays checked" in checks[0]
        assert errors == checks, "nothing else of nansense failed on the sparse gradient"
        assert report["settings"]["enabled"]
        # The rest keeps running: dismissed, the next NaN (batch 4) pauses again.
        api.post("/api/debug/choose_update", {"action": "skip"})
        api.post("/api/debug/clear")
        session.detach()
        assert session.wait_until_stopped(60) == nansense.RunState.PAUSED
        assert session.debug_error.position.batch_idx == 4
        assert len(api.get("/api/status").get("internal_errors", [])) == 1
        api.post("/api/debug/choose_update", {"action": "skip"})
    finally:
        session.detach()
        thread.join()


def rerun_loop(session, model, optimizer, scheduler, trip_when, log):
    """The loop body under test: a per-batch scheduler, a counter guarded by
    session.rerunning and one that is not, and a NaN (a class missing from
    the batch) made when trip_when(counters) says."""
    data = class_batches()
    counters = {"bodies": 0, "steps": 0}
    for x, y in session.batches(data, phase="train"):
        counters["bodies"] += 1
        if not session.rerunning:
            counters["steps"] += 1
        log.append((session.rerunning, optimizer.param_groups[0]["lr"]))
        if trip_when(counters):
            y = torch.tensor([0, 1, 1, 0])
        elif (y == 2).sum() == 0:
            y = torch.tensor([0, 1, 2, 2])
        optimizer.zero_grad()
        loss = per_class_loss(model(x), y)
        loss.backward()
        optimizer.step()
        scheduler.step()
        session.log_scalar("loss", loss.item())
    session.close()
    return counters


def test_a_rerun_restores_the_optimizer_and_the_scheduler_and_tells_the_loop(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # where the NaN capsules go
    torch.manual_seed(1)
    model = Mlp()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    session = nansense.start(model, optimizer=optimizer, scheduler=scheduler, port=0, open_browser=False)
    session.detach()
    log = []
    # The NaN comes from the batch's data (batch 2 misses a class): it is the
    # same on the second run.
    thread = TrainingThread(lambda: rerun_loop(session, model, optimizer, scheduler,
                                               lambda c: c["steps"] == 3, log))
    api = Api(session.url)
    try:
        assert session.wait_until_stopped(60) == nansense.RunState.PAUSED
        # Paused in the second run's backward, before its step.
        assert [r for r, _ in log] == [False, False, False, True]
        # The scheduler and Adam were restored to where batch 2 began: the
        # second run sees the first run's lr, and no step of the first run stayed.
        assert [lr for _, lr in log] == [0.01, 0.005, 0.0025, 0.0025]
        assert scheduler.last_epoch == 2
        assert all(int(optimizer.state[p]["step"]) == 2 for p in model.parameters())
        error = session.debug_error
        assert error.rerun and error.root_cause["status"] == "found", error.root_cause
        assert api.get("/api/status")["debug"]["error"]["rerun"] is True
        report = api.get("/api/debug")
        assert report["error"]["rerun"] is True
        assert "the LR scheduler given to start()" in report["rerun"]["restored"]
        assert any("loop body" in s for s in report["rerun"]["seen_twice"])
        api.post("/api/debug/choose_update", {"action": "skip"})
    finally:
        session.detach()
    counters = thread.join()
    assert counters == {"bodies": 6, "steps": 5}
    assert scheduler.last_epoch == 5
    # The skipped update left Adam's step counts at one per applied batch.
    assert all(int(optimizer.state[p]["step"]) == 4 for p in model.parameters())
    # log_scalar kept one loss per batch: the second run's replaced the first's.
    series = [s for s in api.get("/api/metrics")["series"] if s["name"] == "loss"]
    assert [p["batch"] for p in series[0]["points"]] == [0, 1, 2, 3, 4]


def test_a_nan_that_depends_on_a_counter_the_rerun_advances_is_not_reproduced_and_says_why(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # where the NaN capsules go
    torch.manual_seed(1)
    model = Mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.9)
    session = nansense.start(model, optimizer=optimizer, scheduler=scheduler)  # no UI: never pauses
    log = []
    # Counting bodies, not batches: the second run of batch 2 is body 4 and stays finite.
    counters = rerun_loop(session, model, optimizer, scheduler, lambda c: c["bodies"] == 3, log)
    assert counters == {"bodies": 6, "steps": 5}
    error = session.debug_error
    assert error.position.batch_idx == 2 and error.rerun
    assert error.root_cause["status"] == "not_reproduced"
    assert "your loop body keeps itself" in error.root_cause["summary"]
    assert "rerunning" in error.root_cause["summary"]
    assert scheduler.last_epoch == 5
