"""A tick batch's writes: its runs in one ``INSERT ... SELECT``, its schedules in one ``UPDATE ... FROM``.

Building a ``ProcedureRun`` per tick in Python and sending each row's forty
columns cost most of a pass over thousands of schedules. Here each run is a
small JSON record (its schedule, its tick, and what its procedure class
decides: first step, queue, priority, lock keys); the database joins it with
the schedule row for the type name and the state, and fills every other column
with its field's default. ``RETURNING`` says which ticks started: a tick that
already has its run (another ticker won it) hits the unique constraint and is
skipped. The schedules are written back with one UPDATE joined with a JSON
record per schedule (the counts add to the row's, so the record carries only
what the decision changed).
"""

from __future__ import annotations

import functools
import json
from collections import Counter
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from django.db import connection, models
from django.db.models import F

from django_procedures import registry, signals
from django_procedures.conf import conf
from django_procedures.exceptions import UnknownProcedureType
from django_procedures.models import ProcedureRun, Schedule
from django_procedures.policy.ids import new_id
from django_procedures.policy.options import Options
from django_procedures.policy.procedure_class import ProcedureClass
from django_procedures.policy.schedule import TickDecision
from django_procedures.store.db import is_postgresql
from django_procedures.store.events import send_after_commit
from django_procedures.store.notify import notify
from django_procedures.store.submit import insert, row_of


class Ticked(NamedTuple):
    """What a pass writes back on one schedule: the runs it started and its tick decision."""

    schedule_id: int
    started: int
    decision: TickDecision


def write_back(ticked: Sequence[Ticked], now: datetime) -> None:
    """Write each ticked schedule's counts, pending ticks, next tick and drift, and clear its error."""
    if not ticked:
        return
    if not is_postgresql():
        for t in ticked:
            d = t.decision
            Schedule._writer.filter(id=t.schedule_id).update(
                active_runs=F("active_runs") + t.started, pending_ticks=[p.isoformat() for p in d.pending],
                skips=F("skips") + d.skips, overlaps=F("overlaps") + d.overlaps, next_tick_at=d.next_tick_at,
                last_tick_at=now, last_error="", last_error_at=None,
                **({"last_drift_ms": _drift_ms(d)} if d.due else {}))
        return
    records = [{"id": t.schedule_id, "started": t.started, "pending": [p.isoformat() for p in t.decision.pending],
                "skips": t.decision.skips, "o": t.decision.overlaps,
                "next": t.decision.next_tick_at.isoformat() if t.decision.next_tick_at else None,
                "drift": _drift_ms(t.decision) if t.decision.due else None} for t in ticked]
    q = connection.ops.quote_name  # OVERLAPS is an SQL keyword
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {q(Schedule._meta.db_table)} AS s SET active_runs = s.active_runs + v.started, "
            f"pending_ticks = v.pending, skips = s.skips + v.skips, {q('overlaps')} = s.{q('overlaps')} + v.o, "
            "next_tick_at = v.next, last_tick_at = %(now)s, last_drift_ms = COALESCE(v.drift, s.last_drift_ms), "
            "last_error = '', last_error_at = NULL "
            "FROM jsonb_to_recordset(%(records)s::jsonb) AS v(id bigint, started integer, pending jsonb, "
            "skips integer, o integer, next timestamptz, drift bigint) WHERE s.id = v.id",
            {"now": now, "records": json.dumps(records)})


def _drift_ms(decision: TickDecision) -> int:
    return int(decision.drift / timedelta(milliseconds=1))


class Wanted(NamedTuple):
    """The runs a tick decision starts for one schedule, with what its procedure class decides for them."""

    schedule: Schedule
    cls: ProcedureClass | None
    ticks: Sequence[datetime]
    step_name: str = ""
    queue: str = ""
    priority: int = 0
    lock_keys: list[list[str]] | None = None
    limits: list[list[Any]] | None = None


def wanted(schedule: Schedule, ticks: Sequence[datetime]) -> Wanted:
    """What the runs of ``ticks`` need from the procedure class; raises for this schedule alone
    (``UnknownProcedureType``, an abstract class, lock keys that cannot be stored)."""
    if not ticks:
        return Wanted(schedule, None, ())
    cls = registry.get(schedule.procedure)
    if cls.abstract:
        raise TypeError(f"{getattr(cls, '__qualname__', cls.type_name)} is abstract; a schedule starts one of its "
                        "concrete subclasses")
    return Wanted(schedule, cls, ticks, cls.steps[0].name, schedule.queue or cls.queue or conf.DEFAULT_QUEUE,
                  cls.priority, cls._stored_lock_keys(schedule.state) if cls.declares_lock_keys else [],
                  cls._stored_limits(schedule.state) if cls.declares_limits else None)


