"""Who ticks the schedules: check W004, PROCEDURES['TICKER'] (E019) and what a worker logs at start."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from django.db import connection
from django.test import override_settings
from django.utils import timezone
from django_celery_beat.models import PeriodicTask

from django_procedures import register_schedule
from django_procedures.checks import check_schedules_ticked, check_settings
from django_procedures.contrib.celery import TASK_NAME
from django_procedures.models import Worker
from django_procedures.runtime.reporting import report_schedules
from django_procedures.store import schedules, tickers, workers
from testproject.testapp.procedures import Heartbeat

ROOT = Path(__file__).resolve().parent.parent
MIN = timedelta(minutes=1)


@pytest.fixture
def untick(db):
    """An enabled schedule, and no beat entry (migrate created one in the test database)."""
    PeriodicTask.objects.all().delete()
    register_schedule("nightly", Heartbeat, period=MIN)


def ids(found):
    return [m.id for m in found]


def register_worker(*, with_scheduler: bool) -> int:
    return workers.register(worker_id="w1", hostname="h", pid=1, version="", queues=None, concurrency=1,
                            lease_seconds=30, with_scheduler=with_scheduler)


def test_the_tick_task_name_is_the_celery_glue_s():
    assert tickers.TICK_TASK == TASK_NAME


def test_enabled_schedules_and_no_ticker_warn_where_django_runs_database_checks(untick):
    (warning,) = check_schedules_ticked(databases=["default"])
    assert warning.id == "django_procedures.W004"
    assert "nothing is set up to tick them" in warning.msg and "--with-scheduler" in warning.hint
    assert check_schedules_ticked() == []  # plain `check` and runserver: no database checks


def test_a_worker_without_the_scheduler_does_not_count(untick):
    register_worker(with_scheduler=False)
    assert ids(check_schedules_ticked(databases=["default"])) == ["django_procedures.W004"]


def test_a_scheduler_worker_seen_in_the_last_hour_counts(untick):
    row = register_worker(with_scheduler=True)
    assert check_schedules_ticked(databases=["default"]) == []
    workers.stop(row, workers.StopReason.SIGTERM)  # a deploy restarting it: still expected back
    assert check_schedules_ticked(databases=["default"]) == []
    Worker._writer.filter(id=row).update(last_seen_at=timezone.now() - tickers.RECENT - MIN)
    assert ids(check_schedules_ticked(databases=["default"])) == ["django_procedures.W004"]


def test_an_enabled_beat_entry_for_the_tick_task_counts(untick):
    from django_procedures.contrib.celery.beat import setup_periodic_task

    setup_periodic_task()
    assert check_schedules_ticked(databases=["default"]) == []
    PeriodicTask.objects.update(enabled=False)  # disabled in the admin: beat does not send it
    assert ids(check_schedules_ticked(databases=["default"])) == ["django_procedures.W004"]


def test_paused_schedules_need_no_ticker(untick):
    schedules.pause("nightly")
    assert check_schedules_ticked(databases=["default"]) == []


@override_settings(PROCEDURES={"TICKER": "a cron job calling django_procedures.tick()"})
def test_a_declared_ticker_silences_the_check(untick):
    assert check_schedules_ticked(databases=["default"]) == []
    assert tickers.tickers() == ["a cron job calling django_procedures.tick() (PROCEDURES['TICKER'])"]


@pytest.mark.parametrize("value", ["", "  ", 5, ["cron"]])
def test_the_ticker_setting_must_be_a_sentence_or_none(value):
    with override_settings(PROCEDURES={"TICKER": value}):
        assert ids(check_settings()) == ["django_procedures.E019"]


def test_a_database_not_migrated_gives_no_warning_and_no_error(untick):
    with connection.cursor() as cursor:  # rolled back with the test
        cursor.execute("ALTER TABLE django_procedures_schedule RENAME TO procedures_schedule_elsewhere")
    assert check_schedules_ticked(databases=["default"]) == []
    assert PeriodicTask.objects.count() == 0  # the test's transaction is still usable


def test_a_database_out_of_reach_gives_no_warning_and_no_error():
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "testproject.settings",
           "DATABASE_URL": "postgres://postgres@127.0.0.1:1/nowhere"}
    done = subprocess.run([sys.executable, "manage.py", "check", "--database", "default"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "W004" not in done.stdout + done.stderr and "Traceback" not in done.stderr
    assert "W005" not in done.stdout + done.stderr  # nor the step lists' check


# -- what a worker logs at start ------------------------------------------------------------------


def test_a_worker_that_ticks_logs_the_schedules_it_stored(untick, caplog):
    caplog.set_level(logging.INFO, "django_procedures")
    report_schedules("w1", ["nightly"], ticks=True)
    assert "stored schedules declared in code: nightly; this worker ticks them" in caplog.text


def test_a_worker_that_does_not_tick_names_who_does(untick, caplog):
    caplog.set_level(logging.INFO, "django_procedures")
    register_worker(with_scheduler=True)
    report_schedules("w2", ["nightly"], ticks=False)
    assert "stored schedules declared in code: nightly; ticked by procedures_worker --with-scheduler (w1), not " \
           "by this worker" in caplog.text
    assert "created schedules" not in caplog.text


def test_a_worker_that_does_not_tick_warns_when_nothing_does(untick, caplog):
    caplog.set_level(logging.INFO, "django_procedures")
    report_schedules("w2", [], ticks=False)
    (record,) = caplog.records
    assert record.levelname == "WARNING"
    assert "schedules are enabled, but nothing ticks them: this worker runs without --with-scheduler" in \
        record.getMessage()
