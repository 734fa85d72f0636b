"""The worker registry's writes: a row per worker start, renewed by its heartbeat, closed when it stops."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime

from django.db.models import Q

from django_procedures.models import Worker
from django_procedures.policy.workers import StopReason
from django_procedures.store.db import db_now, db_now_plus

logger = logging.getLogger("django_procedures.store")

#: Longest stop detail (an error message) kept on a worker row, in characters.
MAX_DETAIL = 2000


def register(*, worker_id: str, hostname: str, pid: int, version: str, queues: Sequence[str] | None,
             concurrency: int, lease_seconds: float, with_scheduler: bool = False) -> int:
    """Record a worker that starts now (database clock); returns its row id."""
    row = Worker._writer.create(
        worker_id=worker_id[:255], hostname=hostname[:255], pid=pid, version=version[:50], queues=list(queues or []),
        concurrency=concurrency, lease_seconds=lease_seconds, with_scheduler=with_scheduler, started_at=db_now(),
        last_seen_at=db_now(), alive_until=db_now_plus(lease_seconds))
    return row.pk


def renew(row_id: int, lease_seconds: float) -> bool:
    """The worker is still there: ``last_seen_at`` is now and it stays alive for one more lease.

    Returns False if the row is gone (pruned) or was closed, which the caller logs.
    """
    return bool(Worker._writer.filter(id=row_id, stopped_at__isnull=True).update(
        last_seen_at=db_now(), alive_until=db_now_plus(lease_seconds)))


def stop(row_id: int, reason: StopReason, detail: str = "") -> None:
    """The worker stopped, and why (a signal, ``--burst`` drained, an error)."""
    Worker._writer.filter(id=row_id, stopped_at__isnull=True).update(
        stopped_at=db_now(), last_seen_at=db_now(), stop_reason=reason.value, stop_detail=detail[:MAX_DETAIL])


def prune(older_than: datetime, *, dry_run: bool = False) -> int:
    """Delete rows of workers stopped or gone, last seen before ``older_than``; a live worker's row stays."""
    old = Worker._writer.filter(last_seen_at__lt=older_than).filter(
        Q(stopped_at__isnull=False) | Q(alive_until__lt=db_now()))
    if dry_run:
        return old.count()
    deleted, _ = old.delete()
    return deleted
