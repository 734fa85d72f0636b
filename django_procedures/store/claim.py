"""Claiming due procedures under a lease, and finding the next due time."""

from __future__ import annotations

import functools
import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models import Case, Count, F, Max, Q, Value, When
from django.db.models.functions import Coalesce
from django.utils import timezone

from django_procedures import clock, signals
from django_procedures.models import Lease, ProcedureRun, Schedule
from django_procedures.policy.schedule_args import MAX_DURATION
from django_procedures.policy.status import CLAIMABLE, RunStatus
from django_procedures.store.db import bound_cursor, db_now_plus, is_postgresql, sql_list, text_array
from django_procedures.store.events import send_after_commit
from django_procedures.store.kinds import VERSION_OK, Kinds


@dataclass
class Claim:
    """A procedure this worker holds under the fencing token ``(id, lease_token)``."""

    id: uuid.UUID
    type_name: str
    state: dict[str, Any]
    step: int
    step_name: str
    attempt: int
    failures: int
    lost: int
    lease_token: int
    queue: str
    parent_id: uuid.UUID | None = None
    root_id: uuid.UUID | None = None
    depth: int = 0
    suspension: int = 0
    spawned_in: int = 0
    schedule_id: int | None = None
    in_rollback: bool = False
    lock_keys: list[list[str]] = field(default_factory=list)
    #: A scheduled run's ``max_run_time`` after its start (or manual retry) when claimed: its worker cancels it
    #: once past (None: no limit).
    deadline: datetime | None = None
    #: When it was due: the pickup delay metric is measured from it.
    run_at: datetime | None = None
    #: The submitter's W3C trace context (see ``django_procedures.trace_context``), or None.
    trace_context: dict[str, str] | None = None
    #: The row's times and priority as claimed, and the claiming worker: what the tasks backend reports of an
    #: attempt without reading the row again.
    created_at: datetime | None = None
    started_at: datetime | None = None
    priority: int = 0
    worker: str = ""
    #: The class version that wrote the run's state, and the one the next write records once this worker's
    #: class upgraded it (``upgrade_state``); None: unchanged.
    version: int = 1
    upgraded_to: int | None = None
    #: The concurrency limit names this lease holds a slot of (``store.limits``): freed when the lease ends.
    limits: list[str] = field(default_factory=list)
    #: The run's limits as ``limits()`` gave them for the state the next write saves (``limits_changed``), stored
    #: with that write: the next claim takes those.
    new_limits: list[list[Any]] | None = None
    limits_changed: bool = False


_FIELDS = ["id", "type_name", "state", "step", "step_name", "attempt", "failures", "lost", "lease_token", "queue",
           "parent_id", "root_id", "depth", "suspension", "spawned_in", "schedule_id", "in_rollback", "lock_keys",
           "run_at", "trace_context", "created_at", "started_at", "priority", "version"]

_DEADLINE = ("started_at", "retried_at", "schedule__max_run_time")


def _deadline(started_at: datetime | None, retried_at: datetime | None,
              max_run_time: timedelta | None) -> datetime | None:
    """``max_run_time`` after the run started, or after its manual retry (later); a limit stored past
    validation counts as at most ``MAX_DURATION``."""
    if started_at is None or max_run_time is None:
        return None
    return max(started_at, retried_at or started_at) + min(max_run_time, MAX_DURATION)


# The type and queue filters of the claim and of next_due are expressions no index matches (``|| ''``). A type or
# queue the table's statistics have not seen (a new type, or a burst into a table of millions that autovacuum has
# not analyzed since) is estimated at one row, and the planner would fetch its rows by the admin's
# procedures_type_idx (or procedures_queue_idx) and sort them: every claim then read every row of that type,
# finished history included (40 ms and 5,000 buffers per claim after 5,000 runs beside 1,000,000 finished
# procedures, and more with each run). Written so, the statements read only the partial indexes of ready and
# retrying rows, in claim order: their cost follows the backlog, never the history. (Turning ``enable_sort`` off
# instead pushes the plan's cost past ``jit_above_cost``: 0.8 s of JIT compilation per claim.)
_TYPE_IN = "(type_name || '') = ANY(%(types)s::text[])"
_QUEUE_IN = "AND (queue || '') = ANY(%(queues)s::text[])"

