"""``is_disconnect``: which database errors mean the connection is gone (not the statement's fault)."""

import psycopg
import psycopg.errors
import pytest
from django.db import DatabaseError, IntegrityError, InterfaceError, InternalError, OperationalError

from django_procedures.store.db import is_disconnect

pytestmark = pytest.mark.postgres


def django_error(cls, cause):
    """What Django raises for a psycopg error: its own class, with the driver's error as the cause."""
    error = cls(str(cause))
    error.__cause__ = cause
    return error


@pytest.mark.parametrize(("error", "gone"), [
    # the server went away mid-statement or mid-COMMIT: no SQLSTATE, even after Django reconnected
    (django_error(OperationalError, psycopg.OperationalError("consuming input failed: server closed the "
                                                            "connection unexpectedly")), True),
    (django_error(OperationalError, psycopg.OperationalError("connection failed: Connection refused")), True),
    (InterfaceError("connection already closed"), True),
    (django_error(OperationalError, psycopg.errors.AdminShutdown("terminating connection")), True),
    (django_error(OperationalError, psycopg.errors.CannotConnectNow("the database system is starting up")), True),
    (django_error(InternalError, psycopg.errors.IdleInTransactionSessionTimeout("idle timeout")), True),
    (django_error(OperationalError, psycopg.errors.ConnectionFailure("connection failure")), True),
    # refused statements: the connection is fine
    (django_error(OperationalError, psycopg.errors.DeadlockDetected("deadlock detected")), False),
    (django_error(OperationalError, psycopg.errors.QueryCanceled("canceling statement")), False),
    (django_error(IntegrityError, psycopg.errors.UniqueViolation("duplicate key")), False),
    (DatabaseError("something else"), False),
    (RuntimeError("not a database error"), False),
], ids=lambda v: type(v).__name__ if isinstance(v, BaseException) else str(v))
def test_is_disconnect(error, gone):
    assert is_disconnect(error) is gone
