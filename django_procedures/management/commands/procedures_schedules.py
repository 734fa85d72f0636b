"""``manage.py procedures_schedules``: a table of schedules and their metrics (``procedures schedules list``
prints the same schedules in 100 columns, and can pause, resume and trigger them)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from django_procedures.cli.schedules import COLUMNS, row
from django_procedures.models import Schedule

__all__ = ["COLUMNS", "Command", "row"]


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
