"""``Lease``: one row per claim of a procedure, closed with its outcome."""

from __future__ import annotations

from django.db import models

from django_procedures.models.readonly import ReadOnlyQuerySet, StoreWritten, WriterQuerySet
from django_procedures.policy.status import LeaseOutcome


class Lease(StoreWritten):
    """A claim ``(procedure, token)`` by ``worker``; ``outcome`` says how it ended."""

    # Indexed by the (procedure, token) constraint.
    # Not enforced by PostgreSQL (docs/scaling.md, "Foreign keys").
    procedure = models.ForeignKey("django_procedures.ProcedureRun", on_delete=models.CASCADE, related_name="leases",
                                  db_index=False, db_constraint=False)
    token = models.BigIntegerField()
    worker = models.CharField(max_length=255)
    claimed_at = models.DateTimeField()
    expires_at = models.DateTimeField(null=True, blank=True)
    released_at = models.DateTimeField(null=True, blank=True)
    outcome = models.CharField(max_length=10, blank=True, choices=[(o.value, o.value) for o in LeaseOutcome])
    #: The concurrency limit names this lease holds a slot of (freed when it closes); None: none.
    limits = models.JSONField(null=True, blank=True)

    objects = ReadOnlyQuerySet.as_manager()
    _writer = WriterQuerySet.as_manager()  # the store's door; see models/readonly.py

    class Meta:
        ordering = ["procedure", "token"]
        constraints = [
            models.UniqueConstraint(fields=["procedure", "token"], name="procedures_lease_token"),
        ]
        # No other index: every read of leases goes by procedure (the constraint's index), and each index
        # more would be written twice per claim, at the claim and when the lease is closed (migration 0015).

    def __str__(self) -> str:
        return f"lease {self.token} of {self.procedure_id} by {self.worker}: {self.outcome or 'open'}"
