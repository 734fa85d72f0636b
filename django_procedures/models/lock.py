"""``KeyRequest``: a procedure's request for a lock key, granted or waiting."""

from __future__ import annotations

from django.db import models

from django_procedures.models.readonly import ReadOnlyQuerySet, StoreWritten, WriterQuerySet


class KeyRequest(StoreWritten):
    """One lock key a procedure holds (``granted``) or waits for, with its place in the queue."""

    name = models.CharField(max_length=255)
    # Both indexed; neither enforced by PostgreSQL (docs/scaling.md, "Foreign keys").
    procedure = models.ForeignKey("django_procedures.ProcedureRun", on_delete=models.CASCADE,
                                  related_name="key_requests", db_constraint=False)
    root = models.ForeignKey("django_procedures.ProcedureRun", on_delete=models.CASCADE, related_name="+",
                             db_constraint=False)
    mode = models.CharField(max_length=10, choices=[("exclusive", "exclusive"), ("shared", "shared")])
    granted = models.BooleanField(default=False)
    requested_at = models.DateTimeField()

    objects = ReadOnlyQuerySet.as_manager()
    _writer = WriterQuerySet.as_manager()  # the store's door; see models/readonly.py

    class Meta:
        ordering = ["name", "requested_at", "id"]
        constraints = [models.UniqueConstraint(fields=["name", "procedure"], name="procedures_key_request_once")]
        indexes = [models.Index(fields=["name", "granted"], name="procedures_key_idx")]

    def __str__(self) -> str:
        state = "holds" if self.granted else "waits for"
        return f"{self.procedure_id} {state} {self.mode} {self.name}"
