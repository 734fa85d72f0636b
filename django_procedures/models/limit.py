"""``LimitUse``: one row per flow-control limit name in use (``store.limits``)."""

from __future__ import annotations

from django.db import models

from django_procedures.models.readonly import ReadOnlyQuerySet, StoreWritten, WriterQuerySet


class LimitUse(StoreWritten):
    """How much of limit ``name`` is taken: leases holding it (``in_use``), and its recent claim times (rates).

    Rows appear at a name's first claim; the sweep deletes rows that count nothing any more, so thousands of
    per-customer names cost nothing while unused.
    """

    name = models.CharField(max_length=200, primary_key=True)
    in_use = models.PositiveIntegerField(default=0, db_default=0)
    #: The concurrency max the last claim declared (what the admin and the metrics show beside ``in_use``).
    max = models.PositiveIntegerField(null=True, blank=True)
    #: Epoch seconds of the last claims under a rate of this name, oldest first (a sliding-window log).
    times = models.JSONField(default=list, blank=True)
    #: The rate's window in seconds, as last declared (None: no rate).
    per = models.FloatField(null=True, blank=True)
    #: Queues of procedures a claim passed by because this limit was full: woken when a slot frees.
    waiting = models.JSONField(default=list, blank=True)
    #: When a full rate next admits a claim that waits for it: idle workers wake then.
    next_at = models.DateTimeField(null=True, blank=True)

    objects = ReadOnlyQuerySet.as_manager()
    _writer = WriterQuerySet.as_manager()  # the store's door; see models/readonly.py

    class Meta:
        ordering = ["name"]
        verbose_name = "limit"
        verbose_name_plural = "limits"

    def __str__(self) -> str:
        return f"{self.name}: {self.in_use}" + (f" of {self.max}" if self.max else "") + " running"
