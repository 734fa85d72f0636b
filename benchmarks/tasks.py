"""The tasks the tasks benchmark runs on ``ProceduresBackend``: no-op bodies, so what is measured is the backend.

The ``benchmarks`` app's ``tasks`` module: worker processes started with
``benchmarks.settings`` import it (autodiscovery) and so can claim these tasks.
"""

from __future__ import annotations

import time

try:
    from django.tasks import task
except ImportError:  # Django 5.2: the django-tasks backport
    from django_tasks import task


@task
def noop() -> None:
    """Does nothing: the unit of the task throughput benchmark."""


@task
def stamp() -> dict[str, float]:
    """Returns the wall-clock time at which it started (pickup latency)."""
    return {"started": time.time()}
