"""Flow control in the claim: taking limit slots for due procedures, freeing them when their lease ends.

A limit name's row in ``LimitUse`` counts the leases holding it (``in_use``) and keeps the times of its recent
claims (rates, a sliding-window log; see ``policy.limits``). Every transaction that writes a name's row first
takes a transaction-scoped advisory lock on the name: a claim tries it without waiting (a name another worker
is deciding about right now is passed by, never waited for), the end of a lease waits for it. So decisions
about one name are serial across the fleet, each reads the row as the previous one committed it, and never
more than ``max`` leases hold a concurrency name: exact under READ COMMITTED and through PgBouncer in
transaction mode (no session state; the locks end with the transaction).

Only runs with limits (``limits`` not NULL, or a queue in ``PROCEDURES["QUEUES"]``) come here: the claim's
fast path reads an index of unlimited rows only, so limited rows never delay unlimited work. A row over a limit
stays ``ready`` and is passed by; the queue it waits in is noted on the full limit's row, and the transaction
that frees a slot NOTIFYs that queue, so its workers claim at once.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.db import transaction
from django.db.models import F, Q
from django.db.models.functions import Greatest

from django_procedures.conf import conf
from django_procedures.models import Lease, LimitUse, ProcedureRun
from django_procedures.policy import limits as rules
from django_procedures.policy.limits import CONCURRENCY, Limit, Use
from django_procedures.policy.status import CLAIMABLE
from django_procedures.store.db import advisory_xact_locks, bound_cursor, is_postgresql, sql_list, text_array
from django_procedures.store.kinds import VERSION_OK, Kinds
from django_procedures.store.notify import notify

logger = logging.getLogger("django_procedures.limits")

#: Claims passed by because a limit was full, by limit name, in this process (the worker's metrics read it).
deferrals: Counter[str] = Counter()
#: Most limited candidates one claim looks at per round: a claim's work stays bounded however many wait.
SCAN = 64
_ROUNDS = 3


def configured_queue_limits() -> dict[str, list[Limit]]:
    """``PROCEDURES["QUEUES"]`` as limits per queue (checked by the system checks; a bad entry raises here)."""
    return rules.queue_limits(conf.QUEUES)


def _name_locks(names: Iterable[str], *, wait: bool) -> bool:
    """Serialise the writes of limit rows ``names`` between transactions (advisory locks, sorted; PostgreSQL)."""
    return advisory_xact_locks("django_procedures.limit:", names, wait=wait)


@dataclass(frozen=True)
class Granted:
    """A due procedure that took its limits in this claim: ``held`` are the concurrency names it holds."""

    id: uuid.UUID
    held: list[str]


def _epoch(now: datetime) -> float:
    return now.timestamp()


# A limited candidate is passed by in SQL when one of its own limits is known full (its row as committed, or
# as this transaction wrote it): a claim never rereads, round after round, rows whose limit is full.
_PG_FULL = """
    EXISTS (SELECT FROM jsonb_array_elements(r.limits) AS e JOIN {limit} AS l ON l.name = e->>0
            WHERE (e->>1 = 'concurrency' AND l.in_use >= (e->>2)::integer)
               OR (e->>1 = 'rate' AND jsonb_array_length(l.times) >= (e->>2)::integer
                   AND (l.times->>(jsonb_array_length(l.times) - (e->>2)::integer))::float8
                       > %(epoch)s - (e->>3)::float8))
"""
_PG_LIMITED_DUE = f"""
    SELECT r.id, r.limits, r.queue FROM {{run}} AS r
    WHERE status IN ({sql_list(CLAIMABLE)}) AND run_at <= %(now)s AND (type_name || '') = ANY(%(types)s::text[])
      {VERSION_OK} {{queue_filter}} AND NOT waiting_for_keys AND (keys_held OR lock_keys = '[]'::jsonb)
      AND {{which}} AND NOT id = ANY(%(skip)s::uuid[]) AND NOT (queue = ANY(%(full_queues)s::text[]))
    ORDER BY priority DESC, run_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
