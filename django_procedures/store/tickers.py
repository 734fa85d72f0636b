"""Who ticks the schedules, as far as any process can tell from the settings and the database.

Three things count: ``PROCEDURES['TICKER']`` (a declaration, taken at its word), a
``procedures_worker --with-scheduler`` seen lately (its ``Worker`` row), and an enabled
django-celery-beat entry for the tick task. None proves ticks are happening now (beat may
not run); finding none of them while schedules are enabled means nothing will tick them.
"""

from __future__ import annotations

from datetime import timedelta

from django.apps import apps
from django.utils import timezone

from django_procedures.conf import conf
from django_procedures.models import Schedule, Worker

#: A scheduler worker stopped (or silent) this recently still counts: a deploy restarts workers around migrate.
RECENT = timedelta(hours=1)
#: The tick task's name (``django_procedures.contrib.celery.TASK_NAME``; read here without importing Celery glue).
TICK_TASK = "django_procedures.tick"


def enabled_schedules(using: str = "default") -> bool:
    return Schedule.objects.using(using).filter(enabled=True).exists()


def tickers(using: str = "default") -> list[str]:
    """What is set up to tick the schedules, one phrase each; empty when nothing is."""
    found = []
    if conf.TICKER:
        found.append(f"{conf.TICKER} (PROCEDURES['TICKER'])")
    # A live worker renews last_seen_at every third of its lease, so this finds it too.
    newest = (Worker.objects.using(using).filter(with_scheduler=True, last_seen_at__gte=timezone.now() - RECENT)
              .order_by("-last_seen_at").values_list("worker_id", flat=True).first())
    if newest is not None:
        found.append(f"procedures_worker --with-scheduler ({newest})")
    if apps.is_installed("django_celery_beat"):
        periodic_task = apps.get_model("django_celery_beat", "PeriodicTask")
        name = periodic_task.objects.using(using).filter(task=TICK_TASK, enabled=True).values_list(
            "name", flat=True).first()
        if name is not None:
            found.append(f"Celery beat (periodic task {name!r})")
    return found
