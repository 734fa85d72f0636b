from django.db import models


class Effect(models.Model):
    """A row written by a test procedure's step: counts how often a step's writes took effect."""

    procedure_id = models.UUIDField(db_index=True)
    step = models.CharField(max_length=50)
    attempt = models.PositiveIntegerField(default=1)
    worker_pid = models.IntegerField(default=0)

    def __str__(self) -> str:
        return f"{self.step} of {self.procedure_id}"
