"""The two guards of the Session's methods, as decorators: what a method
does on a disabled session (start(enabled=False): no engine) and on a locked
one (lock(): run control and settings refused). Each method states both
once, above its signature, instead of testing the engine in its body.

    @when_enabled(default)         # disabled: return default, run nothing
    @refused_when_locked(default)  # locked: return default, run nothing

A method that checks its arguments before either guard (bad input raises
whatever the session's state) keeps those checks in its body and calls a
guarded helper. The wrappers keep the method's name, docstring and
signature (functools.wraps; ParamSpec for type checkers).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, Concatenate, Optional, ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")


def when_enabled(default: Any = None, *, make: Optional[Callable[[], Any]] = None
                 ) -> Callable[[Callable[Concatenate[Any, P], R]], Callable[Concatenate[Any, P], R]]:
    """Run the method only when the session has an engine; on a disabled
    session return `default` (or a fresh `make()`, for a mutable default)
    without running it. The default must be of the method's return type."""
    def decorate(method: Callable[Concatenate[Any, P], R]) -> Callable[Concatenate[Any, P], R]:
        @functools.wraps(method)
        def guarded(self: Any, /, *args: P.args, **kwargs: P.kwargs) -> R:
            if self._engine is None:
                return make() if make is not None else default  # type: ignore[no-any-return]
            return method(self, *args, **kwargs)
        return guarded
    return decorate


def refused_when_locked(default: Any = None
                        ) -> Callable[[Callable[Concatenate[Any, P], R]], Callable[Concatenate[Any, P], R]]:
    """Run the method only while the session is not locked; on a locked
    session return `default` without running it (the method is a no-op
    here, what every transport refuses with a reason)."""
    def decorate(method: Callable[Concatenate[Any, P], R]) -> Callable[Concatenate[Any, P], R]:
        @functools.wraps(method)
        def guarded(self: Any, /, *args: P.args, **kwargs: P.kwargs) -> R:
            if self._is_locked():
                return default  # type: ignore[no-any-return]
            return method(self, *args, **kwargs)
        return guarded
    return decorate
