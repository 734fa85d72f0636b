"""A checkpoint or a completion on PostgreSQL in one statement: the fenced update, its ``Step`` rows, its lease.

Through the ORM that is three statements, three round trips and most of a
no-op procedure's cost; here it is one ``WITH … UPDATE … RETURNING`` whose
other parts only act on the row the fenced update matched, so a write that lost
its lease changes nothing and reports it. Other databases take the ORM path in
:mod:`django_procedures.store.fence`.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

from django.db import connection

from django_procedures import clock
from django_procedures.models import Lease, ProcedureRun, Step
from django_procedures.policy.status import LEASED, LeaseOutcome, RunStatus, StepStatus
from django_procedures.store.db import bound_cursor, sql_list
from django_procedures.store.listening import listens

if TYPE_CHECKING:
    from django.db.models import Field

    from django_procedures.store.claim import Claim
    from django_procedures.store.fence import StepRecord

_RUN, _STEP, _LEASE = (m._meta.db_table for m in (ProcedureRun, Step, Lease))

# The fenced row first; the Step rows and the lease close only join it, so nothing is written when it
# matched nothing. The state is written once, on the last Step row (the others carry none). The status test
# is wrapped in IS TRUE so that it no longer implies the predicate of procedures_lease_idx: the planner
# otherwise picks that partial index (stale statistics say almost nothing runs) and reads every leased row
# in the table to find this one, instead of one lookup by primary key.
_SQL = f"""
WITH run AS (
    UPDATE {_RUN} SET state = %(state)s, step = %(step)s, step_name = %(step_name)s, attempt = 1, failures = 0,
        lost = 0, in_unsafe_step = false, {{sets}}
    WHERE id = %(id)s AND lease_token = %(token)s AND (status IN ({sql_list(LEASED)})) IS TRUE
    RETURNING id, state
), steps AS (
    INSERT INTO {_STEP} (procedure_id, index, name, attempt, status, lease_token, started_at, finished_at, error,
                         state)
    SELECT run.id, s.index, s.name, s.attempt, '{StepStatus.DONE}', %(token)s, s.started_at, s.finished_at, '',
           CASE WHEN s.index = %(step)s - 1 THEN run.state END
    FROM run, (VALUES {{values}}) AS s(index, name, attempt, started_at, finished_at)
){{lease}}{{free}}
SELECT count(*){{told}} FROM run
"""
_CHECKPOINT_SETS = "step_started_at = %(now)s"
_COMPLETE_SETS = (f"status = '{RunStatus.DONE}', output = %(output)s, finished_at = %(now)s, error = '', "
                  "traceback = '', lease_owner = '', lease_expires_at = NULL")
#: A held-back ``ctx.progress()`` report riding along (``runtime.progress.ProgressRecorder.take``).
_PROGRESS_SETS = ", progress = %(progress)s, progress_updated_at = %(now)s"
#: The class version that upgraded the state (``runtime.versions``): only then, the hot path's statement unchanged.
_VERSION_SETS = ", version = %(version)s"
#: The limits ``limits()`` gave for the new state (a class that declares them): only then.
_LIMITS_SETS = ", limits = %(limits)s"
_CLOSE_LEASE = f""", lease AS (
    UPDATE {_LEASE} SET released_at = clock_timestamp(), outcome = '{LeaseOutcome.COMPLETED}'
    WHERE procedure_id = %(id)s AND token = %(token)s AND released_at IS NULL AND EXISTS (SELECT FROM run)
)"""


@functools.lru_cache(maxsize=64)
def _statement(complete: bool, steps: int, progress: bool, version: bool = False, limits: bool = False,
               free: bool = False, notify: bool = False) -> str:
    """The statement for ``steps`` Step rows (one per step run since the last checkpoint; mostly one), and with
    ``progress`` the run's progress report too, with ``version`` the run's new version; with ``free`` the limit
    slots of the lease it closes come back (``store.limits``), NOTIFYing the queues waiting if ``notify``."""
    from django_procedures.store import limit_sql

    values = ", ".join(f"(%(index{i})s::integer, %(name{i})s::text, %(attempt{i})s::integer, "
                       f"%(started{i})s::timestamptz, %(finished{i})s::timestamptz)" for i in range(steps))
    sets = ((_COMPLETE_SETS if complete else _CHECKPOINT_SETS) + (_PROGRESS_SETS if progress else "")
            + (_VERSION_SETS if version else "") + (_LIMITS_SETS if limits else ""))
    return _SQL.format(sets=sets, values=values, lease=_CLOSE_LEASE if complete else "",
                       free=limit_sql.free_with_run(notify) if free else "",
                       told=", (SELECT count(*) FROM told)" if free else "")


def json_param(field: str, value: Any) -> Any:
    """``value`` adapted as the model field adapts it (same encoder), for a raw statement."""
    column = cast("Field[Any, Any]", ProcedureRun._meta.get_field(field))  # a column, not a relation
    return column.get_db_prep_value(value, connection)


def write_checkpoint(claim: Claim, records: Sequence[StepRecord], state: dict[str, Any], next_step: str, *,
                   complete: bool = False, output: Any = None, progress: dict[str, Any] | None = None) -> bool:
    """Commit ``records`` (at least one) with ``state``: a checkpoint (``next_step`` next) or, with ``complete``,
    the run ``done`` with ``output`` and its lease closed, and the limit slots it held freed. ``progress``: a
    held-back progress report, written by the same statement. False if the lease is lost (nothing written)."""
    params = {"id": claim.id, "token": claim.lease_token, "state": json_param("state", state), "now": clock.now(),
              "step": records[-1].index + 1, "step_name": next_step}
    if complete:
        params["output"] = json_param("output", output)
    if progress is not None:
        from psycopg.types.json import Jsonb  # only here: SQLite installs have no psycopg

        # Numbers, a string and None (policy.progress.Report): what the field's adapter makes (it has no
        # encoder), without its lookups at every checkpoint.
        params["progress"] = Jsonb(progress, json.dumps)
    if claim.upgraded_to is not None:
        params["version"] = claim.upgraded_to
    if claim.limits_changed:
        params["limits"] = json_param("limits", claim.new_limits)
    for i, r in enumerate(records):
        params.update({f"index{i}": r.index, f"name{i}": r.name, f"attempt{i}": r.attempt,
                       f"started{i}": r.started_at, f"finished{i}": r.finished_at})
    free = complete and bool(claim.limits)  # its slots come back in this statement, which closes the lease
    if free:
        params.update(own=json.dumps([claim.queue]), own_queue=claim.queue)
    with bound_cursor() as cursor:
        cursor.execute(_statement(complete, len(records), progress is not None, "version" in params,
                                  "limits" in params, free, free and listens()), params)
        return bool(cursor.fetchone()[0])
