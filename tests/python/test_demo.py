"""The Python demo end to end on Debian's Fashion-MNIST: it serves the UI,
pauses, names its layers by the Python module paths (the same names as the
C++ demo's), steps, and finishes once detached."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import Api

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "examples" / "python" / "fashion_mnist.py"
# The demo's default --data-dir: Debian's dataset-fashion-mnist.
DATA = Path("/usr/share/datasets/fashion-mnist")
FILES = ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", "t10k-images-idx3-ubyte.gz",
         "t10k-labels-idx1-ubyte.gz")


def test_the_demo_serves_pauses_and_names_its_layers():
    missing = [name for name in FILES if not (DATA / name).is_file()]
    if missing:
        pytest.skip(f"the Fashion-MNIST dataset is missing ({', '.join(missing)} not in {DATA}): "
                    "install dataset-fashion-mnist (scripts/setup does)")
    demo = subprocess.Popen([sys.executable, str(DEMO), "--port", "0", "--no-browser", "--epochs", "1",
                             "--limit-batches", "4", "--exit-when-done"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        url = None
        for line in demo.stdout:
            found = re.search(r"http://127\.0\.0\.1:\d+/", line)
            if found:
                url = found.group(0)
                break
        assert url, "the demo printed no address"
        api = Api(url)
        status = api.post("/api/step", {"unit": "batch", "timeout_seconds": 60})
        assert status["state"] == "paused"
        assert status["live_position"]["phase"] == "train"
        arch = api.get("/api/architecture")
        names = [layer["name"] for layer in arch["layers"] if not layer["shape_op"] or layer["role"] == "module"]
        assert names == ["input", "features.0", "features.1", "features.2", "features.3", "features.4", "features.5",
                         "classifier.0", "classifier.1", "classifier.2", "classifier.3", "classifier.4",
                         "log_softmax"]
        kinds = {layer["name"]: layer["kind"] for layer in arch["layers"]}
        assert kinds["features.0"] == "Conv2d" and kinds["classifier.4"] == "Linear"
        api.post("/api/run", {"detach": True})
        rest = demo.stdout.read()
        assert "epoch 0: val accuracy" in rest
        assert demo.wait(timeout=120) == 0
    finally:
        if demo.poll() is None:
            demo.kill()
            demo.wait()
