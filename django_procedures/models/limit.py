"""Flow-control limits (``store.limits``): ``LimitSlot`` rows taken by claims, ``LimitUse`` one row per name."""

from __future__ import annotations

from datetime import datetime

from django.db import models
from django.db.models import Count, IntegerField, OuterRef, Q, Subquery
from django.db.models.functions import Coalesce

from django_procedures.models.readonly import ReadOnlyQuerySet, StoreWritten, WriterQuerySet


class LimitUseQuerySet(ReadOnlyQuerySet):
    def with_use(self, now: datetime) -> LimitUseQuerySet:
        """Each row with ``in_use`` (leases holding a slot of it now) and ``recent`` (its rate's claims in the
        window before ``now``), counted from the slots."""

        def counted(slots: models.QuerySet) -> Coalesce:
            rows = slots.filter(name=OuterRef("name")).order_by().values("name").annotate(n=Count("*")).values("n")
            return Coalesce(Subquery(rows, output_field=IntegerField()), 0)

        return self.annotate(in_use=counted(LimitSlot.objects.held()),
                             recent=counted(LimitSlot.objects.filter(rate=True, free_at__gt=now)))


class LimitUse(StoreWritten):
    """A limit name in use: what it was last declared as, and the queues whose procedures wait for it.

    Rows appear with a name's first slots and go with them: the sweep deletes the slots and the row of a name
    nothing holds any more, so thousands of per-customer names cost nothing while unused. How much is taken is
    counted from the slots (:meth:`LimitSlotQuerySet.in_use`), never kept here: no claim writes this row.
    """

    name = models.CharField(max_length=200, primary_key=True)
    #: The concurrency max declared when its slots were last made (what the admin and the metrics show).
    max = models.PositiveIntegerField(null=True, blank=True)
    #: The rate's window in seconds, as declared when its slots were last made (None: no rate).
    per = models.FloatField(null=True, blank=True)
    #: Queues of procedures passed by because this limit was full: a lease ending frees a slot and wakes them.
    waiting = models.JSONField(default=list, blank=True)

    objects = LimitUseQuerySet.as_manager()
    _writer = WriterQuerySet.as_manager()  # the store's door; see models/readonly.py

    class Meta:
        ordering = ["name"]
        verbose_name = "limit"
        verbose_name_plural = "limits"

    def __str__(self) -> str:
        return self.name


class LimitSlotQuerySet(ReadOnlyQuerySet):
    def held(self) -> LimitSlotQuerySet:
        """Concurrency slots a lease holds now."""
        return self.filter(rate=False, holder_id__isnull=False)

    def in_use(self, name: str) -> int:
        """Leases holding a slot of the concurrency limit ``name`` now."""
        return self.held().filter(name=name).count()


class LimitSlot(StoreWritten):
    """One unit of a limit: slot ``slot`` of ``name`` (``0 <= slot < max``, or ``< count`` for a rate).

    A concurrency slot is taken when a lease holds it (``holder_id``, ``holder_token``) and freed in the
    transaction that ends that lease; a rate slot is taken by a claim at time *t* and is free again at
    ``free_at`` = *t* + ``per``. Claims take free slots with ``FOR UPDATE SKIP LOCKED``: many claims of one
    name each take a different slot, none waits for another, and (``name``, ``rate``, ``slot``) being unique
    with ``slot`` below the limit, never more than the limit are taken. Slots of a name are numbered from 0
    without gaps (made as needed, deleted only all together).
    """

    name = models.CharField(max_length=200)
    rate = models.BooleanField(default=False)
    slot = models.PositiveIntegerField()
    holder_id = models.UUIDField(null=True, blank=True)
    holder_token = models.BigIntegerField(null=True, blank=True)
    free_at = models.DateTimeField(null=True, blank=True)

    objects = LimitSlotQuerySet.as_manager()
    _writer = WriterQuerySet.as_manager()  # the store's door; see models/readonly.py

    class Meta:
        ordering = ["name", "rate", "slot"]
        constraints = [models.UniqueConstraint(fields=["name", "rate", "slot"], name="procedures_limit_slot")]
        indexes = [
            # A claim's free concurrency slots, and a rate's slots by when they come free.
            models.Index(fields=["name", "slot"], condition=Q(rate=False, holder_id__isnull=True),
                         name="procedures_limit_free_idx"),
            models.Index(fields=["name", "free_at"], condition=Q(rate=True), name="procedures_limit_rate_idx"),
            # The lease ending frees its own slots.
            models.Index(fields=["holder_id"], condition=Q(holder_id__isnull=False),
                         name="procedures_limit_holder_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.name} {'rate' if self.rate else 'concurrency'} slot {self.slot}"