# Due rows that need no lock key decision: no keys, or keys already held from an earlier claim; and no limits
# (procedures_claim_idx holds unlimited rows only; store.limits decides the others).
_PG_DUE = f"""
    SELECT id FROM {{run}}
    WHERE status IN ({sql_list(CLAIMABLE)}) AND limits IS NULL AND run_at <= %(now)s AND {_TYPE_IN} {VERSION_OK}
      {{queue_filter}} AND NOT waiting_for_keys AND (keys_held OR lock_keys = '[]'::jsonb)
    ORDER BY priority DESC, run_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
"""
# Rows whose keys were just granted (already locked by this transaction).
_PG_GRANTED = "SELECT unnest(%(ids)s::uuid[]) AS id"

_PG_CLAIM = f"""
WITH picked AS ({{picked}}), claimed AS (
    UPDATE {{run}} AS r
    SET status = CASE WHEN r.in_rollback THEN '{RunStatus.ROLLING_BACK}' ELSE '{RunStatus.RUNNING}' END,
        lease_token = r.lease_token + 1, lease_owner = %(worker)s,
        lease_expires_at = clock_timestamp() + make_interval(secs => %(lease)s),
        started_at = COALESCE(r.started_at, %(now)s), step_started_at = %(now)s, keys_held = r.lock_keys <> '[]'
    FROM picked WHERE r.id = picked.id
    RETURNING r.*
), leases AS (
    INSERT INTO {{lease}} (procedure_id, token, worker, claimed_at, expires_at, outcome{{lease_columns}})
    SELECT id, lease_token, %(worker)s, clock_timestamp(), lease_expires_at, ''{{lease_values}}
    FROM claimed{{lease_join}}
){{held}}
SELECT {{fields}}, CASE WHEN s.max_run_time IS NOT NULL  -- (LEAST ignores a NULL)
    THEN GREATEST(claimed.started_at, claimed.retried_at) + LEAST(s.max_run_time, interval '{{longest}} days') END
FROM claimed LEFT JOIN {{schedule}} AS s ON s.id = claimed.schedule_id
ORDER BY claimed.priority DESC, claimed.run_at
"""


def claim(
    worker: str,
    *,
    type_names: Sequence[str],
    queues: Sequence[str] | None = None,
    limit: int = 1,
    lease_seconds: float,
    keyed: bool = True,
    versions: Sequence[int] | None = None,
) -> list[Claim]:
    """Claim up to ``limit`` due procedures of ``type_names`` in one short committed transaction.

    Only registered type names are claimed, so a worker that lacks a class
    leaves its procedures to workers that have it; likewise a run written by a
    newer version than ``versions`` (one per type name; default: the registered
    classes' versions) is left to newer workers. Procedures taking lock keys
    for the first time are decided first (``keyed``; see ``store.locks``);
    the rest of the batch is one statement.
    """
    if not type_names or limit < 1:
        return []
    from django_procedures import registry
    from django_procedures.store import limits as flow
    from django_procedures.store import locks

    kinds = Kinds.of(type_names, versions)
    now = clock.now()
    outermost = not transaction.get_connection().in_atomic_block  # never relax a caller's transaction
    with transaction.atomic():
        if outermost:
            _tune_claim_transaction()
        granted = locks.grant_due(kinds=kinds, queues=queues, limit=limit, now=now) if keyed else []
        limited_queues = list(flow.configured_queue_limits())
        # The limited pass runs first when this worker's classes declare limits() or queues have limits; else
        # only after a claim the fast path left short (runs stored with limits by an earlier deploy, say), so
        # a fleet without limits claims with the statements it always did.
        limited_first = bool(limited_queues) or registry.declares_limits(type_names)
        if granted and limited_first:  # one with limits holds its keys now, and takes its limits in the limited pass
            granted = flow.keys_first(granted, limited_queues)
        claims = _lease(worker, granted, lease_seconds, now) if granted else []
        if limited_first and len(claims) < limit:
            claims += _lease_limited(worker, kinds, queues, limit - len(claims), lease_seconds, now)
        if len(claims) < limit:
            claims += _lease_due(worker, kinds, queues, limit - len(claims), lease_seconds, now,
                                 limited_queues)
        if not limited_first and len(claims) < limit:
            claims += _lease_limited(worker, kinds, queues, limit - len(claims), lease_seconds, now)
    for c in claims:
        send_after_commit(signals.procedure_started, procedure_id=c.id, type_name=c.type_name,
                          lease_token=c.lease_token)
    return claims


