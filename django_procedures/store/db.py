"""Database helpers shared by the store: vendor, database clock, conflict retries."""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

from django.db import DEFAULT_DB_ALIAS, DatabaseError, Error, InterfaceError, OperationalError, connection, connections
from django.db.models import DateTimeField, Expression
from django.db.models.expressions import RawSQL, Value
from django.utils import timezone

#: deadlock_detected and serialization_failure: retried as a transaction, never a lost lease.
RETRYABLE_SQLSTATES = frozenset({"40P01", "40001"})


def is_postgresql() -> bool:
    return connection.vendor == "postgresql"


class _BoundCursor:
    """What :func:`bound_cursor` yields: ``execute`` prepares the statement when ``PREPARED_STATEMENTS`` is on."""

    def __init__(self, cursor: Any, prepare: bool | None) -> None:
        self._cursor, self._prepare = cursor, prepare

    def execute(self, sql: str, params: Any) -> None:
        self._cursor.execute(sql, params, prepare=self._prepare)

    def fetchone(self) -> Any:
        return self._cursor.fetchone()

    def fetchall(self) -> list[Any]:
        return self._cursor.fetchall()


@contextmanager
def bound_cursor() -> Iterator[_BoundCursor]:
    """A cursor binding parameters on the server, on this thread's Django connection (PostgreSQL only).

    Django's cursors interpolate parameters into the SQL text on the client; for
    the worker's few hot statements that quoting cost more than the rest of the
    round trip. With ``PREPARED_STATEMENTS`` (the default) each statement is also
    prepared once per connection instead of planned at every run. Errors come out
    as Django's, like any other query's.
    """
    from django_procedures.conf import conf

    wrapper = connections[DEFAULT_DB_ALIAS]  # one lookup: each ``connection.x`` goes through asgiref's Local
    wrapper.ensure_connection()
    raw = wrapper.connection
    prepare = None  # None: as the connection's prepare_threshold says (Django's default: never)
    if conf.PREPARED_STATEMENTS:
        prepare = True
        if raw.prepare_threshold is None:  # psycopg ignores prepare=True then; a huge threshold keeps
            raw.prepare_threshold = _NEVER_BY_COUNT  # every other statement unprepared, as it was
    with wrapper.wrap_database_errors, _psycopg().Cursor(raw) as cursor:
        yield _BoundCursor(cursor, prepare)


@contextmanager
def sole_statement(alone: bool = True) -> Iterator[None]:
    """The one statement run inside is the whole of its transaction: sent on its own, as one round trip.

    A transaction that has sent nothing to the server yet (an atomic step that
    ran no SQL; the transaction ``final.joined()`` just opened) would otherwise
    cost three round trips for one statement: psycopg's ``BEGIN``, the statement,
    and the ``COMMIT`` of Django's ``atomic()``. Here the statement runs in
    autocommit, as a transaction of its own, which is all the transaction would
    have held; the ``COMMIT`` then has nothing to send, and the ``on_commit``
    callbacks still run when ``atomic()`` ends. The caller must execute exactly
    one statement inside and nothing after it in the same transaction (``alone``
    False when something may follow). Anything already sent (a step's own writes,
    a lock taken first) keeps the statement inside that transaction, and so does
    a transaction opened around that one (a caller's, a test's): only the
    outermost ``atomic()`` block, the one the statement ends, is ever left out.
    """
    wrapper = connections[DEFAULT_DB_ALIAS]
    outermost = alone and wrapper.vendor == "postgresql" and len(wrapper.atomic_blocks) <= 1
    # (A transaction marked for rollback, set_rollback(True), must not have its last write committed.)
    raw = wrapper.connection if outermost and not wrapper.needs_rollback else None
    if raw is None or raw.autocommit or raw.pgconn.transaction_status != _psycopg().pq.TransactionStatus.IDLE:
        yield
        return
    raw.autocommit = True
    try:
        yield
    finally:
        # After the statement the session is idle again, whether it committed or failed; only a broken
        # connection is not, and Django drops that one.
        if raw.pgconn.transaction_status == _psycopg().pq.TransactionStatus.IDLE:
            raw.autocommit = False


@functools.cache
def _psycopg() -> Any:
    import psycopg  # only once a PostgreSQL connection is in use: SQLite projects need not have it

    return psycopg


_NEVER_BY_COUNT = 2**62


def text_array(values: Sequence[str]) -> str:
    """``values`` as a PostgreSQL array literal, for ``= ANY(%s::text[])`` on the hot path.

    A worker passes the same type names and queues to every claim; one string,
    built once, costs the driver a fraction of adapting the list each time.
    """
    return _text_array(tuple(values))


