"""Why is this procedure not running? A pure explanation from plain facts.

Nothing here touches the database or Django: the admin gathers the facts
(:class:`NodeFacts`) with a few queries and this module turns them into
sentences an operator can act on, so every case is testable from a table.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

FINAL = frozenset({"done", "failed", "rolled_back", "cancelled"})


@dataclass(frozen=True)
class KeyWait:
    """A lock key the procedure asked for and has not been granted, and who holds it now."""

    key: str
    mode: str = "exclusive"
    #: Procedure ids (as strings) holding the key now; empty if nobody does any more.
    holders: tuple[str, ...] = ()


@dataclass(frozen=True)
class NodeFacts:
    """What the admin knows about one procedure when it explains it; plain values only."""

    status: str
    run_at: datetime | None = None
    pending_children: int = 0
    waiting_for_keys: bool = False
    key_waits: tuple[KeyWait, ...] = ()
    lease_owner: str = ""
    lease_expires_at: datetime | None = None
    #: Length of the current lease (its ``Lease.expires_at - claimed_at``), if known.
    lease_seconds: float | None = None
    #: Whether the type is registered in this (web) process; workers load the same apps.
    type_known: bool = True
    type_name: str = ""
    in_rollback: bool = False
    attempt: int = 1
    error: str = ""
    #: A waiting procedure's one wait ("children", "timer", "event") and when its timer falls due.
    waiting_for: str = ""
    wake_at: datetime | None = None
    #: The event names a procedure waiting for events waits for.
    waiting_events: tuple[str, ...] = ()
    #: The class version that wrote the run, and the registered class's in this process (None: unknown type).
    version: int = 1
    code_version: int | None = None
    #: The flow-control limits it is over now, in words: ``"crm-api: 5 of 5 running"``.
    limits_full: tuple[str, ...] = ()


@dataclass(frozen=True)
class Reason:
    """One reason a procedure is not running (or what it is doing), with a stable ``code``."""

    code: str
    text: str
    extra: dict[str, object] = field(default_factory=dict, compare=False)


def explain(facts: NodeFacts, now: datetime, lease_now: datetime | None = None) -> tuple[Reason, ...]:
    """The reasons ``facts`` is not running now, most actionable first; empty for a final procedure.

    ``now`` is the clock due times are read against; ``lease_now`` the
    database's clock that leases use (default: ``now``).
    """
    if facts.status in FINAL:
        return ()
    lease_now = lease_now or now
    if facts.status in ("running", "rolling_back"):
        return (_leased(facts, lease_now),)
    if facts.status == "waiting" and facts.waiting_for == "timer" and facts.wake_at is not None:
        return (Reason("timer", sleeping_until(facts.wake_at, now), {"wake_at": facts.wake_at}),)
    if facts.status == "waiting" and facts.waiting_for == "event":
        return (Reason("event", waiting_for_events(facts.waiting_events, facts.wake_at, now),
                       {"names": facts.waiting_events, "wake_at": facts.wake_at}),)
    if facts.status == "waiting":
        return (_waiting(facts),)
    if facts.status in ("ready", "retrying"):
        return _pending(facts, now)
    return (Reason("unknown", f"unexpected status {facts.status!r}"),)


def _leased(facts: NodeFacts, lease_now: datetime) -> Reason:
    doing = "rolling back" if facts.status == "rolling_back" else "running"
    worker = facts.lease_owner or "an unknown worker"
    if facts.lease_expires_at is None:
        return Reason("leased", f"{doing}, leased by worker {worker}")
    left = (facts.lease_expires_at - lease_now).total_seconds()
    if left < 0:
        return Reason("lease_expired",
                      f"{doing} but the lease of worker {worker} expired {duration(-left)} ago; "
                      "the recovery sweep of any live worker returns it to the queue",
                      {"worker": worker})
    if facts.lease_seconds:
        beat = max(0.0, facts.lease_seconds - left)
        text = (f"{doing}, leased by worker {worker}; last heartbeat {duration(beat)} ago "
                f"(lease expires in {duration(left)})")
    else:
        text = f"{doing}, leased by worker {worker}; lease expires in {duration(left)}"
    return Reason("leased", text, {"worker": worker})


def sleeping_until(wake_at: datetime, now: datetime) -> str:
    """``"sleeping until 2030-06-15 09:00:00 UTC (in 13d 23h)"``: a procedure waiting for its timer."""
    left = (wake_at - now).total_seconds()
    when = f"in {duration(left)}" if left >= 1 else "due: the next wake pass of any worker makes it ready"
    return f"sleeping until {wake_at.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC ({when})"


def waiting_for_events(names: tuple[str, ...] | list[str], wake_at: datetime | None, now: datetime) -> str:
    """``"waiting for approved or rejected — times out 2030-06-03 09:00:00 UTC (in 1d 23h)"``."""
    shown = list(names) or ["an event"]
    wanted = shown[0] if len(shown) == 1 else ", ".join(shown[:-1]) + " or " + shown[-1]
    if wake_at is None:
        return f"waiting for {wanted} — no timeout"
    left = (wake_at - now).total_seconds()
    when = f"in {duration(left)}" if left >= 1 else "due: the next wake pass of any worker makes it ready"
    return f"waiting for {wanted} — times out {wake_at.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC ({when})"


def _waiting(facts: NodeFacts) -> Reason:
    n = facts.pending_children
    if n <= 0:
        return Reason("children", "waiting for its children (none is recorded as unfinished; it is made ready "
                                  "when the last one's final transition commits)")
    return Reason("children", f"waiting for children: {n} left", {"left": n})


def _pending(facts: NodeFacts, now: datetime) -> tuple[Reason, ...]:
    reasons: list[Reason] = []
    if not facts.type_known:
        reasons.append(Reason(
            "unknown_type",
            f"no running worker knows its type {facts.type_name or '?'}: it is not registered in this web "
            "process, and workers built from the same code do not register it either; deploy code that "
            "defines it (or cancel the procedure)"))
    elif facts.code_version is not None and facts.version > facts.code_version:
        reasons.append(Reason(
            "newer_version",
            f"written by version {facts.version} of {facts.type_name}, newer than version {facts.code_version} "
            "in this code: workers built from it leave the run to workers running version "
            f"{facts.version} or later; finish deploying that version to the workers of its queue",
            {"version": facts.version, "code_version": facts.code_version}))
    due = facts.run_at is None or facts.run_at <= now
    if not due:
        assert facts.run_at is not None
        wait = duration((facts.run_at - now).total_seconds())
        at = timestamp(facts.run_at)
        if facts.status == "retrying":
            what = "rollback" if facts.in_rollback else "attempt"
            failed = f" after attempt {facts.attempt - 1} failed" if facts.attempt > 1 else ""
            error = f": {first_line(facts.error, 120)}" if facts.error else ""
            reasons.append(Reason("backoff", f"backing off until {at} (in {wait}){failed}{error}; "
                                             f"the next {what} runs then", {"until": facts.run_at}))
        else:
            reasons.append(Reason("scheduled", f"not due until {at} (in {wait})", {"until": facts.run_at}))
    blocked = [w for w in facts.key_waits if w.holders]
    for wait_for in blocked:
        holders = ", ".join(wait_for.holders[:3]) + (f" and {len(wait_for.holders) - 3} more"
                                                     if len(wait_for.holders) > 3 else "")
        noun = "procedure" if len(wait_for.holders) == 1 else "procedures"
        reasons.append(Reason("lock", f"waiting for lock key {wait_for.key!r} ({wait_for.mode}) held by "
                                      f"{noun} {holders}", {"key": wait_for.key, "holders": wait_for.holders}))
    if facts.waiting_for_keys and not blocked:
        keys = ", ".join(repr(w.key) for w in facts.key_waits) or "its lock keys"
        reasons.append(Reason("lock", f"waiting for {keys}, which nobody holds now; the next release or "
                                      "sweep makes it claimable again"))
    if due and facts.limits_full:
        reasons.append(Reason("limit", f"over its limit {'; '.join(facts.limits_full)}: it stays ready and is "
                                       "claimed as soon as the limit allows", {"limits": facts.limits_full}))
    if due and not reasons:
        since = "" if facts.run_at is None else f" since {timestamp(facts.run_at)} " \
                                                   f"({duration((now - facts.run_at).total_seconds())} ago)"
        reasons.append(Reason("due", f"due{since} and waiting for a worker of its queue to claim it"))
    return tuple(reasons)


def duration(seconds: float) -> str:
    """A short human duration: ``"45s"``, ``"3m 20s"``, ``"2h 5m"``, ``"3d 4h"``."""
    whole = max(0, round(seconds))
    if whole < 60:
        return f"{whole}s"
    minutes, s = divmod(whole, 60)
    if minutes < 60:
        return f"{minutes}m {s}s" if s else f"{minutes}m"
    hours, m = divmod(minutes, 60)
    if hours < 24:
        return f"{hours}h {m}m" if m else f"{hours}h"
    days, h = divmod(hours, 24)
    return f"{days}d {h}h" if h else f"{days}d"


def timestamp(moment: datetime) -> str:
    """``moment`` as ``2024-05-01 12:00:03 UTC`` (in its own time zone)."""
    return moment.strftime("%Y-%m-%d %H:%M:%S %Z").strip()


def first_line(text: str, limit: int = 100) -> str:
    """The first non-empty line of ``text``, cut to ``limit`` characters with an ellipsis."""
    line = next((part.strip() for part in text.splitlines() if part.strip()), "")
    return line if len(line) <= limit else line[: limit - 1].rstrip() + "…"
