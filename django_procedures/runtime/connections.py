"""The worker's database connections: kept open, cut when idle in a transaction, named in ``pg_stat_activity``."""

from __future__ import annotations

import threading
from typing import Any

from django_procedures.store.listening import transaction_pooled


def configure_connection(sender: Any = None, *, connection: Any, idle_timeout: float, own_idle_timeout: float,
                         **kwargs: Any) -> None:
    """Worker connections cut a transaction left idle too long, so a frozen worker cannot hold rows for ever.

    An executor thread's connection, which runs steps, waits ``idle_timeout``
    (``IDLE_IN_TRANSACTION_TIMEOUT_SECONDS``); the others (main thread,
    heartbeat), which run only the worker's own short transactions,
    ``own_idle_timeout``.

    They are also kept open: Django's default ``CONN_MAX_AGE = 0`` means "one
    connection per request", and a worker has no requests, so its main loop
    would otherwise reconnect on every pass (``close_old_connections``). A
    broken connection is still closed and replaced; a positive ``CONN_MAX_AGE``
    is still obeyed.
    """
    if connection.settings_dict.get("CONN_MAX_AGE") == 0:
        connection.close_at = None
    if connection.vendor != "postgresql":
        return
    runs_steps = _thread_role().startswith("exec-")
    timeout_ms = int((idle_timeout if runs_steps else own_idle_timeout) * 1000)
    connection.procedures_idle_timeout = timeout_ms / 1000  # named by idle_cut_text() when it cuts a step
    if transaction_pooled():
        # A session SET would stay on whichever server connection ran it, and cut the transactions of the
        # pooler's next client of that connection (a web request, say); each step transaction sets it instead.
        connection.procedures_idle_timeout_ms = timeout_ms
        return
    # The session has it (a wrapper configured behind the pooler before keeps no per-transaction SET).
    connection.procedures_idle_timeout_ms = None
    with connection.cursor() as cursor:
        cursor.execute(f"SET idle_in_transaction_session_timeout = {timeout_ms}")


def set_transaction_timeout(connection: Any) -> None:
    """Behind a transaction pooler, at the start of a step's transaction: its idle timeout, for it alone."""
    timeout_ms = getattr(connection, "procedures_idle_timeout_ms", None)
    if timeout_ms is None:  # a direct connection has it for the session (configure_connection)
        return
    with connection.cursor() as cursor:
        cursor.execute("SELECT set_config('idle_in_transaction_session_timeout', %s, true)", [str(timeout_ms)])


def idle_cut_text(error: BaseException, connection: Any, where: str) -> str:
    """What a failed attempt says when PostgreSQL cut ``where``'s transaction for idling (``db.cut_while_idle``)."""
    seconds = getattr(connection, "procedures_idle_timeout", None)
    value = f" ({seconds:g}s)" if seconds is not None else ""
    return (f"{str(error).strip()}: {where} kept its transaction open and idle longer than "
            f"PROCEDURES['IDLE_IN_TRANSACTION_TIMEOUT_SECONDS']{value}, and PostgreSQL ended the session; make "
            "the step non-atomic (@step(atomic=False)) so its slow non-database work holds no transaction, or "
            "shorter, or raise the setting")


def name_connection(sender: Any = None, *, connection: Any, worker_id: str, **kwargs: Any) -> None:
    """Worker connections are named (see :func:`application_name`) so ``pg_stat_activity`` tells them apart.

    A session setting, yet it works through PgBouncer in transaction mode: PostgreSQL reports
    ``application_name`` back to the client, and PgBouncer sets it again on whichever server connection
    it lends that client next.
    """
    if connection.vendor != "postgresql":
        return
    with connection.cursor() as cursor:
        cursor.execute("SELECT set_config('application_name', %s, false)",
                       [application_name(worker_id, _thread_role())])


#: ``application_name`` of worker connections starts with this (then ``/<role>/<worker id>``).
APPLICATION_NAME_PREFIX = "procedures-worker"


def application_name(worker_id: str, role: str) -> str:
    """What ``pg_stat_activity`` shows for a worker's connection: role first, as PostgreSQL keeps 63 bytes."""
    return f"{APPLICATION_NAME_PREFIX}/{role}/{worker_id}"[:63]


def _thread_role() -> str:
    name = threading.current_thread().name
    if name == "MainThread":
        return "main"
    return name.removeprefix("procedures-")
