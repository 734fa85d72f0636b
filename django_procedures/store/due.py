"""When a worker next has something to do: the first due run it could claim, the first sleeper's wake time, and
whether limited work could be claimed now."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from django.db.models import Min, Q

from django_procedures import clock
from django_procedures.models import ProcedureRun
from django_procedures.policy.status import CLAIMABLE, RunStatus
from django_procedures.store.db import bound_cursor, is_postgresql, sql_list, text_array
from django_procedures.store.kinds import NOT_LIMITED_QUEUE, QUEUE_IN, TYPE_IN, VERSION_OK, Kinds


@dataclass(frozen=True)
class DueTimes:
    """When work falls due: the first ready or retrying run this worker could claim, and the first sleeper."""

    run_at: datetime | None = None
    #: A sleeper's wake time: only when it has come is a wake pass (``store.timers.wake_due``) worth running.
    wake_at: datetime | None = None
    #: A due procedure with limits none of which is full was left by the claim (another claim was taking its
    #: slot or its row right then): it may be claimed now. Not in ``earliest``: the claims that raced for it,
    #: or the worker whose lease just freed a slot, take it; an idle worker looks again at a short poll.
    limited_ready: bool = False

    @property
    def earliest(self) -> datetime | None:
        return min(filter(None, (self.run_at, self.wake_at)), default=None)


def due_times(*, type_names: Sequence[str], queues: Sequence[str] | None = None,
              versions: Sequence[int] | None = None) -> DueTimes:
    """The earliest ``run_at`` of a ready or retrying procedure this worker could claim (``versions`` as for
    :func:`claim`: a run of a newer version is not one), and the earliest ``wake_at`` of a sleeper (any queue or
    type: any worker's wake pass makes it ready).

    A due procedure with limits is ``limited_ready`` while its limits are not full; over a full rate, it is due
    when the rate admits a claim again; over a full concurrency limit, when a slot frees (the queues waiting
    are noted here, and the lease ending wakes them: ``store.limits``).
    """
    if not type_names:
        return DueTimes()
    from django_procedures.store import limits as flow

    kinds = Kinds.of(type_names, versions)
    limited_queues = list(flow.configured_queue_limits())
    now = clock.now()
    if is_postgresql():  # after every claim that got fewer than it asked for: the ORM cost more than the query
        run_at, wake_at, limited_due = _pg_due_times(kinds, queues, limited_queues, now)
        waiting = flow.waiting(kinds, queues, now) if limited_due else flow.Waiting()
    else:
        from django_procedures.store.timers import next_wake

        rows = ProcedureRun._writer.pending().filter(kinds.q(), waiting_for_keys=False).filter(
            (Q(limits__isnull=True) & ~Q(queue__in=limited_queues)) | Q(run_at__gt=now))
        if queues:
            rows = rows.filter(queue__in=queues)
        run_at, wake_at = rows.aggregate(at=Min("run_at"))["at"], next_wake()
        waiting = flow.waiting_sqlite(kinds, queues, now)
    return DueTimes(min(filter(None, (run_at, waiting.rate_at)), default=None), wake_at, waiting.ready)


def next_due(*, type_names: Sequence[str], queues: Sequence[str] | None = None,
             versions: Sequence[int] | None = None) -> datetime | None:
    """The earlier of :func:`due_times`: when this worker next has something to do (now, if limited work
    could be claimed now)."""
    times = due_times(type_names=type_names, queues=queues, versions=versions)
    return clock.now() if times.limited_ready else times.earliest


# What due_times' ORM query asks, as a statement prepared once per connection; see TYPE_IN: its cost follows
# the backlog, not the history. A due unlimited row is found in claim order (procedures_claim_idx), a future
# row in run_at order from now (procedures_due_idx): neither reads the due rows with limits at the front of a
# queue, which are left to store.limits.waiting (only when there is one: the third column, from
# procedures_limited_claim_idx, or the claim index for a queue with limits). Ordered and limited rather than
# min(): with the version filter the planner no longer turned min() into an index read up to the first match.
_PG_DUE_TIMES = f"""
    SELECT LEAST((
        SELECT run_at FROM {{run}}
        WHERE status IN ({sql_list(CLAIMABLE)}) AND limits IS NULL AND run_at <= %(now)s AND NOT waiting_for_keys
          AND {TYPE_IN} {VERSION_OK} {{queue_filter}} {{not_limited_queue}}
        ORDER BY priority DESC, run_at LIMIT 1
    ), (
        SELECT run_at FROM {{run}}
        WHERE status IN ({sql_list(CLAIMABLE)}) AND run_at > %(now)s AND NOT waiting_for_keys AND {TYPE_IN}
          {VERSION_OK} {{queue_filter}}
        ORDER BY run_at LIMIT 1
    )), (  -- procedures_wake_idx
        SELECT min(wake_at) FROM {{run}} WHERE status = '{RunStatus.WAITING}' AND wake_at IS NOT NULL
    ), EXISTS (
        SELECT FROM {{run}}
        WHERE status IN ({sql_list(CLAIMABLE)}) AND run_at <= %(now)s AND NOT waiting_for_keys AND {TYPE_IN}
          {{queue_filter}} AND ({{limited}})
    )
"""


def _pg_due_times(kinds: Kinds, queues: Sequence[str] | None, limited_queues: Sequence[str],
                  now: datetime) -> tuple[datetime | None, datetime | None, bool]:
    sql = _PG_DUE_TIMES.format(run=ProcedureRun._meta.db_table, queue_filter=QUEUE_IN if queues else "",
                               not_limited_queue=NOT_LIMITED_QUEUE if limited_queues else "",
                               limited="limits IS NOT NULL" + (" OR queue = ANY(%(limited_queues)s::text[])"
                                                               if limited_queues else ""))
    with bound_cursor() as cursor:
        cursor.execute(sql, {**kinds.params(), "queues": text_array(queues or ()), "now": now,
                             "limited_queues": text_array(limited_queues)})
        row = cursor.fetchone()
    if not row:
        return None, None, False
    return row[0], row[1], bool(row[2])
