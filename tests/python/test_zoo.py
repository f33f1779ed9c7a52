"""The model zoo through the Python package: models nobody here wrote
(torchvision's ResNet-50, MobileNetV3, ViT-B/16; Hugging Face GPT-2 and BERT
from their configs; an LSTM language model; the NaN scheme's per-class-loss
ResNet), each in a real training loop, served, with a NaN mid-run.

For each model: layers are named by module path; every nn.Linear / nn.Conv2d
(GPT-2: Conv1D) is one layer per call; the guard checks every batch to the
end; the NaN is caught at its batch with its producer op and layer named;
the snapshot and the strips render as PNGs. Random weights, small inputs,
nothing downloaded."""

import json
import os
from collections import Counter

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import nansense
from conftest import Api, TrainingThread

torchvision = pytest.importorskip("torchvision")

PNG = b"\x89PNG\r\n\x1a\n"
N_BATCHES = 5
NAN_BATCH = 2


def linear_modules(model, extra=()):
    """Every nn.Linear / nn.Conv2d (and the given extra types) by module path."""
    types = (nn.Linear, nn.Conv2d, *extra)
    return {name: type(m).__name__ for name, m in model.named_modules() if isinstance(m, types)}


def inject_nan(session, module, batch_idx):
    """A forward hook that multiplies the module's output by NaN on the given
    batch. Keyed by the session's live position, not a loop counter: a
    tripped batch runs the loop body twice (its traced re-run), and a counter
    would see the re-run as the next batch."""

    def hook(mod, args, output):
        if session.live_position.batch_idx != batch_idx:
            return None
        if isinstance(output, tuple):  # nn.LSTM: (output, (h, c))
            return (output[0] * float("nan"),) + output[1:]
        return output * float("nan")

    return module.register_forward_hook(hook)


def picture(api, path):
    status, body, headers = api.request("GET", path)
    assert status == 200, f"GET {path}: {status} {body[:300]!r}"
    assert body[:8] == PNG, f"GET {path}: not a PNG: {body[:16]!r}"
    return json.loads(headers["X-Nansense-Render"])


