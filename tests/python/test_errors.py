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
