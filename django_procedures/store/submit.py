"""Writing submitted procedures (row data checked by ``django_procedures.submitting``) and a parent's children."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from datetime import datetime
from operator import attrgetter
from typing import Any, NamedTuple

from django.db import connection, transaction
from django.db.models import F, Field, Model

from django_procedures import signals
from django_procedures.exceptions import KeyConflict
from django_procedures.models import ProcedureRun
from django_procedures.policy.ids import new_id
from django_procedures.policy.procedure_class import NewRun
from django_procedures.policy.state import dumps
from django_procedures.policy.status import FINAL
from django_procedures.store.db import is_postgresql
from django_procedures.store.events import send_after_commit
from django_procedures.store.notify import notify
from django_procedures.store.schema import tables_required
from django_procedures.trace_context import capture


@dataclass(frozen=True)
class Parent:
    """Where new rows hang in a tree."""

    id: uuid.UUID
    root_id: uuid.UUID
    depth: int
    suspension: int = 0


def _parent(parent: Any) -> Parent | None:
    """A parent given as a handle, a ``ProcedureRun``, or an id (a ``UUID`` or its text)."""
    if parent is None:
        return None
    given = getattr(parent, "id", parent)
    try:
        parent_id = given if isinstance(given, uuid.UUID) else uuid.UUID(given if isinstance(given, str) else "")
    except ValueError:
        raise TypeError("parent must be a ProcedureHandle, a ProcedureRun or a procedure id (a UUID); "
                        f"got {type(parent).__name__} {parent!r}") from None
    # Written, not only read, in the transaction that inserts the children, and only while unfinished: a cancel
    # locks a tree top-down and reads each level's children under their parents' locks (store/tree.py), and a
    # prune deletes only finished trees; PostgreSQL does not check a child's parent_id, and a prune that deleted
    # the parent first leaves nothing to write (docs/scaling.md, "Foreign keys"). The row lock is held until the
    # caller's transaction ends.
    while not ProcedureRun._writer.filter(id=parent_id).exclude(status__in=FINAL).update(
            pending_children=F("pending_children")):
        status = ProcedureRun._writer.filter(id=parent_id).values_list("status", flat=True).first()
        if status is None:
            raise ValueError(f"parent procedure {parent_id} does not exist")
        if status in FINAL:
            raise ValueError(f"parent procedure {parent_id} is {status}: children can only be added to a procedure "
                             "that is not final (not done, failed, rolled_back or cancelled)")
        # Final when written, not any more when read: a retry committed in between; write it again.
    row = ProcedureRun._writer.filter(id=parent_id).values("root_id", "depth").get()
    return Parent(parent_id, row["root_id"] or parent_id, row["depth"])


def row_of(run: NewRun, *, now: datetime, parent: Parent | None, position: int = 0) -> ProcedureRun:
    """An unsaved ``ProcedureRun`` of ``run`` (row data checked by the procedure side), created at ``now``."""
    values = dict(
        id=new_id(), type_name=run.type_name, version=run.version, state=run.state, submitted_state=run.state,
        step_name=run.step_name,
        queue=run.queue, priority=run.priority, key=run.key, run_at=run.run_at, created_at=now, lock_keys=run.lock_keys,
        limits=run.limits,
        parent_id=parent and parent.id, root_id=parent and parent.root_id, depth=parent.depth + 1 if parent else 0,
        spawned_in=parent.suspension if parent else 0, position=position, trace_context=capture(),
    )
    # Positional arguments skip Model.__init__'s keyword lookup of every field: half the cost of a row
    # (a tick builds thousands).
    return ProcedureRun(*[values[f.attname] if f.attname in values else f.get_default()  # type: ignore[misc]
                          for f in ProcedureRun._meta.concrete_fields])  # (the plugin reads the list as the id)


def insert(rows: list[ProcedureRun], *, skip_conflicts: bool = False) -> list[uuid.UUID]:
    """Insert ``rows`` with one INSERT; a row whose idempotency key exists is not inserted.

    Returns, per row, the id of the procedure that now carries it (its own or the existing one).
    With ``skip_conflicts`` a row hitting any unique constraint (a schedule's tick that already has
    its run) is skipped too, and its own id is left out of the result.
    """
    if not rows:
        return []
    keys = {row.key for row in rows if row.key is not None}
    if skip_conflicts:
        stored = _insert_new(rows)
        ids = [row.id for row in rows if row.id in stored]
    elif keys:
        # A savepoint, so that a refused reuse leaves nothing behind even in autocommit.
        with transaction.atomic():
            ProcedureRun._writer.bulk_create(rows, ignore_conflicts=True)
            keyed = {key: (pid, type_name) for key, pid, type_name in
                     ProcedureRun._writer.filter(key__in=keys).values_list("key", "id", "type_name")}
            _refuse_other_types(rows, keyed)
        ids = [keyed[row.key][0] if row.key is not None else row.id for row in rows]
    else:
        ProcedureRun._writer.bulk_create(rows)
        ids = [row.id for row in rows]
    created = {row.id for row in rows} & set(ids)
    notify({row.queue for row in rows if row.id in created})
    for row in rows:
        if row.id in created:
            send_after_commit(signals.procedure_submitted, procedure_id=row.id, type_name=row.type_name)
    return ids


def _refuse_other_types(rows: list[ProcedureRun], stored: dict[str, tuple[uuid.UUID, str]]) -> None:
    """``KeyConflict`` when a row's key already names a procedure of another type."""
    for row in rows:
        if row.key is None:
            continue
        pid, type_name = stored[row.key]
        if type_name != row.type_name:
            raise KeyConflict(f"the idempotency key {row.key!r} already names procedure {pid} of type {type_name}, "
                              f"not {row.type_name}; a key stands for one piece of work of one type: use another "
                              f"key (e.g. prefixed with the type), or get_handle({str(pid)!r}) for that procedure",
                              key=row.key, existing_id=pid, existing_type=type_name)


