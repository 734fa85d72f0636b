"""How long an idle worker's main thread waits, and whether a ``--burst`` worker may exit: pure decisions."""

from __future__ import annotations


def burst_done(*, held: int, due_in: float | None, burst_wait: float, limited_ready: bool) -> bool:
    """Whether a ``--burst`` worker exits: it holds no claim, nothing is due within ``burst_wait`` seconds
    (``due_in``: None when nothing is), and no due procedure with limits has room (it could be claimed now)."""
    return not held and not limited_ready and (due_in is None or due_in > burst_wait)


def idle_seconds(*, due_in: float | None, chore_in: float, burst_poll: float | None) -> float:
    """Seconds to wait with nothing to claim: until the next chore, the next due time if any, and a ``--burst``
    worker's poll if it has one; never negative."""
    bounds = [chore_in]
    if due_in is not None:
        bounds.append(due_in)
    if burst_poll is not None:
        bounds.append(burst_poll)
    return max(0.0, min(bounds))
