"""``Step``: one row per ended step attempt, written in the transaction that ends it."""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from django_procedures.models.readonly import ReadOnlyQuerySet, StoreWritten, WriterQuerySet
from django_procedures.policy.state import StateEncoder
from django_procedures.policy.status import StepStatus


class Step(StoreWritten):
    """A step attempt that ended ``done`` (with its checkpoint), ``failed`` or ``lost``."""

    # Indexed by procedures_step_order_idx, which starts with it.
    # Not enforced by PostgreSQL (docs/scaling.md, "Foreign keys").
    procedure = models.ForeignKey("django_procedures.ProcedureRun", on_delete=models.CASCADE, related_name="steps",
                                  db_index=False, db_constraint=False)
    index = models.PositiveIntegerField()
    name = models.CharField(max_length=255)
    attempt = models.PositiveIntegerField()
    status = models.CharField(max_length=10, choices=[(s.value, s.value) for s in StepStatus])
    lease_token = models.BigIntegerField(default=0)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField()
    error = models.TextField(blank=True)
    # A failed attempt's traceback (bounded like ProcedureRun.traceback, which keeps only the latest). The
    # database default lets workers of the previous release, and the raw inserts of done steps, leave it out.
    traceback = models.TextField(blank=True, default="", db_default="")
    # The state this attempt committed (done steps only).
    state = models.JSONField(null=True, blank=True, encoder=StateEncoder)

    objects = ReadOnlyQuerySet.as_manager()
    _writer = WriterQuerySet.as_manager()  # the store's door; see models/readonly.py

    class Meta:
        ordering = ["procedure", "index", "attempt"]
        constraints = [
            # A step is committed at most once, whatever races between workers.
            models.UniqueConstraint(fields=["procedure", "index"], condition=Q(status=StepStatus.DONE),
                                    name="procedures_step_done_once"),
        ]
        indexes = [models.Index(fields=["procedure", "index", "attempt"], name="procedures_step_order_idx")]

    def __str__(self) -> str:
        return f"step {self.index} {self.name} attempt {self.attempt}: {self.status}"