def _tune_claim_transaction() -> None:
    """Settings local to the claim's own transaction (PostgreSQL).

    - ``synchronous_commit`` off: the COMMIT returns before its WAL is flushed.
      Losing a claim in a crash of PostgreSQL loses nothing: the procedure is
      ready again, as if never claimed. Whatever the worker commits next under
      the lease waits for its own flush, which covers the claim's WAL too, so a
      committed checkpoint (or the mark that a non-idempotent step began) never
      outlives its claim.
    - ``enable_bitmapscan`` off: claimed rows leave dead entries at the front of
      the claim index until a vacuum. A plain index scan marks them dead as it
      passes, so the next claim skips them; a bitmap scan, which the planner
      picks when its statistics lag behind a fresh queue, visits each one in the
      table again at every claim (1 ms per claim after 6,000 procedures).
    """
    if is_postgresql():
        with bound_cursor() as cursor:
            cursor.execute("SELECT set_config('synchronous_commit', 'off', true), "
                           "set_config('enable_bitmapscan', 'off', true)", ())


def _lease_limited(worker: str, kinds: Kinds, queues: Sequence[str] | None, limit: int,
                   lease_seconds: float, now: datetime) -> list[Claim]:
    """Due procedures with limits that took them (``store.limits``), leased; their leases record the slots."""
    from django_procedures.store import limits as flow

    granted = flow.grant_due(kinds=kinds, queues=queues, limit=limit, now=now)
    if not granted:
        return []
    ids = [g.id for g in granted]
    if is_postgresql():  # the slots are written by the statement that writes the leases holding them
        claims = _run_pg(_PG_GRANTED, worker, lease_seconds, now, _hold=True, ids=ids, **flow.hold_params(granted))
    else:
        claims = _lease(worker, ids, lease_seconds, now)
        flow.hold(granted, {c.id: c.lease_token for c in claims}, now)
    held = {g.id: g.held for g in granted}
    for c in claims:
        c.limits = held[c.id]
    return claims


# Queues with limits in PROCEDURES["QUEUES"] are left to store.limits (only when some are configured).
_NOT_LIMITED_QUEUE = "AND NOT (queue = ANY(%(limited_queues)s::text[]))"


def _lease_due(worker: str, kinds: Kinds, queues: Sequence[str] | None, limit: int,
               lease_seconds: float, now: datetime, limited_queues: Sequence[str] = ()) -> list[Claim]:
    if is_postgresql():
        picked = _PG_DUE.format(run=ProcedureRun._meta.db_table,
                                queue_filter=(_QUEUE_IN if queues else "")
                                + (_NOT_LIMITED_QUEUE if limited_queues else ""))
        return _run_pg(picked, worker, lease_seconds, now, **kinds.params(), queues=text_array(queues or ()),
                       limit=limit, limited_queues=text_array(limited_queues))
    due = ProcedureRun._writer.claimable(now).filter(kinds.q(), waiting_for_keys=False, limits__isnull=True).filter(
        Q(keys_held=True) | Q(lock_keys=[])).exclude(queue__in=limited_queues)
    if queues:
        due = due.filter(queue__in=queues)
    ids = list(due.values_list("id", flat=True)[:limit])
    return _lease(worker, ids, lease_seconds, now) if ids else []


