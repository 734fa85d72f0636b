"""``Event``: one row per event sent to a procedure (``send_event``), kept until its procedure is pruned."""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from django_procedures.models.readonly import ReadOnlyQuerySet, StoreWritten, WriterQuerySet
from django_procedures.policy.events import MAX_KEY_LENGTH, MAX_NAME_LENGTH


class Event(StoreWritten):
    """An event sent to a procedure: unconsumed until one wait of it takes it (``consumed_at``)."""

    # Sends to one procedure are serialised on its row lock, so ids are in the order the sends committed.
    id = models.BigAutoField(primary_key=True)
    # Indexed by the indexes below, which start with it; not enforced by PostgreSQL (docs/scaling.md).
    procedure = models.ForeignKey("django_procedures.ProcedureRun", on_delete=models.CASCADE, related_name="events",
                                  db_index=False, db_constraint=False)
    name = models.CharField(max_length=MAX_NAME_LENGTH)
    payload = models.JSONField(null=True, blank=True)
    # Makes a send idempotent per procedure: a second send with the same key is the first event.
    key = models.CharField(max_length=MAX_KEY_LENGTH, null=True, blank=True)  # noqa: DJ001
    sent_at = models.DateTimeField()
    sent_by = models.CharField(max_length=255, blank=True)
    consumed_at = models.DateTimeField(null=True, blank=True)
    # The committed step count when the wait took it: the step of that index sees it as ``ctx.event``.
    consumed_step = models.PositiveIntegerField(null=True, blank=True)
    # That step's name, for the event history ("" when the wait was in the last step).
    consumed_by = models.CharField(max_length=255, blank=True)

    objects = ReadOnlyQuerySet.as_manager()
    _writer = WriterQuerySet.as_manager()  # the store's door; see models/readonly.py

    class Meta:
        ordering = ["procedure", "id"]
        constraints = [
            models.UniqueConstraint(fields=["procedure", "key"], condition=Q(key__isnull=False),
                                    name="procedures_event_key"),
        ]
        indexes = [
            # A procedure's history, and prune's deletes.
            models.Index(fields=["procedure", "id"], name="procedures_event_idx"),
            # What a wait takes (the oldest unconsumed of its names) and the bound on unconsumed events.
            models.Index(fields=["procedure", "id"], condition=Q(consumed_at__isnull=True),
                         name="procedures_event_open_idx"),
        ]

    def __str__(self) -> str:
        return f"event {self.name} to {self.procedure_id} ({'consumed' if self.consumed_at else 'unconsumed'})"