def run_zoo_model(model, batches, loss_of, *, expected_names, linears, strips, weight, producer, tmp_path,
                  capfd, nan_module=None):
    """Trains `model` on `batches` served, with a NaN at NAN_BATCH (a hook on
    `nan_module`, or the batches' own NaN), and checks it end to end.

    producer: (op, layer) the root cause must name; strips: layers whose
    activation and gradient strips must render; weight: (layer, parameter)
    whose weight strip must render."""
    assert len(batches) == N_BATCHES
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    session = nansense.start(model, optimizer=optimizer, port=0, open_browser=False)
    session.set_debug_settings(nansense.DebugSettings(capsule_dir=str(tmp_path)))
    api = Api(session.url)
    if nan_module is not None:
        inject_nan(session, model.get_submodule(nan_module), NAN_BATCH)
    bodies = []

    def loop():
        model.train()
        for batch in session.batches(batches, phase="train"):
            bodies.append(session.live_position.batch_idx)
            optimizer.zero_grad()
            loss_of(model, batch).backward()
            optimizer.step()
        session.close()

    thread = TrainingThread(loop)
    try:
        # The first batch pauses (a served session starts in step_batch).
        assert session.wait_until_stopped(60) == nansense.RunState.PAUSED
        assert session.live_position.batch_idx == 0

        # (a) Layers are named by module path.
        arch = api.get("/api/architecture")
        layers = arch["layers"]
        names = [layer["name"] for layer in layers]
        assert names == session.layer_names
        for name in expected_names:
            assert name in names, (name, names)

        # (b) Every Linear / Conv2d is one layer per call (each is called
        # once per forward in these models), named by its path, of its kind.
        by_module = Counter(layer["module"] for layer in layers if layer["module"] in linears)
        assert by_module == Counter({name: 1 for name in linears}), \
            {n: by_module.get(n, 0) for n in linears if by_module.get(n, 0) != 1}
        for layer in layers:
            if layer["module"] in linears:
                assert layer["name"] == layer["module"], layer["name"]
                assert layer["kind"] == linears[layer["module"]], (layer["name"], layer["kind"])
        assert sum(layer["kind"] in set(linears.values()) for layer in layers) == len(linears)

        # (e) The snapshot and the strips render.
        snap = session.snapshot
        assert snap.position.batch_idx == 0
        http_snap = api.get("/api/snapshot")
        assert {layer["name"] for layer in http_snap["layers"]} <= set(names)
        # Memory within the budget: the batch's copies fit the budget the
        # snapshot used (a share of the step's memory, at most 512 MiB), or
        # it kept the one sample it always keeps.
        budget = http_snap["budget"]
        assert 0 < budget["budget_bytes"] <= 512 << 20, budget
        assert budget["held_bytes"] <= budget["budget_bytes"] or http_snap["samples_kept"] == 1, budget
        for name in strips:
            assert torch.isfinite(snap.activations[name]).all(), name
            assert name in snap.activation_gradients, name
            for kind in ("activation", "gradient"):
                info = picture(api, f"/api/render/strip?layer={name}&kind={kind}&sample=0")
                assert info["layer"] == name and info["kind"] == kind and info["nan"] == 0, info
        layer_name, parameter = weight
        info = picture(api, f"/api/render/weight_strip?layer={layer_name}&parameter={parameter}")
        assert info["layer"] == layer_name, info
        # Paused after the step: the snapshot's weights are the live ones.
        live = dict(model.named_parameters())[parameter]
        assert torch.equal(snap.weights[parameter], live.detach())
        # The input pane: images, and token ids drawn as a strip.
        info = picture(api, "/api/render/input?sample=0")
        assert info["name"] == names[0] == "input", info
        # Bool and integer inputs (token ids, attention masks) are drawn as
        # values: their input layers' strips and their input pictures.
        for entry in http_snap["inputs"]:
            if entry["dtype"] == "bool" or entry["dtype"].startswith("int"):
                info = picture(api, f"/api/render/strip?layer={entry['name']}&kind=activation&sample=0")
                assert info["scale"] == ("boolean" if entry["dtype"] == "bool" else "categorical"), info
                info = picture(api, f"/api/render/input?input={entry['index']}&sample=0")
                assert info["layout"] in ("values", "strip") and info["dtype"] == entry["dtype"], info

        # (d) The NaN is caught at its batch, before the optimizer step.
        session.detach()
        assert session.wait_until_stopped(60) == nansense.RunState.PAUSED
        error = session.debug_error
        assert error is not None and error.position.batch_idx == NAN_BATCH, error
        assert "nan" in error.reasons
        cause = error.root_cause
        assert cause["status"] == "found", cause["summary"]
        op, layer = producer
        assert cause["producer"]["op"] == op, cause["summary"]
        assert cause["producer"]["pass"] == "forward", cause["summary"]
        assert cause["producer"]["layer"] == layer, cause["summary"]
        assert cause["producer"]["inputs"][0]["nan"] == 0, cause["producer"]["inputs"][0]
        # Known bug (NaN constant): for `output * float("nan")` the summary says
        # "produced NaN from finite inputs" though the producer's second input
        # (the wrapped scalar) is listed with nan 1; the wording is not asserted.
        report = api.get("/api/debug")
        assert report["error"]["root_cause"]["producer"]["op"] == op
        assert report["error"]["update"] == "held"
        assert error.capsule and os.path.isfile(error.capsule), error.capsule
        # The tripped batch's strips render, NaNs counted.
        nan_layer, nan_kind = (layer, "activation") if layer is not None else (strips[-1], "gradient")
        info = picture(api, f"/api/render/strip?layer={nan_layer}&kind={nan_kind}&sample=0")
        assert info["nan"] > 0, info
        # Skip the poisoned update, then run on to the end.
        assert api.post("/api/debug/choose_update", {"action": "skip"})["skip_update"] is True
        session.detach()
        thread.join(120)
    finally:
        if thread.thread.is_alive():
            session.detach()
            thread.thread.join(60)

    # (c) The guard checked every batch to the end and never turned off.
    assert session.state == nansense.RunState.FINISHED
    assert session.internal_errors == []
    # The tripped batch ran twice (untraced, then its traced re-run).
    assert bodies == [0, 1, NAN_BATCH, NAN_BATCH, 3, 4]
    report = api.get("/api/debug")
    assert report["settings"]["enabled"] is True
    # Every batch, plus the traced re-run of the tripped one.
    assert report["checked_batches"] == N_BATCHES + 1, report["checked_batches"]
    err = capfd.readouterr().err
    assert "disabled" not in err, err
    # The skipped update left the weights finite.
    for name, p in model.named_parameters():
        assert torch.isfinite(p).all(), name
    return session, arch


