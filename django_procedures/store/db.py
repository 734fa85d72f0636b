"""Database helpers shared by the store: vendor, database clock, conflict retries."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.db import DatabaseError, connection
from django.db.models import DateTimeField, Expression
from django.db.models.expressions import RawSQL, Value
from django.utils import timezone

#: deadlock_detected and serialization_failure: retried as a transaction, never a lost lease.
RETRYABLE_SQLSTATES = frozenset({"40P01", "40001"})


def is_postgresql() -> bool:
    return connection.vendor == "postgresql"


def db_now() -> Expression:
    """The database's own clock for leases (``clock_timestamp()``, not the frozen ``now()``)."""
    if is_postgresql():
        return RawSQL("clock_timestamp()", (), output_field=DateTimeField())
    return Value(timezone.now(), output_field=DateTimeField())


def db_now_plus(seconds: float) -> Expression:
    """A lease expiry: the database clock plus ``seconds``."""
    if is_postgresql():
        return RawSQL("clock_timestamp() + make_interval(secs => %s)", (float(seconds),),
                      output_field=DateTimeField())
    return Value(timezone.now() + timedelta(seconds=seconds), output_field=DateTimeField())


def sqlstate(error: BaseException) -> str | None:
    cause: Any = error
    while cause is not None:
        state = getattr(cause, "sqlstate", None)
        if state:
            return state
        cause = cause.__cause__
    return None


def is_conflict(error: BaseException) -> bool:
    """A deadlock or serialization failure: the transaction may simply be run again."""
    return isinstance(error, DatabaseError) and sqlstate(error) in RETRYABLE_SQLSTATES