@functools.lru_cache(maxsize=64)
def _text_array(values: tuple[str, ...]) -> str:
    quoted = ('"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"' for v in values)
    return "{" + ",".join(quoted) + "}"


def sql_list(values: Iterable[str]) -> str:
    """Stored strings (``policy.status`` members, never user input) as an SQL list of quoted literals.

    Raw statements build their status lists from the sets in ``policy.status``
    so that they cannot drift from the ORM's (and the partial indexes') lists.
    """
    return ", ".join(f"'{v}'" for v in values)


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


#: Besides class 08 (connection exception): admin_shutdown, crash_shutdown, cannot_connect_now (a restart),
#: idle_in_transaction_session_timeout (a worker frozen past it).
DISCONNECT_SQLSTATES = frozenset({"57P01", "57P02", "57P03", "25P03"})


def is_disconnect(error: BaseException) -> bool:
    """The error means this thread's PostgreSQL connection is gone, not that the statement was refused.

    A server restart, a terminated backend, a network cut or an
    ``idle_in_transaction_session_timeout`` all end the session: whatever the
    open transaction wrote is rolled back (unless its COMMIT was already in
    flight), and the connection has to be opened again.
    """
    if not isinstance(error, Error) or not is_postgresql():  # Error: Django's InterfaceError is no DatabaseError
        return False
    state = sqlstate(error)
    if state is not None:
        return state.startswith("08") or state in DISCONNECT_SQLSTATES
    # No SQLSTATE means no answer from the server: the socket died ("server closed the connection
    # unexpectedly"), connecting failed, or the connection was already closed. The connection's own
    # state cannot tell: Django's atomic() reconnects on its way out to restore autocommit.
    return isinstance(error, (OperationalError, InterfaceError))


def session() -> Any:
    """This thread's open session on the default database (opened if need be), for :func:`own_connection_lost`."""
    wrapper = connections[DEFAULT_DB_ALIAS]  # once: every step calls this
    wrapper.ensure_connection()
    return wrapper.connection


#: idle_in_transaction_session_timeout: PostgreSQL ended a session whose transaction was left idle too long.
IDLE_TIMEOUT_SQLSTATE = "25P03"


def cut_while_idle(error: BaseException) -> bool:
    """The session was ended because its open transaction stayed idle past ``idle_in_transaction_session_timeout``.

    A disconnect too (:func:`is_disconnect`), but on a connection that runs
    steps, whose timeout outlasts the lease (check E005), it is the step's
    doing: it held its transaction open doing something else. The executor
    makes it a failed attempt, never a lost connection to resume from.
    """
    return isinstance(error, Error) and sqlstate(error) == IDLE_TIMEOUT_SQLSTATE


def own_connection_lost(error: BaseException, before: Any) -> bool:
    """The error means this thread's own connection to the default database was lost since ``before``.

    :func:`is_disconnect` judges the error alone, and an ``OperationalError``
    from another database alias (a step's connection to another database, a
    server that refused it) looks the same. This also asks the connection:
    the session ``before`` (from :func:`session`, taken before the code that
    raised ran) must have ended: closed, or replaced (Django reconnects on
    the way out of an ``atomic()`` block whose rollback failed).
    """
    if not is_disconnect(error) or cut_while_idle(error):  # the step's own doing (see cut_while_idle)
        return False
    raw = connection.connection
    return (raw is None or raw is not before or bool(getattr(raw, "closed", False))
            or bool(getattr(raw, "broken", False)))


def is_conflict(error: BaseException) -> bool:
    """A deadlock or serialization failure: the transaction may simply be run again."""
    return isinstance(error, DatabaseError) and sqlstate(error) in RETRYABLE_SQLSTATES


def advisory_xact_locks(namespace: str, names: Iterable[str], *, wait: bool) -> bool:
    """Take transaction-scoped advisory locks on ``names`` in ``namespace`` (PostgreSQL; elsewhere True).

    Sorted, and ``unnest`` keeps the array's order, so every transaction takes them in one order. ``wait=False``
    never blocks: False if another transaction holds one of them now (the caller passes by).
    """
    names = sorted(set(names))
    if not names or not is_postgresql():
        return True
    key = f"hashtextextended('{namespace}' || n, 0)"
    with connection.cursor() as cursor:
        if wait:
            cursor.execute(f"SELECT pg_advisory_xact_lock({key}) FROM unnest(%s::text[]) AS n", [names])
            return True
        cursor.execute(f"SELECT bool_and(pg_try_advisory_xact_lock({key})) FROM unnest(%s::text[]) AS n", [names])
        return bool(cursor.fetchone()[0])
