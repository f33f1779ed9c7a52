"""Shared pieces of the Python package's tests: a small CNN, random image
data, a training thread, and an HTTP client for the served API."""

import json
import threading
import urllib.error
import urllib.request

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class SmallCnn(nn.Module):
    """The demo's shape in miniature: features (conv, relu, pool), classifier."""

    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(), nn.MaxPool2d(2))
        self.classifier = nn.Sequential(nn.Flatten(), nn.Linear(4 * 5 * 5, 16), nn.ReLU(), nn.Linear(16, 10))

    def forward(self, x):
        return self.classifier(self.features(x))


class Mlp(nn.Module):
    """fc1 (Linear 4->8), act (ReLU), fc2 (Linear 8->3)."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(4, 8)
        self.act = nn.ReLU()
        self.fc2 = nn.Linear(8, 3)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


def make_data(n=48, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 1, 12, 12, generator=g)
    y = torch.randint(0, 10, (n,), generator=g)
    return TensorDataset(x, y)


def make_loader(dataset, batch_size=8, shuffle=True, seed=0):
    return DataLoader(dataset, batch_size=batch_size, shuffle=shuffle,
                      generator=torch.Generator().manual_seed(seed) if shuffle else None)


@pytest.fixture(autouse=True, scope="session")
def release_server_threads():
    """A served session's thread is not a daemon (the UI outlives the loop,
    as the reference's does): the test process must not wait for one a
    failed test's traceback still holds."""
    yield
    from nansense._session import _ServerThread
    for thread in list(_ServerThread._live):
        thread._release()


@pytest.fixture(autouse=True)
def one_thread_and_seed():
    torch.set_num_threads(1)
    torch.manual_seed(0)
    yield


class TrainingThread:
    """Runs fn on its own thread; join() re-raises what it raised."""

    def __init__(self, fn):
        self.error = None
        self.result = None

        def run():
            try:
                self.result = fn()
            except BaseException as e:  # noqa: B036 - reported by join()
                self.error = e

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()

    def join(self, timeout=60):
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "the training thread did not finish"
        if self.error is not None:
            raise self.error
        return self.result


class Api:
    """The served HTTP API on loopback."""

    def __init__(self, url):
        self.base = url.rstrip("/")

    def request(self, method, path, body=None, headers=None):
        data = json.dumps(body).encode() if body is not None else None
        all_headers = {"Content-Type": "application/json"} if data else {}
        all_headers.update(headers or {})
        req = urllib.request.Request(self.base + path, data=data, method=method, headers=all_headers)
        try:
            with urllib.request.urlopen(req, timeout=60) as reply:
                return reply.status, reply.read(), dict(reply.headers)
        except urllib.error.HTTPError as e:
            return e.code, e.read(), dict(e.headers)

    def get(self, path):
        status, body, _ = self.request("GET", path)
        assert status == 200, f"GET {path}: {status} {body[:300]!r}"
        return json.loads(body)

    def post(self, path, body=None):
        status, payload, _ = self.request("POST", path, body if body is not None else {})
        assert status == 200, f"POST {path}: {status} {payload[:300]!r}"
        return json.loads(payload)


class RankRun:
    """A multi-process run's test side: each rank's worker appends JSON
    events to rank<r>.log in folder; rank 0 writes its UI's address to url.
    Subclasses set folder and world and define until(condition, what)."""

    def api(self):
        url = self.until(lambda: (self.folder / "url").exists() and (self.folder / "url").read_text(), "rank 0's url")
        return Api(url)

    def events(self, rank):
        path = self.folder / f"rank{rank}.log"
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []

    def last(self, rank, kind):
        seen = [tuple(e[kind]) for e in self.events(rank) if kind in e]
        return seen[-1] if seen else None

    def all_done(self, position):
        """Every rank has finished position's body (and none began the next)."""
        return all(self.last(r, "done") == position for r in range(self.world))


@pytest.fixture
def rank_runs():
    """The multi-process runs (RankRun) a test starts: killed when it ends."""
    runs = []
    yield runs
    for r in runs:
        r.kill()