def image_batches(shape, classes, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(*shape, generator=g), torch.randint(0, classes, (shape[0],), generator=g))
            for _ in range(N_BATCHES)]


def cross_entropy(model, batch):
    x, y = batch
    return F.cross_entropy(model(x), y)


def test_resnet50(tmp_path, capfd):
    model = torchvision.models.resnet50(num_classes=10)
    run_zoo_model(
        model, image_batches((2, 3, 64, 64), 10), cross_entropy,
        expected_names=["conv1", "bn1", "relu", "maxpool", "layer1.0.conv1", "layer1.0.downsample.0",
                        "layer2.0.relu#2", "layer4.2.conv3", "avgpool", "fc"],
        linears=linear_modules(model), strips=["layer1.0.conv1", "layer4.2.bn3"], weight=("conv1", "conv1.weight"),
        nan_module="layer3.1.conv2", producer=("aten::mul", "layer3.1.mul"), tmp_path=tmp_path, capfd=capfd)


def test_mobilenet_v3_small(tmp_path, capfd):
    model = torchvision.models.mobilenet_v3_small(num_classes=10)
    run_zoo_model(
        model, image_batches((2, 3, 64, 64), 10), cross_entropy,
        expected_names=["features.0.0", "features.1.block.1.fc1", "features.1.block.1.fc2", "features.4.block.1.0",
                        "features.12.0", "classifier.0", "classifier.3"],
        linears=linear_modules(model), strips=["features.1.block.0.0", "classifier.0"],
        weight=("features.0.0", "features.0.0.weight"),
        nan_module="features.4.block.1.0", producer=("aten::mul", "features.4.block.1.mul"),
        tmp_path=tmp_path, capfd=capfd)


def test_vit_b16(tmp_path, capfd):
    # ViT-B/16's width (12 heads, hidden 768, MLP 3072, 16x16 patches) on
    # 32x32 images (4 patches and the class token), but 4 encoder layers,
    # not 12: the full depth took 37 s on 2 cores, most of it the tripped
    # batch (its untraced run and traced re-run, about 15 s each, with a
    # 1 GB capsule: weights, momentum and gradients of 86M parameters).
    model = torchvision.models.VisionTransformer(image_size=32, patch_size=16, num_layers=4, num_heads=12,
                                                 hidden_dim=768, mlp_dim=3072, num_classes=10)
    linears = linear_modules(model)
    # nn.MultiheadAttention never calls its out_proj module: it passes
    # out_proj.weight to F.multi_head_attention_forward. The engine still
    # names that linear after the weight's module, once per call.
    assert "encoder.layers.encoder_layer_0.self_attention.out_proj" in linears
    run_zoo_model(
        model, image_batches((2, 3, 32, 32), 10), cross_entropy,
        expected_names=["conv_proj", "encoder.layers.encoder_layer_0.ln_1",
                        "encoder.layers.encoder_layer_0.self_attention",
                        "encoder.layers.encoder_layer_0.self_attention.out_proj",
                        "encoder.layers.encoder_layer_0.mlp.0", "encoder.layers.encoder_layer_3.mlp.3",
                        "encoder.ln", "heads.head"],
        linears=linears, strips=["conv_proj", "encoder.layers.encoder_layer_3.mlp.0"],
        weight=("encoder.layers.encoder_layer_0.mlp.0", "encoder.layers.encoder_layer_0.mlp.0.weight"),
        nan_module="encoder.layers.encoder_layer_2.mlp.0",
        producer=("aten::mul", "encoder.layers.encoder_layer_2.mlp.mul"), tmp_path=tmp_path, capfd=capfd)


