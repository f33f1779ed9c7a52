"""nansense never changes what the loop computes: enabled=False is a
pass-through, and a live detached session (guard and flight recorder on)
leaves losses and weights bit-identical too."""

import torch
import torch.nn.functional as F

import nansense
from conftest import SmallCnn, make_data, make_loader


def run(wrap, epochs=2, each_batch=None):
    """Trains a fresh seeded model under the session wrap(model, optimizer) makes (None: a plain loop)."""
    torch.manual_seed(1)
    model = SmallCnn()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    loader = make_loader(make_data(40), batch_size=8, seed=3)
    losses = []
    session = wrap(model, optimizer)
    for _ in range(epochs):
        batches = session.batches(loader, phase="train") if session else loader
        for x, y in batches:
            optimizer.zero_grad()
            loss = F.cross_entropy(model(F.dropout(x, 0.2)), y)
            loss.backward()
            optimizer.step()
            losses.append(loss.detach().clone())
            if each_batch:
                each_batch(session)
    if session:
        session.close()
    return torch.stack(losses), {n: p.detach().clone() for n, p in model.named_parameters()}


def assert_identical(a, b):
    losses_a, weights_a = a
    losses_b, weights_b = b
    assert torch.equal(losses_a, losses_b)
    assert weights_a.keys() == weights_b.keys()
    for name in weights_a:
        assert torch.equal(weights_a[name], weights_b[name]), name


def test_disabled_session_is_a_pass_through():
    plain = run(lambda model, optimizer: None)

    sessions = []

    def disabled(model, optimizer):
        session = nansense.start(model, optimizer=optimizer, enabled=False, port=8080)
        sessions.append(session)
        return session

    assert_identical(plain, run(disabled))
    session = sessions[0]
    assert not session.enabled
    assert session.url is None  # no server, even with a port
    assert session.snapshot is None
    assert nansense.serve(session, port=0) is None
    loader = [1, 2, 3]
    # batches() hands back the loader's own iterator: nothing per batch.
    assert type(session.batches(loader, phase="train")) is type(iter(loader))


def test_detached_live_session_leaves_results_identical():
    plain = run(lambda model, optimizer: None)

    def live(model, optimizer):
        session = nansense.start(model, optimizer=optimizer)
        session.detach()
        return session

    assert_identical(plain, run(live))


def test_captured_batches_leave_results_identical():
    plain = run(lambda model, optimizer: None)
    sessions = []

    def capturing(model, optimizer):
        session = nansense.start(model, optimizer=optimizer)
        session.set_debug_settings(nansense.DebugSettings(trace_interval=1))
        session.detach()
        sessions.append(session)
        return session

    # refresh() asks for the next batch to be captured and published: every
    # batch then runs the tracer, the gradient hooks and the snapshot copies.
    result = run(capturing, each_batch=lambda session: session.refresh())
    assert_identical(plain, result)
    assert sessions[0].snapshot is not None
    assert sessions[0].snapshot.sequence >= 5
