"""SQLite: an atomic step's transaction holds the database's only write lock for as long as the step runs.

With ``transaction_mode: IMMEDIATE`` (check W001) the step's ``BEGIN IMMEDIATE``
takes the lock when its transaction opens, and no other connection, in this
process or another, can write until it ends. So the worker's heartbeat could
not renew the lease (it would wait for its own step's lock, then give up and
drop the step's result), and it need not: while the lock is ours nobody can
write, so nobody can sweep the lease or take the procedure, whatever its expiry
says. The heartbeat skips its beat meanwhile, and the step's checkpoint renews
the lease inside the same transaction, before the lock is released, so it is
valid again when others can write. Fencing is unchanged: every write of the
claim still matches its lease token.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

from django.db import transaction

from django_procedures.runtime.running import RunningClaim, log_extra
from django_procedures.store.leases import renew

logger = logging.getLogger("django_procedures.worker")

#: sqlite3's own busy timeout when ``OPTIONS`` names none.
_SQLITE_DEFAULT_TIMEOUT = 5.0


def _immediate(connection: object) -> bool:
    if getattr(connection, "vendor", "") != "sqlite":
        return False
    options = getattr(connection, "settings_dict", {}).get("OPTIONS", {})
    return str(options.get("transaction_mode", "")).upper() == "IMMEDIATE"


def busy_timeout(connection: object) -> float:
    """How long another writer waits for the lock before "database is locked" (``OPTIONS['timeout']``)."""
    options = getattr(connection, "settings_dict", {}).get("OPTIONS", {})
    return float(options.get("timeout", _SQLITE_DEFAULT_TIMEOUT))


def held_by_us(claims: Iterable[RunningClaim]) -> bool:
    """Whether one of ``claims`` runs an atomic step whose transaction holds SQLite's write lock now."""
    return any(r.write_lock_since is not None for r in claims)


@contextmanager
def held(running: RunningClaim) -> Iterator[None]:
    """Inside an atomic step's transaction: mark the write lock ours, renew the lease before it commits."""
    connection = transaction.get_connection()
    if not _immediate(connection) or not running.lease_seconds:
        yield
        return
    since = running.write_lock_since = time.monotonic()
    try:
        yield  # (an error rolls back: the heartbeat renews at its next beat, the lock gone)
        if connection.in_atomic_block and not connection.needs_rollback:
            # Fenced like any write of the claim: a lease that moved is not extended.
            renew([(running.claim.id, running.claim.lease_token)], running.lease_seconds)
    finally:
        running.write_lock_since = None
        held_for, timeout = time.monotonic() - since, busy_timeout(connection)
        if held_for > timeout:
            claim = running.claim
            logger.warning("procedure %s: atomic step %s held SQLite's write lock for %.1fs, longer than the "
                           "database's busy timeout (DATABASES OPTIONS 'timeout': %gs): other writers waiting for "
                           "it (a web request's submit) failed with 'database is locked'; make the step "
                           "non-atomic (@step(atomic=False)) or shorter, or raise the timeout", claim.id,
                           claim.step_name, held_for, timeout, extra=log_extra(claim))
