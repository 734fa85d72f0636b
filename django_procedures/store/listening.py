"""Where LISTEN goes: the default alias, or the direct ``LISTEN_DATABASE`` beside a transaction pooler.

PgBouncer in transaction mode hands a client a server connection for one
transaction only: a LISTEN made through it stays on a server connection that
the next client gets, and its notifications reach nobody. So LISTEN has an
alias of its own, and the NOTIFYs, sent inside the writers' transactions, go
through the pooler like every other statement.
"""

from __future__ import annotations

from typing import Any

from django.db import DEFAULT_DB_ALIAS, connections

from django_procedures.conf import conf

#: The value of ``PROCEDURES["POOLER"]`` for PgBouncer in transaction-pooling mode.
PGBOUNCER_TRANSACTION = "pgbouncer-transaction"
POOLERS = (None, PGBOUNCER_TRANSACTION)


def transaction_pooled() -> bool:
    """The default alias goes through a transaction pooler: session settings do not outlive a transaction."""
    return conf.POOLER == PGBOUNCER_TRANSACTION


def listen_alias() -> str:
    return conf.LISTEN_DATABASE or DEFAULT_DB_ALIAS


def listens() -> bool:
    """LISTEN/NOTIFY wakes workers and waiters: on, on PostgreSQL, and not through the pooler without a way round."""
    if not conf.LISTEN_NOTIFY or connections[DEFAULT_DB_ALIAS].vendor != "postgresql":
        return False
    return not (transaction_pooled() and not conf.LISTEN_DATABASE)


def listen_params(application_name: str = "") -> dict[str, Any]:
    """psycopg connection parameters for a LISTEN connection (autocommit, opened by the caller)."""
    params = connections[listen_alias()].get_connection_params()
    params.pop("cursor_factory", None)
    params.pop("context", None)
    if application_name:
        params["application_name"] = application_name
    return params