def token_batches(vocab, shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randint(0, vocab, shape, generator=g),) for _ in range(N_BATCHES)]


def test_gpt2(tmp_path, capfd):
    transformers = pytest.importorskip("transformers")
    from transformers.pytorch_utils import Conv1D
    config = transformers.GPT2Config(n_layer=2, n_head=2, n_embd=32, vocab_size=64, n_positions=16,
                                     bos_token_id=None, eos_token_id=None)
    model = transformers.GPT2LMHeadModel(config)  # random weights from the config: no download
    model.loss_type = "ForCausalLM"
    assert model.lm_head.weight is model.transformer.wte.weight  # tied
    # GPT-2's projections are transformers' Conv1D, not nn.Linear: count those
    # too. Known bug: Conv1D layers report flattened output shapes
    # ([B*T, D]), so no shape is asserted here.
    linears = linear_modules(model, extra=(Conv1D,))
    assert len(linears) == 9  # 4 Conv1D per block, and lm_head
    # The tied lm_head was reported named after its weight's owner,
    # "transformer.wte#2" (kind Embedding); with this build it is "lm_head"
    # (kind Linear), which (a) and (b) assert.
    session, arch = run_zoo_model(
        model, token_batches(64, (2, 16)), lambda m, b: m(input_ids=b[0], labels=b[0]).loss,
        expected_names=["transformer.wte", "transformer.wpe", "transformer.h.0.ln_1", "transformer.h.0.attn.c_attn",
                        "transformer.h.0.attn.scaled_dot_product_attention", "transformer.h.1.mlp.c_proj",
                        "transformer.ln_f", "lm_head"],
        linears=linears, strips=["transformer.h.0.attn.c_attn", "lm_head"],
        weight=("transformer.h.0.mlp.c_fc", "transformer.h.0.mlp.c_fc.weight"),
        nan_module="transformer.h.1.mlp.c_fc", producer=("aten::mul", "transformer.h.1.mlp.mul"),
        tmp_path=tmp_path, capfd=capfd)
    assert "transformer.wte#2" not in session.layer_names


def test_bert(tmp_path, capfd):
    transformers = pytest.importorskip("transformers")
    config = transformers.BertConfig(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                     intermediate_size=64, max_position_embeddings=16, num_labels=3)
    model = transformers.BertForSequenceClassification(config)  # random weights: no download
    g = torch.Generator().manual_seed(0)
    batches = []
    for _ in range(N_BATCHES):
        mask = torch.ones(2, 12, dtype=torch.long)
        mask[1, 8:] = 0  # padding
        batches.append((torch.randint(0, 64, (2, 12), generator=g), mask, torch.randint(0, 3, (2,), generator=g)))
    linears = linear_modules(model)
    assert len(linears) == 14  # q, k, v, attention out, intermediate, out per layer; pooler; classifier
    # Known bug (BERT embeddings): the layers "bert.embeddings.token_type_embeddings"
    # and ".position_embeddings" hold the running sum (word + token type, + position),
    # kind Embedding with op "add", not the lookups: no activation of theirs is
    # compared with the module's output here.
    session, arch = run_zoo_model(
        model, batches, lambda m, b: m(input_ids=b[0], attention_mask=b[1], labels=b[2]).loss,
        expected_names=["bert.embeddings.word_embeddings", "bert.embeddings.LayerNorm",
                        "bert.encoder.layer.0.attention.self.query", "bert.encoder.layer.0.attention.self.value",
                        "bert.encoder.layer.1.output.dense", "bert.pooler.dense", "classifier"],
        linears=linears, strips=["bert.encoder.layer.0.attention.self.query", "classifier"],
        weight=("bert.encoder.layer.0.intermediate.dense", "bert.encoder.layer.0.intermediate.dense.weight"),
        nan_module="bert.encoder.layer.1.attention.self.value",
        producer=("aten::mul", "bert.encoder.layer.1.attention.self.mul"), tmp_path=tmp_path, capfd=capfd)
    # The model inputs are the forward's keyword arguments, masks included.
    assert len(arch["inputs"]) == 3


