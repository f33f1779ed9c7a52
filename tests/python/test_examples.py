"""The Python examples end to end, each as its one command with a free port:
it serves the UI, pauses on its first batch, names its layers by the model's
module paths, steps, and finishes once detached; and the Lightning example's
--nan without a UI stops its trainer at the NaN, naming the capsule; so does
the Hugging Face Trainer example."""

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import Api

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "python"
FASHION = Path("/usr/share/datasets/fashion-mnist")
FASHION_FILES = ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", "t10k-images-idx3-ubyte.gz",
                 "t10k-labels-idx1-ubyte.gz")
TEXT = Path("/usr/share/common-licenses/GPL-3")
SMOKE = ["--port", "0", "--no-browser", "--epochs", "1", "--limit-batches", "3", "--exit-when-done"]


def need_fashion_mnist():
    missing = [name for name in FASHION_FILES if not (FASHION / name).is_file()]
    if missing:
        pytest.skip(f"the Fashion-MNIST dataset is missing ({', '.join(missing)} not in {FASHION}): "
                    "install dataset-fashion-mnist (scripts/setup does)")


def need(module, package):
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} is not installed (pip install {package}; requirements.txt has it)")


def run(example, args, cwd, **kwargs):
    # One thread: the smoke runs share small machines with builds.
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen([sys.executable, str(EXAMPLES / example), *args], cwd=cwd, env=env, text=True,
                            **kwargs)


def served_pauses_steps_and_finishes(example, tmp_path, expect_layers, epoch_line):
    """Run example in smoke mode, step one batch over the API, check the layer
    names, detach, and return what it printed after."""
    proc = run(example, SMOKE, tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        url = None
        seen = []
        for line in proc.stdout:
            seen.append(line)
            found = re.search(r"http://127\.0\.0\.1:\d+/", line)
            if found:
                url = found.group(0)
                break
        assert url, f"{example} printed no address:\n{''.join(seen)}"
        api = Api(url)
        status = api.post("/api/step", {"unit": "batch", "timeout_seconds": 60})
        assert status["state"] == "paused"
        assert status["live_position"]["phase"] == "train"
        first = status["live_position"]["batch_idx"]
        status = api.post("/api/step", {"unit": "batch", "timeout_seconds": 60})
        assert status["state"] == "paused"
        assert status["live_position"]["batch_idx"] == first + 1
        arch = api.get("/api/architecture")
        names = {layer["name"] for layer in arch["layers"]}
        missing = [name for name in expect_layers if name not in names]
        assert not missing, f"layers {missing} not among {sorted(names)}"
        api.post("/api/run", {"detach": True})
        rest = proc.stdout.read()
        assert proc.wait(timeout=60) == 0, rest
        assert re.search(epoch_line, rest), rest
        return rest
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_the_lightning_example_serves_pauses_and_names_its_layers(tmp_path):
    need_fashion_mnist()
    need("lightning", "lightning")
    served_pauses_steps_and_finishes(
        "lightning_classifier.py", tmp_path,
        ["features.0", "features.3", "classifier.1", "classifier.4"], r"epoch 0: val accuracy \d\.\d{3}")


def test_the_lightning_example_stops_at_a_nan_without_a_ui(tmp_path):
    need_fashion_mnist()
    need("lightning", "lightning")
    # Batches of 8 of ten classes: the first lacks one, the per-class loss divides by zero.
    proc = run("lightning_classifier.py", ["--no-ui", "--nan", "--epochs", "1", "--limit-batches", "3",
                                           "--batch-size", "8", "--exit-when-done"], tmp_path,
               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 1, out + err
    found = re.search(r"capsule: (\S+) \(no UI served: NansenseCallback stops the trainer after this batch\)", err)
    assert found, err
    capsule = Path(found.group(1))
    capsule = capsule if capsule.is_absolute() else tmp_path / capsule
    assert capsule.is_file() and capsule.parent.name == "nansense_capsules"
    assert capsule.resolve().is_relative_to(tmp_path.resolve())
    assert "[nansense] the trainer stops at the NaN of train epoch 0" in err


def test_the_transformer_example_serves_pauses_and_names_its_layers(tmp_path):
    need("transformers", "transformers")
    if not TEXT.is_file():
        pytest.skip(f"{TEXT} (the example's default text, Debian's base-files) is missing")
    # lm_head's weight is transformer.wte's (tied): the layer is still lm_head.
    served_pauses_steps_and_finishes(
        "hf_transformer.py", tmp_path,
        ["input", "transformer.wte", "transformer.wpe", "transformer.h.0.attn.c_attn",
         "transformer.h.0.attn.scaled_dot_product_attention", "transformer.h.0.mlp.c_fc", "transformer.h.1.ln_2",
         "transformer.ln_f", "lm_head"], r"epoch 0: val loss \d+\.\d{3} \(perplexity")


def test_the_transformer_example_catches_its_nan_without_a_ui(tmp_path):
    need("transformers", "transformers")
    if not TEXT.is_file():
        pytest.skip(f"{TEXT} (the example's default text, Debian's base-files) is missing")
    # Batches of 16 lines: the first has a blank one, whose mean loss divides by zero.
    proc = run("hf_transformer.py", ["--no-ui", "--nan", "--epochs", "1", "--limit-batches", "2",
                                     "--exit-when-done"], tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 1, out + err
    assert "aten::div in the forward" in err and "training continues" in err, err
    assert list((tmp_path / "nansense_capsules").glob("*.capsule")), err


def test_the_hf_trainer_example_serves_pauses_and_names_its_layers(tmp_path):
    need("transformers", "transformers")
    need("accelerate", "accelerate")
    served_pauses_steps_and_finishes(
        "hf_trainer.py", tmp_path,
        ["transformer.wte", "transformer.h.0.attn.c_attn", "transformer.h.1.mlp.c_fc", "lm_head", "lm_head#2"],
        r"trained 3 optimizer steps")


def test_the_hf_trainer_example_stops_the_trainer_at_its_nan_without_a_ui(tmp_path):
    need("transformers", "transformers")
    need("accelerate", "accelerate")
    proc = run("hf_trainer.py", ["--no-ui", "--nan", "--exit-when-done"], tmp_path, stdout=subprocess.PIPE,
               stderr=subprocess.PIPE)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 1, out + err
    assert "the Trainer stops at the NaN of train epoch 0 step 2 (global_step 3), micro-batch 1 of 2 " in err, err
    assert "aten::div in the forward" in err, err
    assert list((tmp_path / "nansense_capsules").glob("*.capsule")), err
    assert "trained 3 optimizer steps" in out
