"""A real Python training loop, paused, stepped and inspected over HTTP."""

import json

import torch
import torch.nn.functional as F

import nansense
from conftest import Api, SmallCnn, TrainingThread, make_data, make_loader


def train(session, model, optimizer, train_loader, val_loader, epochs, record):
    for epoch in range(epochs):
        model.train()
        for x, y in session.batches(train_loader, phase="train"):
            optimizer.zero_grad()
            logits = model(x)
            logits.retain_grad()
            loss = F.cross_entropy(logits, y)
            loss.backward()
            before_step = {n: p.detach().clone() for n, p in model.named_parameters()}
            optimizer.step()
            record.append({"x": x.clone(), "logits": logits.detach().clone(), "logits_grad": logits.grad.clone(),
                           "loss": loss.item(), "before_step": before_step})
        model.eval()
        with torch.no_grad():
            for x, y in session.batches(val_loader, phase="val"):
                model(x)
    session.close()


def test_paused_stepped_and_inspected_over_http():
    model = SmallCnn()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    data = make_data()
    train_loader, val_loader = make_loader(data), make_loader(make_data(16, seed=1), shuffle=False)
    session = nansense.start(model, optimizer=optimizer, port=0, open_browser=False)
    assert session.url and session.url.startswith("http://127.0.0.1:")
    api = Api(session.url)
    record = []
    loop = TrainingThread(lambda: train(session, model, optimizer, train_loader, val_loader, 2, record))

    # The first batch always pauses (the initial mode is step_batch).
    assert session.wait_until_stopped(60) == nansense.RunState.PAUSED
    status = api.get("/api/status")
    assert status["state"] == "paused"
    assert status["live_position"]["phase"] == "train"
    assert status["live_position"]["batch_idx"] == 0

    # Layer names follow the Python module paths; parameterless modules
    # (ReLU, MaxPool2d, Flatten) are matched to their registered module.
    arch = api.get("/api/architecture")
    names = [layer["name"] for layer in arch["layers"]]
    for expected in ["features.0", "features.1", "features.2", "classifier.0", "classifier.1", "classifier.2",
                     "classifier.3"]:
        assert expected in names, names
    conv = next(layer for layer in arch["layers"] if layer["name"] == "features.0")
    assert conv["kind"] == "Conv2d"
    assert conv["parameters"] == ["features.0.weight", "features.0.bias"]
    assert conv["description"].startswith("Conv2d(1, 4, kernel_size=(3, 3)")
    assert arch["inputs"] and arch["inputs"][0] in names

    # The snapshot holds what the loop computed, bit for bit.
    snap = session.snapshot
    assert snap.position.batch_idx == 0 and snap.position.phase == "train"
    assert len(record) == 1
    assert torch.equal(snap.activations["classifier.3"], record[0]["logits"])
    assert torch.equal(snap.activation_gradients["classifier.3"], record[0]["logits_grad"])
    assert torch.equal(snap.inputs[0], record[0]["x"])
    # The loop is paused after its optimizer step: weights are the live ones.
    for name, p in model.named_parameters():
        assert torch.equal(snap.weights[name], p.detach()), name
        assert torch.equal(snap.weight_gradients[name], p.grad), name
    # An inner layer against the same computation done here.
    pre = record[0]["before_step"]
    expected_relu = F.relu(F.conv2d(record[0]["x"], pre["features.0.weight"], pre["features.0.bias"]))
    assert torch.allclose(snap.activations["features.1"], expected_relu, rtol=0, atol=1e-6)
    assert torch.equal(snap.activations["features.2"], F.max_pool2d(snap.activations["features.1"], 2))

    # The Python optimizer's state and hyperparameters, per parameter name,
    # as the engine shows a C++ optimizer's.
    for name, p in model.named_parameters():
        assert torch.equal(snap.optimizer_state[name]["momentum_buffer"], optimizer.state[p]["momentum_buffer"]), name
        assert snap.optimizer_hyperparams[name]["lr"] == 0.1 and snap.optimizer_hyperparams[name]["momentum"] == 0.9

    # The HTTP snapshot summarises the same tensors.
    http_snap = api.get("/api/snapshot")
    param = next(p for p in http_snap["parameters"] if p["name"] == "features.0.weight")
    assert param["hyperparameters"]["lr"] == 0.1 and param["hyperparameters"]["nesterov"] == 0
    buffer = optimizer.state[model.features[0].weight]["momentum_buffer"]
    assert param["optimizer_state"]["momentum_buffer"]["shape"] == list(buffer.shape)
    assert abs(param["optimizer_state"]["momentum_buffer"]["max"] - buffer.max().item()) < 1e-6
    layer = next(layer for layer in http_snap["layers"] if layer["name"] == "classifier.3")
    logits = record[0]["logits"]
    assert layer["activation"]["shape"] == list(logits.shape)
    assert abs(layer["activation"]["min"] - logits.min().item()) < 1e-5
    assert abs(layer["activation"]["max"] - logits.max().item()) < 1e-5
    assert abs(layer["activation"]["mean"] - logits.mean().item()) < 1e-5

    # Step one batch: the loop runs exactly one more batch and pauses.
    status = api.post("/api/step", {"unit": "batch", "timeout_seconds": 30})
    assert status["state"] == "paused"
    assert status["live_position"]["batch_idx"] == 1
    assert len(record) == 2
    assert torch.equal(session.snapshot.activations["classifier.3"], record[1]["logits"])

    # Step to the next phase: the first val batch, in eval mode, no gradients.
    status = api.post("/api/step", {"unit": "phase", "timeout_seconds": 30})
    assert status["live_position"]["phase"] == "val"
    assert len(record) == len(train_loader)
    snap = session.snapshot
    assert snap.position.phase == "val"
    assert "classifier.3" not in snap.activation_gradients

    # Run to the end; the loop closes the session.
    api.post("/api/run", {"detach": True})
    loop.join()
    assert session.state == nansense.RunState.FINISHED
    assert len(record) == 2 * len(train_loader)
    assert session.schedule.phases == {"train": len(train_loader), "val": len(val_loader)}


