"""``procedures schedules list|pause|resume|trigger`` (``procedures_schedules`` prints the wide list)."""

from __future__ import annotations

import argparse
from datetime import datetime
from typing import Any

from django_procedures.cli.common import actor
from django_procedures.cli.output import Output, Refused
from django_procedures.models import Schedule
from django_procedures.scheduling import pause_schedule, resume_schedule, trigger_schedule

HELP = "Schedules: list them, or pause, resume or trigger one by name."
#: Every column of ``procedures_schedules`` (the wide table).
COLUMNS = ["name", "mode", "cadence", "next tick", "active", "pending", "runs", "failures", "skips", "overlaps",
           "drift ms", "last ms", "max ms", "state", "last error"]
#: The columns ``procedures schedules list`` shows, to fit 100 columns (``--json`` has every field).
SHORT = ["name", "cadence", "next tick", "active", "pending", "runs", "failures", "state", "last error"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    verbs = parser.add_subparsers(dest="verb", metavar="VERB", required=True)
    listing = verbs.add_parser("list", help="every schedule with its cadence, next tick and counts")
    listing.add_argument("--json", action="store_true", help="print one JSON document")
    pause = verbs.add_parser("pause", help="stop a schedule ticking; runs already started go on")
    pause.add_argument("name")
    pause.add_argument("--reason", help="recorded on the schedule (default: paused by cli:<user>)")
    verbs.add_parser("resume", help="let a paused schedule tick again; its next tick is due now").add_argument("name")
    trigger = verbs.add_parser("trigger", help="start a tick now, within the schedule's concurrency bound")
    trigger.add_argument("name")
    for sub in (pause, trigger):
        sub.add_argument("--json", action="store_true", help="print one JSON document")


def _when(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S") if value else "-"


def _ms(value: int | None) -> str:
    return "-" if value is None else str(value)


def row(s: Schedule) -> list[str]:
    """One schedule as the cells of ``COLUMNS``."""
    cadence = f"cron {s.cron} {s.timezone}".strip() if s.cron else f"every {s.period}"
    state = "enabled" if s.enabled else f"paused: {s.disabled_reason}" if s.disabled_reason else "paused"
    return [s.name, s.mode, cadence, _when(s.next_tick_at), str(s.active_runs), str(len(s.pending_ticks)),
            str(s.runs), str(s.failures), str(s.skips), str(s.overlaps), _ms(s.last_drift_ms),
            _ms(s.last_elapsed_ms), _ms(s.max_elapsed_ms), state, _error(s)]


def _error(s: Schedule) -> str:
    """Why the schedule cannot tick (``store.broken``), on one line, or ``-``."""
    if not s.last_error:
        return "-"
    return f"{_when(s.last_error_at)} {' '.join(s.last_error.split())}"


def as_dict(s: Schedule) -> dict[str, Any]:
    return {"name": s.name, "procedure": s.procedure, "mode": s.mode, "period_seconds":
            s.period.total_seconds() if s.period else None, "cron": s.cron or None, "timezone": s.timezone or None,
            "enabled": s.enabled, "disabled_reason": s.disabled_reason or None, "next_tick_at": s.next_tick_at,
            "active_runs": s.active_runs, "max_concurrency": s.max_concurrency, "pending_ticks": len(s.pending_ticks),
            "runs": s.runs, "failures": s.failures, "skips": s.skips, "overlaps": s.overlaps,
            "last_drift_ms": s.last_drift_ms, "last_elapsed_ms": s.last_elapsed_ms,
            "max_elapsed_ms": s.max_elapsed_ms, "last_error": s.last_error or None, "last_error_at": s.last_error_at}


def run(options: dict[str, Any], out: Output) -> None:
    verb = options["verb"]
    if verb == "list":
        schedules = list(Schedule.objects.order_by("name"))
        if out.as_json:
            out.document({"schedules": [as_dict(s) for s in schedules]})
        elif not schedules:
            out.line("no schedules")
        else:
            picked = [COLUMNS.index(c) for c in SHORT]
            out.table(SHORT, [[cells[i] for i in picked] for cells in map(row, schedules)])
        return
    name = options["name"]
    if not Schedule.objects.filter(name=name).exists():
        raise Refused(f"no schedule {name!r}; `procedures schedules list` shows their names")
    if verb == "pause":
        if not Schedule.objects.filter(name=name, enabled=True).exists():
            raise Refused(f"schedule {name!r} is already paused; nothing changed")
        reason = options.get("reason") or f"paused by {actor()}"
        pause_schedule(name, reason=reason)
        result: dict[str, Any] = {"schedule": name, "paused": True, "reason": reason}
    elif verb == "resume":
        if Schedule.objects.filter(name=name, enabled=True).exists():
            raise Refused(f"schedule {name!r} is not paused; nothing changed")
        resume_schedule(name)
        result = {"schedule": name, "resumed": True}
    else:
        result = {"schedule": name, **trigger_schedule(name)}
    if out.as_json:
        out.document(result)
    else:
        out.line(" ".join(f"{k} {v}" if k != "schedule" else f"schedule {v!r}:" for k, v in result.items()))
