"""``manage.py procedures_beat_setup``: create or update the django-celery-beat entry for the tick task."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError
from django.db import DEFAULT_DB_ALIAS, connections

from django_procedures.contrib.celery import beat


class Command(BaseCommand):
    help = ("Create or update the django-celery-beat periodic task 'django_procedures: tick' that sends the "
            "django_procedures.tick task every PROCEDURES['TICK_SECONDS'] (rounded up to whole seconds). "
            "Idempotent; migrate does the same.")

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--database", default=DEFAULT_DB_ALIAS,
                            help="Database holding django-celery-beat's tables (default: 'default').")
        parser.add_argument("--enable", action="store_true",
                            help="Also enable the entry if an operator disabled it (left alone otherwise).")

    def handle(self, *args: Any, **options: Any) -> None:
        using = options["database"]
        if using not in connections:
            raise CommandError(f"--database {using!r} is not in DATABASES; give one of "
                               f"{', '.join(repr(alias) for alias in connections)}")
        if not beat.allowed(using):
            raise CommandError(f"the database routers keep django-celery-beat's models off {using!r}; "
                               "pass --database with the database that holds them")
        if not beat.tables_exist(using):
            raise CommandError(f"django-celery-beat's tables do not exist on {using!r} yet: run manage.py migrate "
                               "(which also sets up the entry)")
        result = beat.setup_periodic_task(using=using, enable=options["enable"])
        self.stdout.write(result.describe())
