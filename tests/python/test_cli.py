"""nansense-cli (python/nansense_cli) against real served sessions on
loopback: a training loop paused at its first batch, and a locked, parked
session. The CLI runs as its own process (`python -m nansense_cli`, what the
console script runs), with the test's sys.path, as an agent's shell would run
it."""

import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request

import pytest
import torch
import torch.nn.functional as F

import nansense
from conftest import SmallCnn, TrainingThread, make_data, make_loader

ENV = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p), PYTHONDONTWRITEBYTECODE="1")


def cli(*args, url=None, python_flags=()):
    """Runs nansense-cli with --url url (when given) and the arguments."""
    where = ["--url", url] if url else []
    return subprocess.run([sys.executable, *python_flags, "-m", "nansense_cli", *where, *args],
                          capture_output=True, text=True, env=ENV, timeout=120)


def mcp_tools(url):
    """The server's tools/list, asked directly (the CLI's only source)."""
    endpoint = url.rstrip("/") + "/mcp"

    def post(message, session=None):
        headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
        if session:
            headers["Mcp-Session-Id"] = session
        request = urllib.request.Request(endpoint, json.dumps(message).encode(), headers=headers, method="POST")
        with urllib.request.urlopen(request, timeout=30) as reply:
            return json.loads(reply.read() or b"null"), reply.headers.get("Mcp-Session-Id")

    _, session = post({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                       "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                                  "clientInfo": {"name": "test", "version": "0"}}})
    reply, _ = post({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, session)
    return reply["result"]["tools"]


@pytest.fixture(scope="module")
def served():
    """A training loop served on a free port, paused at its first batch."""
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = SmallCnn()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    session = nansense.start(model, optimizer=optimizer, port=0, open_browser=False)

    def train():
        for x, y in session.batches(make_loader(make_data(32)), phase="train"):
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
            optimizer.step()
        session.close()

    loop = TrainingThread(train)
    assert session.wait_until_stopped(60) == nansense.RunState.PAUSED
    yield session
    session.detach()
    loop.join()


def test_tools_lists_every_tool_of_the_server(served):
    result = cli("tools", url=served.url)
    assert result.returncode == 0, result.stderr
    listed = [line.split()[0] for line in result.stdout.splitlines() if line.strip() and not line[0].isdigit()
              and not line.startswith(" ")]
    names = [t["name"] for t in mcp_tools(served.url)]
    assert [n for n in listed if n in names] == names
    assert f"{len(names)} tools" in result.stdout


def test_a_call_prints_the_servers_json_as_is(served):
    result = cli("get_status", url=served.url)
    assert result.returncode == 0, result.stderr
    status = json.loads(result.stdout)
    assert status["state"] == "paused"
    assert status["live_position"]["text"] == "epoch 0 | train batch 0"

    result = cli("get_layer_stats", "--layers", "features.0", url=served.url)
    assert result.returncode == 0, result.stderr
    stats = json.loads(result.stdout)
    assert [layer["name"] for layer in stats["layers"]] == ["features.0"], stats
    # A list as commas, a boolean, an integer; dashes for underscores; the
    # connection options after the command.
    result = cli("get_layer_stats", "--layers", "features.0,classifier.1", "--include-histogram", "--bins", "4",
                 "--url", served.url)
    assert result.returncode == 0, result.stderr
    stats = json.loads(result.stdout)
    assert [layer["name"] for layer in stats["layers"]] == ["features.0", "classifier.1"]
    assert stats["layers"][0]["activation"]["histogram"]["bins"] == 4, stats["layers"][0]["activation"]


def test_a_tools_flags_come_from_its_schema(served):
    schema = next(t for t in mcp_tools(served.url) if t["name"] == "get_layer_stats")["inputSchema"]
    result = cli("get_layer_stats", "--help", url=served.url)
    assert result.returncode == 0, result.stderr
    for name in schema["properties"]:
        assert f"--{name}" in result.stdout, name
    assert schema["properties"]["layers"]["description"].split(".")[0] in " ".join(result.stdout.split())
    assert cli("help", "get_layer_stats", url=served.url).stdout == result.stdout


def test_pictures_are_written_as_png_files_and_their_paths_printed(served, tmp_path):
    result = cli("render_layer", "--layers", "features.0", "--sample", "1", "--out-dir", str(tmp_path),
                 url=served.url)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    paths = [line for line in lines if line.endswith(".png")]
    assert paths, result.stdout
    for path in paths:
        assert os.path.dirname(path) == str(tmp_path)
        with open(path, "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    # Each picture's caption (its scale and size) comes before its path.
    first = lines.index(paths[0])
    assert first > 0 and "features.0 activation" in lines[first - 1], lines


def test_errors_say_what_went_wrong(served):
    unknown = cli("get_layer_stat", url=served.url)
    assert unknown.returncode == 2
    assert "unknown command 'get_layer_stat'" in unknown.stderr and "get_layer_stats" in unknown.stderr
    bad_flag = cli("get_layer_stats", "--layer", "features.0", url=served.url)
    assert bad_flag.returncode == 2 and "--layer" in bad_flag.stderr and "--help" in bad_flag.stderr, bad_flag.stderr
    bad_value = cli("get_layer_stats", "--bins", "many", url=served.url)
    assert bad_value.returncode == 2 and "--bins" in bad_value.stderr and "many" in bad_value.stderr
    bad_choice = cli("set_stats_scope", "--scope", "some", url=served.url)
    assert bad_choice.returncode == 2 and "invalid choice" in bad_choice.stderr
    missing = cli("set_stats_scope", url=served.url)
    assert missing.returncode == 2 and "--scope" in missing.stderr
    refused = cli("get_layer_stats", "--layers", "nosuch", url=served.url)
    assert refused.returncode == 1 and refused.stdout == ""
    assert "get_layer_stats was refused" in refused.stderr and "nosuch" in refused.stderr
    out_of_range = cli("get_layer_stats", "--bins", "0", url=served.url)
    assert out_of_range.returncode == 1 and "bins" in out_of_range.stderr, out_of_range.stderr

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    nobody = cli("--port", str(port), "get_status")
    assert nobody.returncode == 3
    assert f"no nansense server answers at http://127.0.0.1:{port}/mcp" in nobody.stderr


def test_it_imports_neither_torch_nor_the_engine_and_starts_fast(served):
    # -X importtime lists every module the process imported, on stderr.
    started = time.perf_counter()
    result = cli("get_status", url=served.url, python_flags=("-X", "importtime"))
    seconds = time.perf_counter() - started
    assert result.returncode == 0, result.stderr
    imported = {line.split("|")[-1].strip() for line in result.stderr.splitlines() if line.startswith("import time:")}
    assert "nansense_cli" in imported
    assert not {m for m in imported if m == "torch" or m.startswith(("torch.", "nansense.", "numpy"))}, imported
    assert "nansense" not in imported
    print(f"nansense-cli get_status: {seconds:.3f} s with -X importtime, {len(imported)} modules")


def test_a_locked_session_answers_reads_and_refuses_changes():
    model = SmallCnn()
    session = nansense.start(model)
    session.lock()
    server = nansense.serve(session, port=0, open_browser=False)
    parked = threading.Thread(target=session.park)
    parked.start()
    try:
        assert session.wait_until_stopped(60) == nansense.RunState.PAUSED
        status = cli("get_status", url=server.url)
        assert status.returncode == 0, status.stderr
        assert json.loads(status.stdout)["locked"] is True
        step = cli("step", "--unit", "batch", url=server.url)
        assert step.returncode == 1 and "step was refused" in step.stderr and "locked" in step.stderr, step.stderr
        tools = cli("tools", url=server.url)
        assert tools.returncode == 0 and "get_status" in tools.stdout
    finally:
        session.close()
        parked.join(timeout=60)
    assert not parked.is_alive()
