"""What a worker checks and logs about itself: its tables, the stats line, ready procedures of unknown types."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence

from django.db import DatabaseError, connection

from django_procedures import registry
from django_procedures.runtime.outage import watch
from django_procedures.store.claim import newer_versions, unknown_types
from django_procedures.store.db import is_disconnect
from django_procedures.store.schema import require_tables
from django_procedures.store.tickers import enabled_schedules, tickers

logger = logging.getLogger("django_procedures.worker")


def log_stats(worker_id: str, label: str, s: Counter[str], types: Sequence[str]) -> None:
    """The INFO line a worker logs every ``STATS_SECONDS`` and when it stops."""
    unknown = ""
    try:
        waiting = unknown_types(types)
        if waiting:
            unknown = " unknown-types=" + ",".join(f"{k}:{v}" for k, v in waiting.items())
        newer = newer_versions(types)
        if newer:
            unknown += " newer-versions=" + ",".join(f"{k}:{n}" for k, (n, _) in newer.items())
    except Exception:  # stats must never stop the worker
        pass
    logger.info("worker %s %s: claimed=%d succeeded=%d suspended=%d slept=%d waited=%d retried=%d failed=%d "
                "rolled_back=%d released=%d given_back=%d lost=%d%s", worker_id, label, s["claimed"], s["succeeded"],
                s["suspended"], s["slept"], s["waited"], s["retried"], s["failed"], s["rolled_back"], s["released"],
                s["given_back"], s["lost"], unknown)


def report_unknown_types(worker_id: str, types: Sequence[str]) -> None:
    """At start-up: a WARNING for each type of ready procedures this worker does not know, or whose runs a newer
    version of its class wrote."""
    try:
        waiting = unknown_types(types)
        newer = newer_versions(types)
    except Exception as error:  # the database may be down at start-up: the main loop waits for it
        if is_disconnect(error):
            watch.lost(error, "start-up")
        else:
            logger.warning("worker %s: could not look for unknown types: %s", worker_id, error)
        connection.close()
        return
    for type_name, count in waiting.items():
        logger.warning("%d ready procedures have the type %r, which this worker does not know; "
                       "they are left for a worker that does. A worker learns procedure classes at start-up, "
                       "from the 'procedures' module of each installed app: define or import the class there, "
                       "and restart the workers after deploying a new one", count, type_name)
    for type_name, (count, newest) in newer.items():
        logger.warning("%d ready procedures of %r were written by version %d, newer than version %d of this "
                       "worker's class; they are left for workers running that version. Finish deploying it to "
                       "the workers of their queues", count, type_name, newest, registry.versions([type_name])[0])


def _start_up_failed(worker_id: str, error: DatabaseError, doing: str) -> None:
    """A start-up read failed: an outage is reported once (``outage.watch``), anything else logged; the worker
    carries on, on a fresh connection."""
    if is_disconnect(error):
        watch.lost(error, "start-up")
    else:
        logger.warning("worker %s: could not %s: %s", worker_id, doing, error)
    connection.close()


def tables_ready(worker_id: str) -> bool:
    """Raise ``ProceduresNotMigrated`` if the tables are missing; False when the database cannot be asked."""
    try:
        require_tables()
        return True
    except DatabaseError as error:
        _start_up_failed(worker_id, error, "check the tables")
        return False


def report_schedules(worker_id: str, created: Sequence[str], *, ticks: bool) -> None:
    """At start-up, after syncing the schedules declared in code: what was stored, and who ticks schedules.

    A worker without ``--with-scheduler`` starts no scheduled run itself: it names what does, or warns
    when schedules are enabled and nothing it can see ticks them (check W004 says the same).
    """
    stored = ", ".join(created)
    if ticks:
        if created:
            logger.info("worker %s: stored schedules declared in code: %s; this worker ticks them", worker_id, stored)
        return
    try:
        enabled = enabled_schedules()
        found = tickers() if enabled else []
    except DatabaseError as error:
        _start_up_failed(worker_id, error, "look for what ticks the schedules")
        return
    if found:
        if created:
            logger.info("worker %s: stored schedules declared in code: %s; ticked by %s, not by this worker",
                        worker_id, stored, "; ".join(found))
        return
    if enabled:
        logger.warning("worker %s: schedules are enabled%s, but nothing ticks them: this worker runs without "
                       "--with-scheduler, none that does was seen in the last hour, and no Celery beat entry is "
                       "enabled. Start one worker with --with-scheduler, or Celery beat with "
                       "django_procedures.contrib.celery, or name what calls django_procedures.tick() in "
                       "PROCEDURES['TICKER']", worker_id, f" (stored from code: {stored})" if created else "")
    elif created:  # created paused
        logger.info("worker %s: stored schedules declared in code: %s", worker_id, stored)
