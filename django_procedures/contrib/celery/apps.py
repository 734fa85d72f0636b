"""The ``django_procedures.contrib.celery`` app: registers the tick task and keeps its beat entry set up."""

from __future__ import annotations

import logging
import sys
from typing import Any

from django.apps import AppConfig
from django.core import checks
from django.db.models.signals import post_migrate

logger = logging.getLogger("django_procedures.celery")


class ProceduresCeleryConfig(AppConfig):
    name = "django_procedures.contrib.celery"
    label = "procedures_celery"
    verbose_name = "Procedures: Celery beat"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django_procedures.contrib.celery import tasks  # noqa: F401  (registers django_procedures.tick)

        checks.register(check_installed_apps)
        post_migrate.connect(setup_beat_after_migrate, sender=self, dispatch_uid="procedures_celery.setup_beat")


def check_installed_apps(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    from django.apps import apps

    if apps.is_installed("django_celery_beat"):
        return []
    return [checks.Error(
        "django_procedures.contrib.celery keeps its periodic task in django-celery-beat's tables, but "
        "'django_celery_beat' is not in INSTALLED_APPS",
        hint="Add 'django_celery_beat' to INSTALLED_APPS, or remove 'django_procedures.contrib.celery' and tick "
             "with procedures_worker --with-scheduler.",
        id="django_procedures.E101")]


def setup_beat_after_migrate(sender: AppConfig | None = None, *, using: str = "default", verbosity: int = 1,
                             **kwargs: Any) -> None:
    """After ``migrate``: create or update the beat entry, once django-celery-beat's tables exist."""
    from django.apps import apps

    if not apps.is_installed("django_celery_beat"):
        return
    from django_procedures.contrib.celery.beat import allowed, setup_periodic_task, tables_exist

    if not allowed(using) or not tables_exist(using):
        logger.debug("django-celery-beat's tables are not on %r (yet); the beat entry is set up later", using)
        return
    result = setup_periodic_task(using=using)
    if result.action == "unchanged":
        return
    if verbosity >= 1:
        stdout = kwargs.get("stdout") or sys.stdout
        stdout.write(f"  django_procedures.contrib.celery: {result.describe()}\n")
    else:
        logger.debug("%s", result.describe())
