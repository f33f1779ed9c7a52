"""The exceptions nansense's Python modules share (a leaf module: it imports
only the native module, so that any other module may import it)."""

from __future__ import annotations

from . import _nansense


class TimeTravelJump(BaseException):
    """Raised at a batch boundary to unwind the loop to restore_point().

    A BaseException on purpose: the jump must travel through the user's
    training code (which may hold broad `except Exception` handlers) to the
    `with session.restore_point():` block that suppresses it."""

    def __init__(self, epoch: int):
        super().__init__(epoch)
        self.epoch = epoch

    def __str__(self) -> str:
        return (f"time-travel jump to epoch {self.epoch}: wrap each epoch's body in `with session.restore_point():` "
                "inside `for epoch in session.epochs(n):`")


_nansense._set_jump_type(TimeTravelJump)
