"""The Celery task ``django_procedures.tick``: one scheduling pass, as ``django_procedures.tick()`` runs it."""

from __future__ import annotations

import dataclasses
from typing import Any

from celery import shared_task

from django_procedures.contrib.celery import TASK_NAME


@shared_task(name=TASK_NAME, ignore_result=True)
def tick() -> dict[str, Any]:
    """Run one scheduling pass and return its report as a small JSON object.

    Safe to run on many workers at once and beside ``procedures_worker
    --with-scheduler``: due schedules are locked with ``FOR UPDATE SKIP LOCKED``
    and a schedule's tick starts at most one run.
    """
    from django_procedures import tick as scheduling_pass

    return dataclasses.asdict(scheduling_pass())