def _insert_new(rows: list[ProcedureRun]) -> set[uuid.UUID]:
    """Insert ``rows``, skipping those that hit a unique constraint; returns the ids inserted."""
    if not is_postgresql():
        ProcedureRun._writer.bulk_create(rows, ignore_conflicts=True)
        return set(ProcedureRun._writer.filter(id__in=[row.id for row in rows]).values_list("id", flat=True))
    # bulk_create prepares every field of every row and cannot say which rows it skipped: one JSON
    # parameter and RETURNING cost a fraction of that (a tick inserts thousands of runs).
    fields = ProcedureRun._meta.concrete_fields
    select, params = json_rows(fields, rows)
    quote = connection.ops.quote_name
    columns = ", ".join(quote(f.column) for f in fields)
    with connection.cursor() as cursor:
        cursor.execute(f"INSERT INTO {quote(ProcedureRun._meta.db_table)} ({columns}) {select} "
                       f"ON CONFLICT DO NOTHING RETURNING {quote(ProcedureRun._meta.pk.column)}", params)
        return {row[0] for row in cursor.fetchall()}


def _json_default(value: object) -> str:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    raise TypeError(f"cannot pass a {type(value).__name__} through JSON to PostgreSQL")


def json_rows(fields: Sequence[Field[Any, Any]], objs: Sequence[Model]) -> tuple[str, list[Any]]:
    """A PostgreSQL ``SELECT`` of the ``fields`` of ``objs``, one row per object, and its parameters.

    A column with the same value in every object is one parameter; the others come from one jsonb
    parameter holding a JSON array per object (a run has over forty columns, a handful of which differ
    between a tick's runs). Columns are cast to their fields' types, varchar as text so that an
    INSERT still rejects an overlong value rather than the cast truncating it.
    """
    get = attrgetter(*(f.attname for f in fields))
    rows = [get(obj) for obj in objs] if len(fields) > 1 else [(get(obj),) for obj in objs]
    items: list[Any] = []
    constants: list[Any] = []
    varying: list[Any] = []
    for f, column in zip(fields, zip(*rows, strict=True), strict=True):
        db_type = f.db_type(connection) or "text"
        cast = "text" if db_type.startswith("varchar") else db_type
        first = column[0]
        if db_type == "jsonb":
            # Compared as JSON: {"n": 1} == {"n": True} in Python.
            text = None if first is None else dumps(first)
            if all(v == first for v in column) and all(
                    (None if v is None else dumps(v)) == text for v in column):
                items.append("%s::jsonb")
                constants.append(text)
            else:
                items.append(f"nullif(r->{len(varying)}, 'null'::jsonb)")  # None is SQL NULL, as the ORM writes it
                varying.append(column)
        elif all(v == first for v in column):
            items.append(f"%s::{cast}")
            constants.append(first)
        else:
            items.append(f"(r->>{len(varying)})::{cast}")
            varying.append(column)
    payload = dumps(list(zip(*varying, strict=True)) if varying else [[] for _ in objs], default=_json_default)
    return f"SELECT {', '.join(items)} FROM jsonb_array_elements(%s::jsonb) AS r", [*constants, payload]


class Submitted(NamedTuple):
    """A submitted procedure: its id, and whether the submit inserted it (False: its key named an existing one)."""

    id: uuid.UUID
    created: bool


def submit_runs(runs: Sequence[NewRun], *, now: datetime, parent: Any = None) -> list[Submitted]:
    """Insert one ``ProcedureRun`` per run (hanging under ``parent``) with one INSERT; existing idempotency keys
    insert nothing.

    Returns, in order, each procedure's id and whether this call inserted it.
    ``ValueError`` for a parent that does not exist or is final, ``KeyConflict``
    (a ``ValueError``) for a key that names a procedure of another type;
    nothing is inserted then. The runs were checked where they were made
    (``django_procedures.submitting``).
    """
    # With a parent, its write and the children's insert commit together (see _parent).
    with tables_required(), transaction.atomic() if parent is not None else nullcontext():
        # (tables_required: an unmigrated database is said so, rather than "relation ... does not exist")
        tree = _parent(parent)
        rows = [row_of(run, now=now, parent=tree) for run in runs]
        # A row carries a fresh id: the id that comes back is its own only if this row was inserted.
        return [Submitted(pid, pid == row.id) for pid, row in zip(insert(rows), rows, strict=True)]
