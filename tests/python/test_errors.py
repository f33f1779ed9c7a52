"""Every error type the engine throws into the caller (the classes deriving
from nansense::Error in include/nansense/) has its Python exception: the
engine's own type (nansense._nansense), exported by the package under the
same name, of the built-in kind bindings.cpp gives it."""

import re
from pathlib import Path

import pytest

import nansense
from nansense import _nansense

HEADERS = Path(__file__).resolve().parents[2] / "include" / "nansense"

# The built-in kind each maps onto (python/bindings.cpp).
KINDS = {
    "ScheduleError": ValueError,
    "ArgumentError": ValueError,
    "ControlError": RuntimeError,
    "UsageError": RuntimeError,
    "TimeTravelError": RuntimeError,
    "CapsuleError": RuntimeError,
    "MomentError": RuntimeError,
    "DistributedError": RuntimeError,
}


def cpp_error_types() -> set[str]:
    found = set()
    for header in HEADERS.glob("*.h"):
        found.update(re.findall(r"\bclass\s+(\w+)\s*(?:final\s*)?:\s*public\s+(?:nansense::)?Error\b", header.read_text()))
    return found


def test_every_cpp_error_type_has_its_python_exception():
    cpp = cpp_error_types()
    assert "DistributedError" in cpp and "ArgumentError" in cpp, cpp
    assert cpp == set(KINDS), f"C++ error types without a Python mapping here: {sorted(cpp - set(KINDS))}"
    for name in sorted(cpp):
        exported = getattr(nansense, name, None)
        assert exported is not None, f"nansense.{name} is missing"
        assert name in nansense.__all__
        assert exported is getattr(_nansense, name), f"nansense.{name} is not the engine's type"
        assert issubclass(exported, KINDS[name]), f"{name} is not a {KINDS[name].__name__}"


def test_the_python_coordinator_raises_the_engine_type():
    from nansense import _distributed

    assert _distributed.DistributedError is _nansense.DistributedError
    assert "rank" in (nansense.DistributedError.__doc__ or "")
    with pytest.raises(RuntimeError, match="rank 1"):
        raise nansense.DistributedError("nansense (rank 1): lost")


def test_every_cpp_error_type_raises_as_its_python_exception():
    # Thrown in C++ as the engine throws it, caught in Python as the
    # exported type (not merely its built-in kind), the message intact.
    for name in sorted(cpp_error_types()):
        exported = getattr(nansense, name)
        with pytest.raises(exported) as caught:
            _nansense._throw_error(name, f"what went wrong ({name})")
        assert type(caught.value) is exported, f"{name} arrived as {type(caught.value).__name__}"
        assert str(caught.value) == f"what went wrong ({name})"
    with pytest.raises(KeyError):
        _nansense._throw_error("NoSuchError", "")


def test_the_engine_raises_them_where_it_refuses(tmp_path):
    from conftest import Mlp

    model = Mlp()
    session = nansense.start(model, epochs=1)
    try:
        engine = session._engine
        # A refused request (the controller's): a bad argument is an
        # ArgumentError, a command the session's state refuses a ControlError.
        with pytest.raises(nansense.ArgumentError, match="channel_limit"):
            engine.set_watch_performance(None, -5, None, None, None)
        with pytest.raises(nansense.ArgumentError, match="unknown experiment kind"):
            engine.request_experiment("no_such_kind", "fc1", {})
        with pytest.raises(nansense.ControlError, match="pinned"):
            engine.unpin_batch(0.0)
        # The engine's own throws.
        with pytest.raises(nansense.UsageError, match="rank"):
            engine.set_rank(-1)
        with pytest.raises(nansense.TimeTravelError, match="epochs"):
            engine.request_time_travel(3)
        foreign = tmp_path / "foreign.bin"
        foreign.write_bytes(b"not a nansense file")
        with pytest.raises(nansense.CapsuleError, match="foreign.bin"):
            nansense.replay_capsule(foreign, Mlp())
        with pytest.raises(nansense.MomentError, match="foreign.bin"):
            nansense.load_moment(Mlp(), foreign, replay=lambda m, b: m(b[0]).sum())
    finally:
        session.close()
