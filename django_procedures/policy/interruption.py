"""What becomes of a claim the worker stops before its attempt ended: given back, or parked.

Decided in one place for every way a claim is stopped (a step's
``ensure_active()`` raising at shutdown, the shutdown timeout passing, a
claim given back unstarted), so the choice cannot drift between them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class Interruption:
    """A stopped claim as the decision needs it."""

    #: A non-idempotent step's body was entered and its outcome is not committed: it may have taken effect.
    step_began: bool
    #: Whether that step may run again without harm.
    idempotent: bool


def after_interruption(interruption: Interruption) -> Literal["park", "release"]:
    """Park (``failed``, retryable by hand) only a non-idempotent step that began and did not commit its outcome.

    Anything else -- between steps, a step that never began, an idempotent step
    (atomic or not) -- is released: it goes back ``ready`` and runs again
    elsewhere, its attempt not counted.
    """
    if interruption.step_began and not interruption.idempotent:
        return "park"
    return "release"
