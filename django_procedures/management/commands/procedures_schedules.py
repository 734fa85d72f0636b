"""``manage.py procedures_schedules``: a table of schedules and their metrics."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.core.management.base import BaseCommand

from django_procedures.models import Schedule

COLUMNS = ["name", "mode", "cadence", "next tick", "active", "pending", "runs", "failures", "skips", "overlaps",
           "drift ms", "last ms", "max ms", "state", "last error"]


def _when(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S") if value else "-"


def _ms(value: int | None) -> str:
    return "-" if value is None else str(value)


def row(s: Schedule) -> list[str]:
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


class Command(BaseCommand):
    help = "Print every schedule with its cadence, next tick, metrics and the error that keeps it from ticking."

    def handle(self, *args: Any, **options: Any) -> None:
        rows = [row(s) for s in Schedule.objects.order_by("name")]
        if not rows:
            self.stdout.write("no schedules")
            return
        widths = [max(len(c), *(len(r[i]) for r in rows)) for i, c in enumerate(COLUMNS)]
        self.stdout.write("  ".join(c.ljust(w) for c, w in zip(COLUMNS, widths, strict=True)).rstrip())
        for r in rows:
            self.stdout.write("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip())