def _lease(worker: str, ids: list[uuid.UUID], lease_seconds: float, now: datetime) -> list[Claim]:
    """Lease rows this transaction already picked (and locked, on PostgreSQL)."""
    if is_postgresql():
        return _run_pg(_PG_GRANTED, worker, lease_seconds, now, ids=ids)
    ProcedureRun._writer.filter(id__in=ids, status__in=CLAIMABLE).update(
        status=Case(When(in_rollback=True, then=Value(RunStatus.ROLLING_BACK)), default=Value(RunStatus.RUNNING)),
        lease_token=F("lease_token") + 1, lease_owner=worker, lease_expires_at=db_now_plus(lease_seconds),
        started_at=Coalesce("started_at", now), step_started_at=now,
        keys_held=Case(When(lock_keys=[], then=Value(False)), default=Value(True)),
    )
    rows = {r["id"]: r for r in
            ProcedureRun._writer.filter(id__in=ids).values(*_FIELDS, "lease_expires_at", *_DEADLINE)}
    Lease._writer.bulk_create(
        Lease(procedure_id=pid, token=rows[pid]["lease_token"], worker=worker, claimed_at=timezone.now(),
              expires_at=rows[pid]["lease_expires_at"])
        for pid in ids
    )
    return [Claim(**{k: rows[pid][k] for k in _FIELDS}, deadline=_deadline(*(rows[pid][k] for k in _DEADLINE)),
                  worker=worker) for pid in ids]


@functools.cache
def _pg_claim(picked: str, hold: bool) -> str:
    from django_procedures.store import limit_sql

    columns, values, join = limit_sql.LEASE_LIMITS if hold else ("", "", "")
    return _PG_CLAIM.format(picked=picked, run=ProcedureRun._meta.db_table, lease=Lease._meta.db_table,
                            schedule=Schedule._meta.db_table, longest=MAX_DURATION.days,
                            fields=", ".join(f"claimed.{f}" for f in _FIELDS), lease_columns=columns,
                            lease_values=values, lease_join=join, held=limit_sql.statement("hold") if hold else "")


def _run_pg(picked: str, worker: str, lease_seconds: float, now: datetime, _hold: bool = False,
            **params: Any) -> list[Claim]:
    sql = _pg_claim(picked, _hold)
    with bound_cursor() as cursor:
        cursor.execute(sql, {"now": now, "worker": worker, "lease": float(lease_seconds), **params})
        rows = cursor.fetchall()
    claims = []
    for row in rows:
        values = dict(zip(_FIELDS, row[:-1], strict=True))
        for name in ("state", "lock_keys", "trace_context"):
            if isinstance(values[name], str):
                values[name] = json.loads(values[name])
        claims.append(Claim(**values, deadline=row[-1], worker=worker))
    return claims


def unknown_types(type_names: Sequence[str]) -> dict[str, int]:
    """Ready or retrying procedures whose type this worker has not registered, by type name."""
    rows = (ProcedureRun._writer.pending().exclude(type_name__in=type_names)
            .values_list("type_name").annotate(n=Count("id")).order_by("type_name"))
    return dict(rows)


def newer_versions(type_names: Sequence[str], versions: Sequence[int] | None = None) -> dict[str, tuple[int, int]]:
    """Ready or retrying procedures of ``type_names`` written by a newer version than this worker's class (see
    :func:`claim`): by type name, how many and the newest version."""
    kinds = Kinds.of(type_names, versions)
    rows = (ProcedureRun._writer.pending().filter(type_name__in=kinds.type_names).exclude(kinds.q())
            .values_list("type_name").annotate(n=Count("id"), newest=Max("version")).order_by("type_name"))
    return {name: (n, newest) for name, n, newest in rows}