def test_run_control_from_python_and_the_mcp_endpoint():
    model = SmallCnn()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    loader = make_loader(make_data(32), batch_size=8)
    session = nansense.start(model, optimizer=optimizer, port=0, open_browser=False, input_mean=0.5, input_std=0.25)
    positions = []

    def loop():
        for x, y in session.batches(loader, phase="train"):
            positions.append(session.live_position)
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
            optimizer.step()
        session.close()

    thread = TrainingThread(loop)
    assert session.wait_until_stopped(60) == nansense.RunState.PAUSED
    assert session.mode == nansense.Mode.STEP_BATCH
    session.run_until(phase="train", epoch=0, batch_idx=2)
    assert session.wait_until_stopped(60) == nansense.RunState.PAUSED
    assert session.live_position.batch_idx == 2
    assert [p.batch_idx for p in positions] == [0, 1, 2]

    # The same session over MCP: initialize, then a tool call.
    api = Api(session.url)
    accept = {"Accept": "application/json"}
    status, body, headers = api.request("POST", "/mcp", {
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-03-26", "capabilities": {},
                   "clientInfo": {"name": "pytest", "version": "1"}}}, accept)
    assert status == 200, body
    session_id = {k.lower(): v for k, v in headers.items()}["mcp-session-id"]
    status, body, _ = api.request("POST", "/mcp", {
        "jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "get_status", "arguments": {}}},
        {**accept, "Mcp-Session-Id": session_id})
    assert status == 200, body
    reply = json.loads(body)
    assert not reply["result"].get("isError"), reply
    tool_status = json.loads(reply["result"]["content"][0]["text"])
    assert tool_status["state"] == "paused"
    assert tool_status["live_position"]["batch_idx"] == 2

    # The input pane denormalises with the given mean/std.
    status, png, headers = api.request("GET", "/api/render/input?sample=0")
    assert status == 200 and png[1:4] == b"PNG"

    session.detach()
    thread.join()
    assert [p.batch_idx for p in positions] == [0, 1, 2, 3]
    assert session.state == nansense.RunState.FINISHED


class Swish(torch.nn.Module):
    def forward(self, x):
        return x * torch.sigmoid(x)


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)
        self.act = Swish()

    def forward(self, x):
        return self.act(self.fc(x)) + x


class ScopedNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = torch.nn.Linear(4, 8)
        self.blocks = torch.nn.Sequential(Block(), Block())
        self.relu = torch.nn.ReLU()  # called twice
        self.out = torch.nn.Linear(8, 3)

    def forward(self, x):
        return self.out(self.relu(self.blocks(self.relu(self.inp(x)))))


def test_module_calls_give_every_op_its_exact_scope():
    model = ScopedNet()
    session = nansense.start(model)
    session.detach()
    session.refresh()  # capture the first batch without pausing
    for x, y in session.batches([(torch.randn(5, 4), torch.tensor([0, 1, 2, 0, 1]))], phase="train"):
        F.cross_entropy(model(x), y).backward()
    session.close()
    assert session.layer_names == [
        "input", "inp", "relu",
        "blocks.0.fc", "blocks.0.act.sigmoid", "blocks.0.act.mul", "blocks.0.add",
        "blocks.1.fc", "blocks.1.act.sigmoid", "blocks.1.act.mul", "blocks.1.add",
        "relu#2", "out"]
    snap = session.snapshot
    assert torch.equal(snap.activations["blocks.0.act.mul"],
                       snap.activations["blocks.0.fc"] * torch.sigmoid(snap.activations["blocks.0.fc"]))


class TiedLm(torch.nn.Module):
    """An embedding and an output head that share one weight (GPT-2's lm_head)."""

    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(10, 4)
        self.head = torch.nn.Linear(4, 10, bias=False)
        self.head.weight = self.emb.weight

    def forward(self, ids):
        return self.head(torch.tanh(self.emb(ids)))


def test_a_tied_weight_names_the_module_that_runs_the_op():
    model = TiedLm()
    session = nansense.start(model)
    session.detach()
    session.refresh()
    ids = torch.tensor([[1, 2, 3], [4, 5, 6]])
    for (x,) in session.batches([(ids,)], phase="train"):
        model(x).sum().backward()
    session.close()
    # ("sum": the loop's reduction after the forward, as any op on the way to backward.)
    assert session.layer_names == ["input", "emb", "tanh", "head", "sum"]
    snap = session.snapshot
    assert torch.equal(snap.activations["head"], model(ids).detach())