def declares_lock_keys(schedule: Schedule) -> bool:
    """Whether the runs' lock keys (or limits) depend on the schedule's state (its class overrides ``lock_keys()``
    or ``limits()``)."""
    try:
        cls = registry.get(schedule.procedure)
        return cls.declares_lock_keys or cls.declares_limits
    except UnknownProcedureType:
        return False


def insert_runs(wanted: Sequence[Wanted], now: datetime) -> Counter[int]:
    """Insert one run per wanted tick; returns the runs started per schedule id."""
    wanted = [w for w in wanted if w.ticks]
    if not wanted:
        return Counter()
    if not is_postgresql():
        return _insert_rows(wanted, now)
    records = [{"i": str(new_id()), "s": w.schedule.id, "t": tick_at.isoformat(), "n": w.step_name, "q": w.queue,
                "p": w.priority, "k": w.lock_keys, "v": w.cls.version if w.cls else 1,
                **({"l": w.limits} if w.limits else {})}  # (absent: NULL, unlimited)
               for w in wanted for tick_at in w.ticks]
    sql, constants = _statement()
    with connection.cursor() as cursor:
        cursor.execute(sql, {**constants, "now": now, "records": json.dumps(records)})  # no floats: plain JSON
        inserted = cursor.fetchall()
    started: Counter[int] = Counter(schedule_id for schedule_id, _, _, _ in inserted)
    notify({queue for _, queue, _, _ in inserted})
    for _, _, procedure_id, type_name in inserted:
        send_after_commit(signals.procedure_submitted, procedure_id=procedure_id, type_name=type_name)
    return started


def _insert_rows(wanted: Sequence[Wanted], now: datetime) -> Counter[int]:
    """Other databases: unsaved rows built in Python, inserted skipping the ticks that have their run."""
    rows: list[ProcedureRun] = []
    schedule_of: dict[Any, int] = {}
    for w in wanted:
        schedule = w.schedule
        if w.cls is None:  # no ticks due
            continue
        run = w.cls._new_run(schedule.state, Options(queue=schedule.queue or None), now=now)
        for tick_at in w.ticks:
            row = row_of(run, now=now, parent=None)
            row.schedule_id, row.tick_at = schedule.id, tick_at
            rows.append(row)
            schedule_of[row.id] = schedule.id
    inserted = set(insert(rows, skip_conflicts=True))
    return Counter(schedule_of[row.id] for row in rows if row.id in inserted)


#: Columns each run takes from its JSON record: (name in the record, its type in ``jsonb_to_recordset``).
_FROM_RECORD = {"id": ("i", "uuid"), "schedule_id": ("s", "bigint"), "tick_at": ("t", "timestamptz"),
                "step_name": ("n", "text"), "queue": ("q", "text"), "priority": ("p", "integer"),
                "lock_keys": ("k", "jsonb"), "version": ("v", "integer"), "limits": ("l", "jsonb")}


@functools.cache
def _statement() -> tuple[str, dict[str, Any]]:
    """The INSERT (built once per process) and the parameters of its constant columns (the fields' defaults)."""
    quote = connection.ops.quote_name
    columns, values, constants = [], [], {}
    for f in ProcedureRun._meta.concrete_fields:
        columns.append(quote(f.column))
        db_type = f.db_type(connection) or "text"
        cast = "text" if db_type.startswith("varchar") else db_type
        if f.column in ("type_name", "state", "submitted_state"):  # the schedule's procedure and state
            source = Schedule._meta.get_field("procedure" if f.column == "type_name" else "state")
            assert isinstance(source, models.Field)  # a concrete column, not a relation
            values.append(f"s.{quote(source.column)}")
        elif f.column in ("run_at", "created_at"):
            values.append("%(now)s")
        elif f.column in _FROM_RECORD:
            values.append(f"t.{_FROM_RECORD[f.column][0]}::{cast}")
        elif (default := f.get_default()) is None:
            values.append(f"NULL::{cast}")
        else:
            name = f"default_{f.column}"
            values.append(f"%({name})s::{cast}")
            constants[name] = f.get_db_prep_save(default, connection)
    record = ", ".join(f"{name} {kind}" for name, kind in _FROM_RECORD.values())
    sql = (f"INSERT INTO {quote(ProcedureRun._meta.db_table)} ({', '.join(columns)}) "
           f"SELECT {', '.join(values)} FROM jsonb_to_recordset(%(records)s::jsonb) AS t({record}) "
           f"JOIN {quote(Schedule._meta.db_table)} AS s ON s.id = t.s "
           f"ON CONFLICT DO NOTHING RETURNING schedule_id, queue, id, type_name")
    return sql, constants
