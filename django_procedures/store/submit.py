"""Submitting procedures in the caller's transaction, and inserting a parent's children."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from datetime import datetime, timedelta
from operator import attrgetter
from typing import TYPE_CHECKING, Any, NamedTuple

from django.db import connection, transaction
from django.db.models import F, Field, Model

from django_procedures import clock, signals
from django_procedures.conf import conf
from django_procedures.exceptions import KeyConflict
from django_procedures.models import ProcedureRun
from django_procedures.policy import options
from django_procedures.policy.ids import new_id
from django_procedures.policy.state import StateTooLarge, check_state, dumps, encode_state, find_problem, size_problem
from django_procedures.policy.status import FINAL
from django_procedures.store.db import is_postgresql
from django_procedures.store.events import send_after_commit
from django_procedures.store.notify import notify
from django_procedures.store.schema import tables_required
from django_procedures.trace_context import capture

if TYPE_CHECKING:
    from django_procedures.procedure import Procedure


@dataclass(frozen=True)
class Parent:
    """Where new rows hang in a tree."""

    id: uuid.UUID
    root_id: uuid.UUID
    depth: int
    suspension: int = 0


def resolve_run_at(run_after: datetime | timedelta | float | None, now: datetime) -> datetime:
    """When a procedure submitted at ``now`` with ``run_after`` becomes due (see ``policy.options.run_at``)."""
    return options.run_at(run_after, now)


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


def lock_keys_of(cls: type[Procedure], state: dict[str, Any]) -> list[list[str]]:
    """The ``[[name, mode], ...]`` a procedure with ``state`` will hold, as stored on its row."""
    if not cls.declares_lock_keys:
        return []
    instance = cls.__new__(cls)
    instance.state = state
    keys = instance.lock_keys() or []
    stored: dict[str, str] = {}
    for key in keys:
        name, mode = getattr(key, "name", None), getattr(key, "mode", None)
        if not isinstance(name, str) or not name or mode not in ("exclusive", "shared"):
            raise TypeError(f"{cls.__qualname__}.lock_keys() must return LockKey.exclusive(name) or "
                            f"LockKey.shared(name) values; got {key!r}")
        problem = find_problem(name, f"the lock key name {name!r}")
        if problem:
            raise TypeError(f"{cls.__qualname__}.lock_keys() returned a key that cannot be stored: {problem}")
        if len(name) > 255:
            raise TypeError(f"{cls.__qualname__}.lock_keys() returned a key name of {len(name)} characters; "
                            "key names are at most 255 characters (hash long ones)")
        if stored.get(name) != "exclusive":  # asking twice keeps the stronger mode
            stored[name] = mode
    return [[name, stored[name]] for name in sorted(stored)]


def build_row(cls: type[Procedure], state: Mapping[str, Any] | None, *, key: str | None, queue: str | None,
              priority: int | None, run_after: datetime | timedelta | float | None, now: datetime,
              parent: Parent | None, where: str = "state", position: int = 0) -> ProcedureRun:
    """An unsaved ``ProcedureRun`` for ``cls``; ``TypeError`` if the state is not strict JSON.

    The options were checked by the caller (``policy.options``), once per call rather than per row.
    """
    if cls.abstract:
        raise TypeError(f"{cls.__qualname__} is abstract; submit one of its concrete subclasses")
    if state is not None and not isinstance(state, Mapping):
        raise TypeError(f"state must be a dict (a JSON object); got {type(state).__name__}")
    plain = dict(state or {})
    check_state(plain, where)
    problem = size_problem(encode_state(plain), conf.MAX_STATE_BYTES, where)
    if problem:
        raise StateTooLarge(problem)
    values = dict(
        id=new_id(), type_name=cls.type_name, version=cls.version, state=plain, step_name=cls.steps[0].name,
        queue=queue if queue is not None else cls.queue or conf.DEFAULT_QUEUE,
        priority=cls.priority if priority is None else priority,
        key=key, run_at=resolve_run_at(run_after, now), created_at=now, lock_keys=lock_keys_of(cls, plain),
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


def submit_many(
    cls: type[Procedure],
    states: Sequence[Mapping[str, Any] | None],
    *,
    keys: Sequence[str | None] | None = None,
    queue: str | None = None,
    priority: int | None = None,
    run_after: datetime | timedelta | float | None = None,
    parent: Any = None,
) -> list[Submitted]:
    """Insert one ``ProcedureRun`` per state with one INSERT; existing idempotency keys insert nothing.

    Returns, in order, each procedure's id and whether this call inserted it
    (``Procedure.submit`` makes the handles).

    Checks every argument before writing anything: ``TypeError`` for a state
    that is not strict JSON or an option of the wrong type, ``ValueError`` for
    an option out of range, an empty key or a key given twice, and
    ``KeyConflict`` (a ``ValueError``) for a key that names a procedure of
    another type (nothing is inserted then).
    """
    single = len(states) == 1 and keys is not None and len(keys) == 1
    if keys is None:
        keys = [None] * len(states)
    if len(keys) != len(states):
        raise ValueError(f"got {len(states)} states but {len(keys)} keys; pass one key (or None) per state")
    queue, priority = options.check_queue(queue), options.check_priority(priority)
    run_after = options.check_run_after(run_after)
    for i, key in enumerate(keys):
        options.check_key(key, "key" if single else f"keys[{i}]")
    now = clock.now()
    # With a parent, its write and the children's insert commit together (see _parent).
    with tables_required(), transaction.atomic() if parent is not None else nullcontext():
        # (tables_required: an unmigrated database is said so, rather than "relation ... does not exist")
        tree = _parent(parent)
        rows = [
            build_row(cls, state, key=key, queue=queue, priority=priority, run_after=run_after, now=now, parent=tree,
                      where="state" if len(states) == 1 else f"states[{i}]")
            for i, (state, key) in enumerate(zip(states, keys, strict=True))
        ]
        # A row carries a fresh id: the id that comes back is its own only if this row was inserted.
        return [Submitted(pid, pid == row.id) for pid, row in zip(insert(rows), rows, strict=True)]
