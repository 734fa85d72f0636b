"""The django-celery-beat entry that sends ``django_procedures.tick`` every ``TICK_SECONDS``.

One ``PeriodicTask`` named :data:`PERIODIC_TASK_NAME`, on an ``IntervalSchedule`` of
``PROCEDURES['TICK_SECONDS']`` seconds. django-celery-beat counts intervals in whole
units (``IntervalSchedule.every`` is an integer), so a fractional ``TICK_SECONDS`` is
rounded up: 0.5 becomes 1, 2.5 becomes 3. :func:`setup_periodic_task` creates the
entry or brings it up to date and is idempotent; the app calls it on ``post_migrate``
and ``manage.py procedures_beat_setup`` calls it by hand.

What it owns: the task name, the interval, the arguments, ``one_off`` and the expiry.
What it leaves to the operator: ``enabled`` (an entry disabled in the admin stays
disabled), ``start_time``, ``queue`` and the routing fields, ``priority`` and the
description once created.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from django.core.exceptions import ImproperlyConfigured, ValidationError
from django.db import IntegrityError, connections, router, transaction
from django_celery_beat.models import IntervalSchedule, PeriodicTask, PeriodicTasks

from django_procedures.conf import conf
from django_procedures.contrib.celery import PERIODIC_TASK_NAME, TASK_NAME

DESCRIPTION = (
    "Runs one scheduling pass of django-procedures (django_procedures.tick()). Created by "
    "django_procedures.contrib.celery; its interval follows PROCEDURES['TICK_SECONDS'] and is brought up to "
    "date by manage.py migrate and manage.py procedures_beat_setup. Safe beside procedures_worker "
    "--with-scheduler and a second beat: a schedule's tick never starts twice.")


def interval_seconds(tick_seconds: Any = None) -> int:
    """``TICK_SECONDS`` (default: the setting) as django-celery-beat's whole seconds, rounded up, at least 1."""
    value = conf.TICK_SECONDS if tick_seconds is None else tick_seconds
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        seconds = math.nan
    if not math.isfinite(seconds) or seconds <= 0:
        raise ImproperlyConfigured(f"PROCEDURES['TICK_SECONDS'] must be a positive number of seconds; got {value!r}")
    return max(1, math.ceil(seconds))


def expire_seconds(every: int) -> int:
    """A tick message older than this is dropped by the Celery worker: a newer tick does the same work.

    Generous (at least a minute), so clock skew between the beat and worker hosts cannot drop every tick.
    """
    return max(60, 2 * every)


@dataclass(frozen=True)
class BeatSetup:
    """What :func:`setup_periodic_task` did: ``action`` is ``created``, ``updated`` or ``unchanged``."""

    action: str
    every: int
    tick_seconds: float
    changed: tuple[str, ...] = ()
    enabled: bool = True

    @property
    def rounded(self) -> bool:
        return self.every != self.tick_seconds

    def describe(self) -> str:
        what = f"task {TASK_NAME} every {self.every} s"
        if self.action == "created":
            line = f"created periodic task {PERIODIC_TASK_NAME!r}: {what}"
        elif self.action == "updated":
            line = f"updated periodic task {PERIODIC_TASK_NAME!r} ({', '.join(self.changed)}): {what}"
        else:
            line = f"periodic task {PERIODIC_TASK_NAME!r} is up to date: {what}"
        if self.rounded:
            line += (f" (PROCEDURES['TICK_SECONDS'] is {self.tick_seconds:g}; django-celery-beat intervals are "
                     f"whole seconds, so it was rounded up to {self.every})")
        if not self.enabled:
            line += ("; it is disabled, so beat does not send it: enable it in the admin (Periodic tasks) or run "
                     "manage.py procedures_beat_setup --enable")
        return line


def tables_exist(using: str = "default") -> bool:
    """Whether django-celery-beat's tables exist on ``using`` (``migrate`` may not have reached them yet)."""
    needed = {model._meta.db_table for model in (IntervalSchedule, PeriodicTask, PeriodicTasks)}
    connection = connections[using]
    with connection.cursor() as cursor:
        return needed <= set(connection.introspection.table_names(cursor))


def allowed(using: str = "default") -> bool:
    """Whether the database routers let django-celery-beat's models live on ``using``."""
    return router.allow_migrate_model(using, PeriodicTask)


def setup_periodic_task(*, using: str = "default", enable: bool = False) -> BeatSetup:
    """Create the beat entry, or bring its task, interval, arguments and expiry up to date.

    Idempotent: a second call changes nothing and reports ``unchanged``. ``enable``
    also re-enables an entry an operator disabled (left alone otherwise). Safe when
    several hosts run ``migrate`` at once: the one that loses the race to create the
    entry updates it instead.
    """
    try:
        return _setup(using, enable)
    except (IntegrityError, ValidationError):  # another process created the entry between our look and our save
        return _setup(using, enable)


def _setup(using: str, enable: bool) -> BeatSetup:
    tick_seconds = float(conf.TICK_SECONDS)
    every = interval_seconds(tick_seconds)
    with transaction.atomic(using=using):
        task = _locked_entry(using)
        interval = _interval(using, every, task)
        wanted: dict[str, Any] = {
            "task": TASK_NAME, "interval": interval, "crontab": None, "solar": None, "clocked": None,
            "args": "[]", "kwargs": "{}", "one_off": False, "expires": None,
            "expire_seconds": expire_seconds(every),
        }
        if task is None:
            task = PeriodicTask(name=PERIODIC_TASK_NAME, description=DESCRIPTION, enabled=True, **wanted)
            task.save(using=using)
            return BeatSetup("created", every, tick_seconds)
        changed = [field for field, value in wanted.items() if _value(task, field) != _value_of(value)]
        if enable and not task.enabled:
            changed.append("enabled")
            task.enabled = True
        if changed:
            for field, value in wanted.items():
                setattr(task, field, value)
            task.save(using=using)  # save(), not update(): django-celery-beat's schedulers notice the change
        return BeatSetup("updated" if changed else "unchanged", every, tick_seconds, tuple(changed), task.enabled)


def _locked_entry(using: str) -> PeriodicTask | None:
    return PeriodicTask.objects.using(using).select_for_update().filter(name=PERIODIC_TASK_NAME).first()


def _interval(using: str, every: int, task: PeriodicTask | None) -> IntervalSchedule:
    current = task.interval if task is not None and task.interval_id else None
    if current is not None and (current.every, current.period) == (every, IntervalSchedule.SECONDS):
        return current
    intervals = IntervalSchedule.objects.using(using)
    found = intervals.filter(every=every, period=IntervalSchedule.SECONDS).order_by("id").first()
    return found or intervals.create(every=every, period=IntervalSchedule.SECONDS)


def _value(task: PeriodicTask, field: str) -> Any:
    if field in ("interval", "crontab", "solar", "clocked"):
        return getattr(task, f"{field}_id")
    return getattr(task, field)


def _value_of(value: Any) -> Any:
    return value.pk if isinstance(value, IntervalSchedule) else value
