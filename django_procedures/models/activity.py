"""``FinishedCount`` and ``Rollup``: how many procedures finished each minute, kept as they finish.

The dashboard's last 24 hours read these counts instead of counting the
window's rows at every view (a million index entries on a busy day). A
worker's maintenance adds each minute once, a minute after it ends
(``django_procedures.store.activity``); ``Rollup`` says which minutes are
counted, and the dashboard counts the rows of the other minutes itself.
"""

from __future__ import annotations

from django.db import models

from django_procedures.models.readonly import ReadOnlyQuerySet, StoreWritten, WriterQuerySet


class FinishedCount(StoreWritten):
    """Procedures of one type that finished with one status in one minute (as they were when counted)."""

    minute = models.DateTimeField(help_text="Start of the minute (UTC) the procedures finished in.")
    type_name = models.CharField(max_length=255)
    status = models.CharField(max_length=20)
    count = models.PositiveIntegerField()
    last_finished_at = models.DateTimeField(help_text="The latest of their finish times.")

    objects = ReadOnlyQuerySet.as_manager()
    _writer = WriterQuerySet.as_manager()  # the store's door; see models/readonly.py

    class Meta:
        constraints = [
            # Each minute is counted once; the index also serves the dashboard's range of minutes.
            models.UniqueConstraint(fields=["minute", "type_name", "status"], name="procedures_finished_count_uniq"),
        ]

    def __str__(self) -> str:
        return f"{self.count} {self.type_name} {self.status} in the minute of {self.minute:%Y-%m-%d %H:%M}"


class Rollup(StoreWritten):
    """What a rollup has counted: every minute from ``began`` to ``until`` is in its table (one row per rollup)."""

    name = models.CharField(max_length=50, primary_key=True)
    began = models.DateTimeField()
    until = models.DateTimeField()

    objects = ReadOnlyQuerySet.as_manager()
    _writer = WriterQuerySet.as_manager()

    def __str__(self) -> str:
        return f"rollup {self.name} until {self.until:%Y-%m-%d %H:%M}"
