"""Pure formatting for the admin: step labels, attempt counts, ages, schedule cadences, redacted pretty JSON."""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

from django_procedures.admin.why import duration

MASK = "••••••"
LEASED = frozenset({"running", "rolling_back"})
FINAL = frozenset({"done", "failed", "rolled_back", "cancelled"})


def step_label(step: int, step_name: str, total: int | None, *, machine: bool = False,
               in_rollback: bool = False) -> str:
    """``"3/5 · name"``: the step to run (1-based) of the class's steps; ``?`` when the type is unknown.

    ``step`` counts committed steps and ``step_name`` names the next one; a
    finished procedure shows how far it got (``"5/5"``). A state machine
    (``execute()``) has no total and shows its checkpoint count.
    """
    if machine:
        label = f"#{step + 1} · {step_name}" if step_name else f"#{step}"
    else:
        of = "?" if total is None else str(total)
        label = f"{step + 1}/{of} · {step_name}" if step_name else f"{step}/{of}"
    return f"{label} · rollback" if in_rollback else label


def attempts_made(status: str, attempt: int) -> int | None:
    """Attempts of the current step so far (``attempt`` numbers the next try, or the one in flight).

    None for a ``done`` procedure: it has no current step.
    """
    if status == "done":
        return None
    return attempt if status in LEASED else max(attempt - 1, 0)


def attempts_text(status: str, attempt: int, failures: int, lost: int, manual_retries: int) -> str:
    """The attempts of the current step in words: ``"4 attempts: 1 failed since the manual retry, 3 before it"``.

    A manual retry resets the failure budget (``failures``, ``lost``) but not
    the attempt count, so the attempts made before it are told apart.
    """
    made = attempts_made(status, attempt)
    if made is None:
        return "—"
    head = f"{made} attempt" + ("" if made == 1 else "s")
    running = status in LEASED and made > 0
    since = " since the last manual retry" if manual_retries else ""
    parts = []
    if failures:
        parts.append(f"{failures} failed{since}")
    if lost:
        parts.append(f"{lost} lost with their worker{since}")
    if running:
        parts.append("1 running now")
    earlier = made - failures - lost - (1 if running else 0)
    if manual_retries and earlier > 0:
        retries = "the manual retry" if manual_retries == 1 else f"{manual_retries} manual retries"
        parts.append(f"{earlier} before {retries}")
    return f"{head}: {', '.join(parts)}" if parts else head


def age(moment: datetime | None, now: datetime) -> str:
    return "—" if moment is None else duration((now - moment).total_seconds())


def run_duration(started: datetime | None, finished: datetime | None, now: datetime) -> str:
    """How long it ran: start to finish, or start to now while unfinished; ``—`` if it never started."""
    if started is None:
        return "—"
    return elapsed(((finished or now) - started).total_seconds())


def elapsed(seconds: float) -> str:
    """A run's or step's duration, precise where it is short: ``"340ms"``, ``"2.4s"``, then as :func:`duration`.

    Most steps take less than a second; rounding them to ``"0s"`` told nothing.
    Digits are cut, not rounded, so a value never reads as the next unit up.
    """
    seconds = max(0.0, seconds)
    if seconds < 1:
        return f"{int(seconds * 1000)}ms"
    if seconds < 10:
        return f"{int(seconds * 10) / 10:.1f}s"
    return duration(seconds)


def cadence(period: timedelta | None, cron: str, zone: str) -> str:
    """A schedule's cadence: ``"every 5m"``, or ``"cron 0 3 * * * Europe/Berlin"`` (the zone it is read in)."""
    if cron:
        return f"cron {cron} {zone}".rstrip()
    if period is None:
        return "—"
    seconds = period.total_seconds()
    return f"every {duration(seconds)}" if seconds >= 1 else f"every {seconds * 1000:g}ms"


def relative(moment: datetime | None, now: datetime) -> str:
    """``"in 4m 10s"``, ``"3s ago"`` or ``"now"``; ``"—"`` for no time."""
    if moment is None:
        return "—"
    seconds = (moment - now).total_seconds()
    if abs(seconds) < 1:
        return "now"
    return f"in {duration(seconds)}" if seconds > 0 else f"{duration(-seconds)} ago"


def redact(value: Any, keys: Iterable[str], mask: str = MASK) -> Any:
    """A copy of ``value`` with every dict entry whose key is in ``keys`` masked, at any depth.

    Keys compare case-insensitively; lists and nested dicts are walked; other
    values are returned as they are.
    """
    wanted = {k.lower() for k in keys}
    if not wanted:
        return value

    def walk(item: Any) -> Any:
        if isinstance(item, dict):
            return {k: (mask if isinstance(k, str) and k.lower() in wanted else walk(v)) for k, v in item.items()}
        if isinstance(item, list | tuple):
            return [walk(v) for v in item]
        return item

    return walk(value)


def pretty_json(value: Any, limit: int = 200_000) -> str:
    """Indented JSON, non-ASCII kept readable; cut at ``limit`` characters with a note."""
    text = json.dumps(value, indent=2, ensure_ascii=False, default=str)
    if len(text) > limit:
        return text[:limit] + f"\n… ({len(text) - limit:,} more characters not shown)"
    return text