class LstmLanguageModel(nn.Module):
    def __init__(self, vocab=50, dim=32, hidden=64):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.lstm = nn.LSTM(dim, hidden, num_layers=2, batch_first=True)
        self.head = nn.Linear(hidden, vocab)

    def forward(self, ids):
        h, _ = self.lstm(self.emb(ids))
        return self.head(h)


def next_token_loss(model, batch):
    (ids,) = batch
    return F.cross_entropy(model(ids[:, :-1]).flatten(0, 1), ids[:, 1:].flatten())


def test_lstm_language_model(tmp_path, capfd):
    model = LstmLanguageModel()
    session, arch = run_zoo_model(
        model, token_batches(50, (4, 13)), next_token_loss,
        expected_names=["emb", "lstm", "head"], linears=linear_modules(model), strips=["lstm", "head"],
        weight=("lstm", "lstm.weight_ih_l0"),
        # A hook on the LSTM's output: the mul is outside every module call.
        nan_module="lstm", producer=("aten::mul", "mul"), tmp_path=tmp_path, capfd=capfd)
    kinds = {layer["name"]: layer["kind"] for layer in arch["layers"]}
    assert kinds["emb"] == "Embedding" and kinds["lstm"] == "LSTM" and kinds["head"] == "Linear"


def per_class_bce(logits, y):
    """The NaN scheme's loss: each class's BCE divided by that class's count
    in the batch, summed. A batch without a class divides 0 by 0."""
    target = F.one_hot(y, logits.shape[1]).float()
    bce = F.binary_cross_entropy_with_logits(logits, target, reduction="none")
    total = logits.new_zeros(())
    for c in range(logits.shape[1]):
        mask = (y == c).float()
        total = total + (bce[:, c] * mask).sum() / mask.sum()
    return total


def test_per_class_loss_resnet18(tmp_path, capfd):
    model = torchvision.models.resnet18(num_classes=3)
    g = torch.Generator().manual_seed(0)
    batches = []
    for i in range(N_BATCHES):
        y = torch.tensor([0, 1, 1, 0]) if i == NAN_BATCH else torch.tensor([0, 1, 2, 2])  # no class 2
        batches.append((torch.randn(4, 3, 32, 32, generator=g), y))
    session, arch = run_zoo_model(
        model, batches, lambda m, b: per_class_bce(m(b[0]), b[1]),
        expected_names=["conv1", "layer1.0.conv1", "layer1.0.relu#2", "layer2.0.downsample.0", "layer4.1.bn2", "fc"],
        linears=linear_modules(model), strips=["layer1.0.conv1", "fc"], weight=("fc", "fc.weight"),
        # The division of the loss, outside the model: no layer.
        producer=("aten::div", None), tmp_path=tmp_path, capfd=capfd)
    cause = session.debug_error.root_cause
    assert cause["producer"]["inputs"][1]["max"] == 0.0  # the missing class's count
    assert "fc" in [row.layer for row in session.debug_error.layers]
