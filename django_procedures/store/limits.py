"""Flow control in the claim: taking limit slots for due procedures, freeing them when their lease ends.

A limit is a set of slot rows (``LimitSlot``): ``max`` of a concurrency name, ``count`` of a rate. A claim
takes free slots with ``FOR UPDATE SKIP LOCKED`` and writes them with the leases that hold them, in its own
transaction: claims of one name each take different slots and none waits for another, and since a name's
slots are unique and numbered below its limit, never more than ``max`` leases hold a concurrency name and
never more than ``count`` claims fall in any window of ``per`` (a rate slot taken at *t* is free again at
*t* + ``per``: a sliding-window log of the last ``count`` claims). Exact under READ COMMITTED and through
PgBouncer in transaction mode (no session state). A slot another transaction holds locked is passed by, which
only ever admits fewer. Slots are made as a name first needs them; the sweep deletes the slots of names nothing
holds, so thousands of unused per-customer names cost nothing.

Only runs with limits (``limits`` not NULL, or a queue in ``PROCEDURES["QUEUES"]``) come here: the claim's
fast path reads an index of unlimited rows only, so limited rows never delay unlimited work. A row over a limit
stays ``ready`` and is passed by in SQL. Freeing a slot wakes the queues noted as waiting for its name
(``LimitUse.waiting``, noted by idle workers); the worker whose lease ended claims again at once itself.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db.models import Q

from django_procedures.conf import conf
from django_procedures.models import Lease, LimitSlot, LimitUse, ProcedureRun
from django_procedures.policy import limits as rules
from django_procedures.policy.limits import CONCURRENCY, RATE, Limit
from django_procedures.store import limit_sql
from django_procedures.store.db import bound_cursor, is_postgresql, text_array
from django_procedures.store.kinds import Kinds
from django_procedures.store.notify import notify

logger = logging.getLogger("django_procedures.limits")

#: Claims passed by because a limit was full, by limit name, in this process (the worker's metrics read it).
deferrals: Counter[str] = Counter()
#: Most limited candidates one claim locks per round: a claim's work stays bounded however many wait.
SCAN = 64
_ROUNDS = 2

Key = tuple[str, bool]  # (name, is a rate)
_LONG_AGO = datetime(1970, 1, 1, tzinfo=UTC)  # a new rate slot's free_at: free


def configured_queue_limits() -> dict[str, list[Limit]]:
    """``PROCEDURES["QUEUES"]`` as limits per queue (checked by the system checks; a bad entry raises here)."""
    return rules.queue_limits(conf.QUEUES)


@dataclass(frozen=True)
class Granted:
    """A due procedure that took its limits in this claim: ``held`` are the concurrency names it holds, ``slots``
    the slots it took, ``(name, rate, slot, per_seconds)``."""

    id: uuid.UUID
    held: list[str]
    slots: list[tuple[str, bool, int, float]] = field(default_factory=list)


def _parsed(pid: uuid.UUID, stored: Any) -> list[Limit]:
    """A row's stored limits; ones that no longer parse (written by hand, or before a check was added) are
    ignored with a warning rather than stopping every claim."""
    try:
        return rules.parse(json.loads(stored) if isinstance(stored, str) else stored)
    except (TypeError, ValueError) as error:
        logger.warning("procedure %s: its stored limits %r are ignored: %s", pid, stored, error)
        return []


def _queue_limits_json(by_queue: dict[str, list[Limit]]) -> str:
    return json.dumps({queue: [limit.stored() for limit in limits] for queue, limits in by_queue.items()})


def grant_due(*, kinds: Kinds, queues: Sequence[str] | None, limit: int, now: datetime) -> list[Granted]:
    """In the claim's transaction: up to ``limit`` due limited procedures that took their limits' slots (not
    written yet: the lease statement writes them), in claim order. One over a limit stays ``ready``."""
    by_queue = configured_queue_limits()
    if queues:
        by_queue = {q: v for q, v in by_queue.items() if q in queues}
    granted: list[Granted] = []
    skip: list[uuid.UUID] = []
    taken: list[int] = []  # ids of the slots this claim took: free until the lease statement writes them
    whiches = [limit_sql.OWN] + ([limit_sql.QUEUE_ONLY] if by_queue else [])
    for which in whiches:
        for _ in range(_ROUNDS):
            wanted = limit - len(granted)
            if wanted <= 0:
                return granted
            rows, pools = _candidates(which, kinds, queues, by_queue, now, skip, min(SCAN, 2 * wanted + 2),
                                      wanted, taken)
            skip += [pid for pid, _ in rows]
            granted += _take(rows, wanted, now, taken, pools)
            if len(rows) < min(SCAN, 2 * wanted + 2):
                break
    return granted


Rows = list[tuple[uuid.UUID, list[Limit]]]


def _candidates(which: str, kinds: Kinds, queues: Sequence[str] | None, by_queue: dict[str, list[Limit]],
                now: datetime, skip: list[uuid.UUID], n: int, wanted: int,
                taken: list[int]) -> tuple[Rows, dict[Key, list[int]] | None]:
    """Due limited rows in claim order, locked, with the limits each takes (its own, then its queue's); on
    PostgreSQL with the free slots taken for them by the same statement (None: not taken yet)."""
    if is_postgresql():
        with bound_cursor() as cursor:
            cursor.execute(limit_sql.candidates(which, bool(queues)), {
                "now": now, **kinds.params(), "queues": text_array(queues or ()), "skip": skip, "limit": n,
                "queue_limits": _queue_limits_json(by_queue), "limited_queues": text_array(sorted(by_queue)),
                "wanted": wanted, "taken": taken})
            found = cursor.fetchall()
        pools: dict[Key, list[int]] = defaultdict(list)
        picked = []
        for pid, stored, queue, priority, run_at, name, rate, slot, pk in found:
            if pid is None:
                pools[(name, rate)].append(slot)
                taken.append(pk)
            else:
                picked.append((-priority, run_at, pid, stored, queue))
        picked.sort(key=lambda p: (p[0], p[1]))
        return [(pid, _parsed(pid, stored) + by_queue.get(queue, [])) for _, _, pid, stored, queue in picked], pools
    due = (ProcedureRun._writer.claimable(now).filter(kinds.q(), waiting_for_keys=False)
           .filter(Q(keys_held=True) | Q(lock_keys=[])).exclude(id__in=skip))
    due = due.filter(limits__isnull=False) if which == limit_sql.OWN else due.filter(
        limits__isnull=True, queue__in=list(by_queue))
    if queues:
        due = due.filter(queue__in=queues)
    full: dict[Limit, bool] = {}  # rows over a full limit are passed by, as PostgreSQL's statement does
    rows = []
    for pid, stored, queue in due.values_list("id", "limits", "queue").iterator():
        limits = _parsed(pid, stored) + by_queue.get(queue, [])
        if not any(full.setdefault(lim, _full(lim, now)) for lim in limits):
            rows.append((pid, limits))
        if len(rows) >= n:
            break
    return rows, None


def _take(rows: Rows, wanted: int, now: datetime, taken: list[int],
          pools: dict[Key, list[int]] | None) -> list[Granted]:
    """Take slots for ``rows`` (in claim order) and hand them out: each row gets one of every limit it has, or
    none and is passed by. At most ``wanted`` rows are granted."""
    demand: Counter[Key] = Counter()
    amounts: dict[Key, int] = {}
    for _, limits in rows:
        for lim in limits:
            key = (lim.name, lim.kind == RATE)
            demand[key] += 1
            amounts[key] = min(amounts.get(key, lim.amount), lim.amount)
    if not demand:
        return [Granted(pid, []) for pid, _ in rows[:wanted]]
    wants = {key: min(n, wanted) for key, n in demand.items()}
    if pools is None:
        pools = _free_slots(wants, amounts, now, taken)
    short = {key: n - len(pools[key]) for key, n in wants.items() if len(pools[key]) < n}
    if short:
        for key, slot, pk in _make_slots(short, amounts, rows):
            pools[key].append(slot)
            taken.append(pk)
    granted: list[Granted] = []
    for pid, limits in rows:
        if len(granted) >= wanted:
            break
        keys = [(lim.name, lim.kind == RATE) for lim in limits]
        full = [key for key in keys if not pools[key]]
        if full:
            deferrals[full[0][0]] += 1
            logger.debug("procedure %s deferred: %s is full", pid, full[0][0])
            continue
        slots = [(lim.name, lim.kind == RATE, pools[(lim.name, lim.kind == RATE)].pop(0), lim.per_seconds)
                 for lim in limits]
        granted.append(Granted(pid, sorted({lim.name for lim in limits if lim.kind == CONCURRENCY}), slots))
    return granted


def _free_slots(wants: dict[Key, int], amounts: dict[Key, int], now: datetime,
                taken: list[int]) -> dict[Key, list[int]]:
    """Up to ``wants[key]`` free slots of each name, locked by this transaction (PostgreSQL) or taken by the
    conditional write that holds them (SQLite: one writer at a time)."""
    pools: dict[Key, list[int]] = defaultdict(list)
    keys = sorted(wants)
    if is_postgresql():
        with bound_cursor() as cursor:
            cursor.execute(limit_sql.statement("take"), {
                "names": [k[0] for k in keys], "rates": [k[1] for k in keys],
                "amounts": [amounts[k] for k in keys], "wants": [wants[k] for k in keys], "now": now,
                "taken": taken})
            for name, rate, slot, pk in cursor.fetchall():
                pools[(name, rate)].append(slot)
                taken.append(pk)
        return pools
    for name, rate in keys:
        free = LimitSlot._writer.filter(name=name, rate=rate, slot__lt=amounts[(name, rate)])
        free = free.filter(free_at__lte=now).order_by("free_at") if rate else free.filter(
            holder_id__isnull=True).order_by("slot")
        for slot, pk in free.exclude(id__in=taken).values_list("slot", "id")[:wants[(name, rate)]]:
            pools[(name, rate)].append(slot)
            taken.append(pk)
    return pools


def _make_slots(short: dict[Key, int], amounts: dict[Key, int],
                rows: list[tuple[uuid.UUID, list[Limit]]]) -> list[tuple[Key, int, int]]:
    """Make up to ``short[key]`` more slots of names that have fewer than their limit (with each new name's
    ``LimitUse`` row); returns the ones made, which this transaction holds."""
    heads: dict[str, tuple[int | None, float | None]] = {}
    for _, limits in rows:
        for lim in limits:
            top, per = heads.get(lim.name, (None, None))
            heads[lim.name] = (lim.amount, per) if lim.kind == CONCURRENCY else (top, lim.per_seconds)
    keys = sorted(short)
    if is_postgresql():
        names = sorted(heads)
        with bound_cursor() as cursor:
            cursor.execute(limit_sql.statement("make"), {
                "names": [k[0] for k in keys], "rates": [k[1] for k in keys],
                "amounts": [amounts[k] for k in keys], "shorts": [short[k] for k in keys],
                "head_names": names, "head_maxes": [heads[n][0] for n in names],
                "head_pers": [heads[n][1] for n in names]})
            return [((name, rate), slot, pk) for name, rate, slot, pk in cursor.fetchall()]
    made = []
    for name, rate in keys:
        have = set(LimitSlot._writer.filter(name=name, rate=rate).values_list("slot", flat=True))
        new = [n for n in range(amounts[(name, rate)]) if n not in have][:short[(name, rate)]]
        LimitSlot._writer.bulk_create(
            LimitSlot(name=name, rate=rate, slot=n, free_at=_LONG_AGO if rate else None) for n in new)
        if new:
            top, per = heads[name]
            LimitUse._writer.get_or_create(name=name, defaults={"max": top, "per": per, "waiting": []})
        made += [((name, rate), n, pk) for n, pk in
                 LimitSlot._writer.filter(name=name, rate=rate, slot__in=new).values_list("slot", "id")]
    return made


def hold_params(granted: Iterable[Granted]) -> dict[str, Any]:
    """The parameters of the claim statement's ``limit_sql.HOLD`` part and its leases' ``limits``."""
    granted = list(granted)
    slots = [(g.id, *s) for g in granted for s in g.slots]
    held = [g for g in granted if g.held]
    return {"slot_ids": [s[0] for s in slots], "slot_names": [s[1] for s in slots],
            "slot_rates": [s[2] for s in slots], "slot_numbers": [s[3] for s in slots],
            "slot_pers": [s[4] for s in slots],
            "lease_ids": [g.id for g in held], "lease_names": [json.dumps(g.held) for g in held]}


def hold(granted: Iterable[Granted], tokens: dict[uuid.UUID, int], now: datetime) -> None:
    """Write the slots taken with the leases ``tokens`` that hold them (SQLite; PostgreSQL writes them in the
    claim statement)."""
    for g in granted:
        token = tokens.get(g.id)
        if token is None:
            continue
        for name, rate, slot, per in g.slots:
            values: dict[str, Any] = ({"free_at": now + timedelta(seconds=per)} if rate
                                      else {"holder_id": g.id, "holder_token": token})
            LimitSlot._writer.filter(name=name, rate=rate, slot=slot).update(**values)
        if g.held:
            Lease._writer.filter(procedure_id=g.id, token=token).update(limits=g.held)


def keys_first(granted: list[uuid.UUID], limited_queues: Sequence[str]) -> list[uuid.UUID]:
    """Of the procedures just granted their lock keys, those without limits; the others keep their keys
    (``keys_held``) and stay ready for the limited pass, which takes their limits (this claim, or a later one)."""
    limited = Q(limits__isnull=False) | Q(queue__in=limited_queues) if limited_queues else Q(limits__isnull=False)
    held = list(ProcedureRun._writer.filter(limited, id__in=granted).values_list("id", flat=True))
    if not held:
        return granted
    ProcedureRun._writer.filter(id__in=held).update(keys_held=True)
    return [pid for pid in granted if pid not in set(held)]


def free(leases: Sequence[tuple[Any, int]], *, own_queue: str | None = None) -> None:
    """In the transaction that ends ``leases`` ``(procedure_id, token)``: give back their concurrency slots and
    wake the queues noted as waiting for those names. ``own_queue``: the queue of a worker that claims again
    at once (its lease ended with the step's outcome), so a note of that queue alone is left, not woken."""
    if not leases:
        return
    if is_postgresql():
        with bound_cursor() as cursor:
            cursor.execute(limit_sql.statement("free"), {
                "ids": [uuid.UUID(str(pid)) for pid, _ in leases], "tokens": [token for _, token in leases],
                "own": json.dumps([own_queue] if own_queue is not None else None)})
            notify(q for (q,) in cursor.fetchall() if q != own_queue)
        return
    freed = Q()
    for pid, token in leases:
        freed |= Q(holder_id=pid, holder_token=token)
    names = set(LimitSlot._writer.filter(freed).values_list("name", flat=True))
    LimitSlot._writer.filter(freed).update(holder_id=None, holder_token=None)
    woken = LimitUse._writer.filter(name__in=names).exclude(waiting=[])
    if own_queue is not None:
        woken = woken.exclude(waiting=[own_queue])
    queues = {q for waiting in woken.values_list("waiting", flat=True) for q in waiting}
    woken.update(waiting=[])
    notify(q for q in queues if q != own_queue)


@dataclass(frozen=True)
class Waiting:
    """What idle workers learn of limited work: whether some could be claimed now, and when the first full rate
    among it admits a claim again."""

    ready: bool = False
    rate_at: datetime | None = None


def waiting(kinds: Kinds, queues: Sequence[str] | None, now: datetime) -> Waiting:
    """When idle (a claim came back short): note the queues waiting for full concurrency names, so a slot
    freeing wakes them, and say what limited work could run (PostgreSQL; see :func:`waiting_sqlite`)."""
    by_queue = configured_queue_limits()
    if queues:
        by_queue = {q: v for q, v in by_queue.items() if q in queues}
    ready, rate_at = False, None
    for which in [limit_sql.OWN] + ([limit_sql.QUEUE_ONLY] if by_queue else []):
        with bound_cursor() as cursor:
            cursor.execute(limit_sql.idle(which, bool(queues)), {
                "now": now, **kinds.params(), "queues": text_array(queues or ()),
                "queue_limits": _queue_limits_json(by_queue), "limited_queues": text_array(sorted(by_queue))})
            row = cursor.fetchone()
        ready = ready or bool(row[0])
        rate_at = min(filter(None, (rate_at, row[1])), default=None)
    return Waiting(ready, rate_at)


def waiting_sqlite(kinds: Kinds, queues: Sequence[str] | None, now: datetime) -> Waiting:
    """:func:`waiting` on SQLite, read row by row."""
    by_queue = configured_queue_limits()
    due = ProcedureRun._writer.claimable(now).filter(kinds.q(), waiting_for_keys=False).filter(
        Q(keys_held=True) | Q(lock_keys=[])).filter(Q(limits__isnull=False) | Q(queue__in=list(by_queue)))
    if queues:
        due = due.filter(queue__in=queues)
    ready, rate_at = False, None
    for pid, stored, queue in due.values_list("id", "limits", "queue")[:limit_sql.SAMPLE]:
        limits = _parsed(pid, stored) + by_queue.get(queue, [])
        blocked = [lim for lim in limits if _full(lim, now)]
        if not blocked:
            ready = True
        for lim in blocked:
            if lim.kind == CONCURRENCY:
                noted = LimitUse._writer.filter(name=lim.name).values_list("waiting", flat=True).first()
                if noted is not None and queue not in noted:
                    LimitUse._writer.filter(name=lim.name).update(waiting=sorted({*noted, queue}))
            if lim.kind == RATE:
                at = (LimitSlot._writer.filter(name=lim.name, rate=True, free_at__gt=now)
                      .order_by("free_at").values_list("free_at", flat=True).first())
                rate_at = min(filter(None, (rate_at, at)), default=None)
    return Waiting(ready, rate_at)


def _full(lim: Limit, now: datetime) -> bool:
    slots = LimitSlot._writer.filter(name=lim.name, rate=lim.kind == RATE, slot__lt=lim.amount)
    free = slots.filter(free_at__lte=now) if lim.kind == RATE else slots.filter(holder_id__isnull=True)
    return slots.count() >= lim.amount and not free.exists()


def tidy(now: datetime) -> int:
    """Delete the slots and rows of names nothing holds (no lease, no claim a rate still counts): by the sweep.
    A name a claim is taking a slot of right now is left for the next sweep. Returns the names deleted."""
    if is_postgresql():
        with bound_cursor() as cursor:
            cursor.execute(limit_sql.statement("tidy"), {"now": now})
            return len(cursor.fetchall())
    busy = LimitSlot._writer.filter(Q(holder_id__isnull=False) | Q(free_at__gt=now)).values("name")
    idle = list(LimitUse._writer.exclude(name__in=busy).values_list("name", flat=True)[:500])
    LimitSlot._writer.filter(name__in=idle).delete()
    return LimitUse._writer.filter(name__in=idle).delete()[0]


__all__ = ["SCAN", "Granted", "Waiting", "configured_queue_limits", "deferrals", "free", "grant_due", "hold",
           "hold_params", "keys_first", "tidy", "waiting", "waiting_sqlite"]