"""


def _candidates(kinds: Kinds, queues: Sequence[str] | None, limited_queues: Sequence[str], full_queues: list[str],
                now: datetime, skip: list[uuid.UUID]) -> list[tuple[uuid.UUID, Any, str]]:
    """Due limited rows in claim order, locked: own limits first, then rows limited only by their queue."""
    if not is_postgresql():
        due = (ProcedureRun._writer.claimable(now).filter(kinds.q(), waiting_for_keys=False)
               .filter(Q(keys_held=True) | Q(lock_keys=[]))
               .filter(Q(limits__isnull=False) | Q(queue__in=limited_queues))
               .exclude(id__in=skip).exclude(queue__in=full_queues))
        if queues:
            due = due.filter(queue__in=queues)
        return list(due.values_list("id", "limits", "queue")[:SCAN])
    found: list[tuple[uuid.UUID, Any, str]] = []
    whiches = [f"r.limits IS NOT NULL AND NOT {_PG_FULL.format(limit=LimitUse._meta.db_table)}"]
    if limited_queues:  # (the fast path leaves these queues' unlimited rows to this pass)
        whiches.append("r.limits IS NULL AND queue = ANY(%(limited_queues)s::text[])")
    for which in whiches:
        sql = _PG_LIMITED_DUE.format(run=ProcedureRun._meta.db_table, which=which,
                                     queue_filter="AND (queue || '') = ANY(%(queues)s::text[])" if queues else "")
        with bound_cursor() as cursor:
            cursor.execute(sql, {"now": now, **kinds.params(), "queues": text_array(queues or ()),
                                 "limited_queues": text_array(limited_queues), "full_queues": text_array(full_queues),
                                 "skip": skip, "limit": SCAN, "epoch": _epoch(now)})
            found += [(pid, json.loads(lim) if isinstance(lim, str) else lim, queue)
                      for pid, lim, queue in cursor.fetchall()]
    return found


def _uses(names: Iterable[str]) -> dict[str, Use]:
    return {name: Use(in_use, tuple(times or ())) for name, in_use, times in
            LimitUse._writer.filter(name__in=list(names)).values_list("name", "in_use", "times")}


def _full_queues(by_queue: Mapping[str, list[Limit]], now: datetime) -> list[str]:
    """Queues whose own limits are full as last committed (read without locks: only to skip their rows)."""
    uses = _uses(limit.name for limits in by_queue.values() for limit in limits)
    return [queue for queue, limits in by_queue.items() if rules.admits(limits, uses, _epoch(now)) is not None]


def grant_due(*, kinds: Kinds, queues: Sequence[str] | None, limit: int, now: datetime) -> list[Granted]:
    """In the claim's transaction: up to ``limit`` due limited procedures that took their limits, in claim order.

    One over a limit stays ``ready`` and is passed by (its queue noted on the limit, to be woken); one whose
    limit another transaction is deciding about right now is left for the next claim.
    """
    by_queue = configured_queue_limits()
    if queues:
        by_queue = {q: v for q, v in by_queue.items() if q in queues}
    limited_queues = sorted(by_queue)
    full_queues = _full_queues(by_queue, now) if by_queue else []
    granted: list[Granted] = []
    skip: list[uuid.UUID] = []
    for _ in range(_ROUNDS):
        candidates = _candidates(kinds, queues, limited_queues, full_queues, now, skip)
        if not candidates:
            break
        for pid, stored, queue in candidates:
            if len(granted) >= limit:
                return granted
            skip.append(pid)
            limits = _parsed(pid, stored) + by_queue.get(queue, [])
            if not limits:
                granted.append(Granted(pid, []))
                continue
            names = {lim.name for lim in limits}
            if not _name_locks(names, wait=False):
                continue  # another claim is deciding about one of these names: the next claim sees it
            uses = _uses(names)
            full = rules.admits(limits, uses, _epoch(now))
            if full is not None:
                _note_waiting(limits, uses, queue, now)
                logger.debug("procedure %s deferred: %s", pid, full)
                deferrals[full.split(": ", 1)[0]] += 1
                continue
            after = rules.taken(limits, uses, _epoch(now))
            _write(limits, after)
            if rules.admits(limits, after, _epoch(now)) is not None:  # full now: whoever is next waits, and is
                _note_waiting(limits, after, queue, now)  # woken in this queue when a slot frees (or at next_at)
            granted.append(Granted(pid, sorted({lim.name for lim in limits if lim.kind == CONCURRENCY})))
    return granted


def _parsed(pid: uuid.UUID, stored: Any) -> list[Limit]:
    """A row's stored limits; ones that no longer parse (written by hand, or before a check was added) are
    ignored with a warning rather than stopping every claim."""
    try:
        return rules.parse(stored)
    except (TypeError, ValueError) as error:
        logger.warning("procedure %s: its stored limits %r are ignored: %s", pid, stored, error)
        return []


def _write(limits: list[Limit], after: Mapping[str, Use]) -> None:
    """The rows of ``limits`` as ``after`` says (this transaction holds their names' locks: no other writer)."""
    maxes = {lim.name: lim.amount for lim in limits if lim.kind == CONCURRENCY}
    pers = {lim.name: lim.per_seconds for lim in limits if lim.kind != CONCURRENCY}
    for name in sorted({lim.name for lim in limits}):
        use = after[name]
        values = {"in_use": use.in_use, "times": list(use.times), "max": maxes.get(name), "per": pers.get(name),
                  "next_at": None}
        if not LimitUse._writer.filter(name=name).update(**values):
            LimitUse._writer.create(name=name, waiting=[], **values)


def _note_waiting(limits: list[Limit], uses: Mapping[str, Use], queue: str, now: datetime) -> None:
    """Note ``queue`` on the full limits' rows: freeing a slot of one wakes that queue's workers; a full rate
    notes when it next admits a claim (``next_at``, which idle workers wait for)."""
    epoch = _epoch(now)
    for limit in limits:
        if rules.admits([limit], uses, epoch) is None:
            continue
        at = rules.next_admission([limit], uses, epoch)
        next_at = datetime.fromtimestamp(at, tz=UTC) if at is not None else None
        row = LimitUse._writer.filter(name=limit.name).values_list("waiting", "next_at").first()
        if row is None:
            LimitUse._writer.create(name=limit.name, in_use=0, times=[], waiting=[queue], next_at=next_at)
        elif queue not in row[0] or row[1] != next_at:
            LimitUse._writer.filter(name=limit.name).update(waiting=sorted({*row[0], queue}), next_at=next_at)


def keys_first(granted: list[uuid.UUID], limited_queues: Sequence[str]) -> list[uuid.UUID]:
    """Of the procedures just granted their lock keys, those without limits; the others keep their keys
    (``keys_held``) and stay ready for the limited pass, which takes their limits (this claim, or a later one)."""
    limited = Q(limits__isnull=False) | Q(queue__in=limited_queues) if limited_queues else Q(limits__isnull=False)
    held = list(ProcedureRun._writer.filter(limited, id__in=granted).values_list("id", flat=True))
    if not held:
        return granted
    ProcedureRun._writer.filter(id__in=held).update(keys_held=True)
    return [pid for pid in granted if pid not in set(held)]


def hold(lease_keys: Iterable[tuple[uuid.UUID, int, list[str]]]) -> None:
    """Record on the new leases the concurrency names each holds (freed when the lease closes)."""
    for pid, token, names in lease_keys:
        if names:
            Lease._writer.filter(procedure_id=pid, token=token).update(limits=names)


def free(names: Iterable[str]) -> None:
    """In the transaction that ends a lease: give back one slot of each of ``names``; wake the waiting queues."""
    names = sorted(set(names))
    if not names:
        return
    _name_locks(names, wait=True)  # after any claim deciding about these names right now
    waiting = {q for queues in LimitUse._writer.filter(name__in=names).values_list("waiting", flat=True)
               for q in queues or ()}
    LimitUse._writer.filter(name__in=names).update(in_use=Greatest(F("in_use") - 1, 0), waiting=[])
    notify(waiting)


def tidy(now: datetime) -> int:
    """Delete rows that count nothing (no lease holds a slot, no claim time a rate still counts): by the sweep.

    A row another transaction is deciding about is left alone (its name's lock is tried, never waited for).
    """
    epoch = _epoch(now)
    idle = LimitUse._writer.filter(in_use=0).values_list("name", "times", "per")[:500]
    deleted = 0
    for name, times, per in idle:
        if times and max(times) > epoch - (per or 0):
            continue
        with transaction.atomic():
            if _name_locks([name], wait=False):
                deleted += LimitUse._writer.filter(name=name, in_use=0).delete()[0]
    return deleted


__all__ = ["SCAN", "Granted", "configured_queue_limits", "deferrals", "free", "grant_due", "hold", "keys_first",
           "tidy"]
