"""Forward progress of a claimed procedure in one statement: the fenced update, its ``Step`` rows, its lease.

A checkpoint or a completion writes three tables. Through the ORM that is three
statements, three round trips and most of a no-op procedure's cost; on
PostgreSQL it is one ``WITH … UPDATE … RETURNING`` whose other parts only act
on the row the fenced update matched, so a write that lost its lease changes
nothing and reports it (the caller raises ``LeaseLost``). Other databases take
the ORM path, which does the same in three statements.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from django.db import connection
from django.db.models import QuerySet

from django_procedures import clock
from django_procedures.models import Lease, ProcedureRun, Step
from django_procedures.policy.status import LEASED, LeaseOutcome, RunStatus, StepStatus
from django_procedures.store.db import bound_cursor, db_now, is_postgresql

if TYPE_CHECKING:
    from django_procedures.store.claim import Claim
    from django_procedures.store.fence import StepRecord

_RUN, _STEP, _LEASE = (m._meta.db_table for m in (ProcedureRun, Step, Lease))

# The fenced row first; the Step rows and the lease close only join it, so nothing is written when it
# matched nothing. The state is written once, on the last Step row (the others carry none).
_SQL = f"""
WITH run AS (
    UPDATE {_RUN} SET state = %(state)s, step = %(step)s, step_name = %(step_name)s, attempt = 1, failures = 0,
        lost = 0, in_unsafe_step = false, {{sets}}
    WHERE id = %(id)s AND lease_token = %(token)s AND status IN ({", ".join(f"'{s}'" for s in LEASED)})
    RETURNING id, state
), steps AS (
    INSERT INTO {_STEP} (procedure_id, index, name, attempt, status, lease_token, started_at, finished_at, error,
                         state)
    SELECT run.id, s.index, s.name, s.attempt, '{StepStatus.DONE}', %(token)s, s.started_at, s.finished_at, '',
           CASE WHEN s.index = %(step)s - 1 THEN run.state END
    FROM run, (VALUES {{values}}) AS s(index, name, attempt, started_at, finished_at)
){{lease}}
SELECT count(*) FROM run
"""
_CHECKPOINT_SETS = "step_started_at = %(now)s"
_COMPLETE_SETS = (f"status = '{RunStatus.DONE}', output = %(output)s, finished_at = %(now)s, error = '', "
                  "traceback = '', lease_owner = '', lease_expires_at = NULL")
_CLOSE_LEASE = f""", lease AS (
    UPDATE {_LEASE} SET released_at = clock_timestamp(), outcome = '{LeaseOutcome.COMPLETED}'
    WHERE procedure_id = %(id)s AND token = %(token)s AND released_at IS NULL AND EXISTS (SELECT FROM run)
)"""


@functools.lru_cache(maxsize=32)
def _statement(complete: bool, steps: int) -> str:
    """The statement for ``steps`` Step rows (one per step run since the last checkpoint; mostly one)."""
    values = ", ".join(f"(%(index{i})s::integer, %(name{i})s::text, %(attempt{i})s::integer, "
                       f"%(started{i})s::timestamptz, %(finished{i})s::timestamptz)" for i in range(steps))
    return _SQL.format(sets=_COMPLETE_SETS if complete else _CHECKPOINT_SETS, values=values,
                       lease=_CLOSE_LEASE if complete else "")


def checkpoint(claim: Claim, records: Sequence[StepRecord], state: dict[str, Any], next_step: str) -> bool:
    """Commit ``records`` with ``state``, ``next_step`` next; False if the lease is lost (nothing written)."""
    if is_postgresql():
        return _run(_statement(False, len(records)), claim, records, state, next_step)
    if not _orm_update(claim, state=state, step=records[-1].index + 1, step_name=next_step,
                       step_started_at=clock.now(), attempt=1, failures=0, lost=0, in_unsafe_step=False):
        return False
    Step._writer.bulk_create(done_rows(claim, records, state))
    return True


def complete(claim: Claim, records: Sequence[StepRecord], state: dict[str, Any], output: Any) -> bool:
    """Finish ``done`` with ``output``, committing ``records`` and closing the lease; False if the lease is lost."""
    if records and is_postgresql():
        return _run(_statement(True, len(records)), claim, records, state, "", output=_json("output", output))
    step = records[-1].index + 1 if records else claim.step
    if not _orm_update(claim, status=RunStatus.DONE, state=state, step=step, step_name="", output=output,
                       finished_at=clock.now(), error="", traceback="", lease_owner="", lease_expires_at=None,
                       in_unsafe_step=False):
        return False
    if records:
        Step._writer.bulk_create(done_rows(claim, records, state))
    close_lease(claim.id, claim.lease_token, LeaseOutcome.COMPLETED)
    return True


def close_lease(procedure_id: Any, token: int, outcome: LeaseOutcome) -> None:
    Lease._writer.filter(procedure_id=procedure_id, token=token, released_at__isnull=True).update(
        released_at=db_now(), outcome=outcome
    )


def done_rows(claim: Claim, records: Sequence[StepRecord], state: dict[str, Any]) -> list[Step]:
    """The ``Step`` rows of steps that ended done in this claim; the last carries the committed state."""
    last = len(records) - 1
    return [
        Step(procedure_id=claim.id, index=r.index, name=r.name, attempt=r.attempt, status=StepStatus.DONE,
             lease_token=claim.lease_token, started_at=r.started_at, finished_at=r.finished_at,
             state=state if i == last else None)
        for i, r in enumerate(records)
    ]


def held_row(claim: Claim) -> QuerySet[ProcedureRun]:
    """The claimed row while ``claim`` still holds it: the fence every write and check of a claim goes through."""
    return ProcedureRun._writer.filter(id=claim.id, lease_token=claim.lease_token, status__in=LEASED)


def _orm_update(claim: Claim, **fields: Any) -> bool:
    return bool(held_row(claim).update(**fields))


def _json(field: str, value: Any) -> Any:
    """``value`` adapted as the model field adapts it (same encoder), for a raw statement."""
    return ProcedureRun._meta.get_field(field).get_db_prep_value(value, connection)


def _run(sql: str, claim: Claim, records: Sequence[StepRecord], state: dict[str, Any], next_step: str,
         **extra: Any) -> bool:
    params = {"id": claim.id, "token": claim.lease_token, "state": _json("state", state), "now": clock.now(),
              "step": records[-1].index + 1, "step_name": next_step, **extra}
    for i, r in enumerate(records):
        params.update({f"index{i}": r.index, f"name{i}": r.name, f"attempt{i}": r.attempt,
                       f"started{i}": r.started_at, f"finished{i}": r.finished_at})
    with bound_cursor() as cursor:
        cursor.execute(sql, params)
        return bool(cursor.fetchone()[0])
