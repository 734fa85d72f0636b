"""The one injectable clock for due times and recorded times.

Leases never read this clock: they use the database's ``clock_timestamp()``.
``drain(now=T)`` and ``tick(now=T)`` set it for the length of the call.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import datetime

from django.utils import timezone

_frozen: ContextVar[datetime | None] = ContextVar("django_procedures_now", default=None)


def now() -> datetime:
    """The current time as this call sees it: real, or the ``now`` given to drain/tick."""
    return _frozen.get() or timezone.now()


@contextmanager
def frozen_at(moment: datetime | None) -> Iterator[None]:
    """Read ``moment`` as the time inside the block (no effect for None)."""
    if moment is None:
        yield
        return
    if timezone.is_naive(moment):
        raise ValueError("now must be an aware datetime, for example timezone.now() or datetime(..., tzinfo=UTC)")
    token = _frozen.set(moment)
    try:
        yield
    finally:
        _frozen.reset(token)
