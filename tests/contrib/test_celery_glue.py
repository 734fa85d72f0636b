"""django_procedures.contrib.celery in-process: the tick task, the beat entry, migrate and the setup command."""

import json
import subprocess
import sys
import textwrap
from datetime import timedelta
from io import StringIO

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.management import CommandError, call_command
from django.test import override_settings
from django_celery_beat.models import CrontabSchedule, IntervalSchedule, PeriodicTask

from django_procedures import register_schedule
from django_procedures.contrib.celery import PERIODIC_TASK_NAME, TASK_NAME, apps, beat
from django_procedures.contrib.celery.tasks import tick as tick_task
from django_procedures.models import ProcedureRun
from testproject.testapp.procedures import Heartbeat

from ..runtime.processes import ROOT

pytestmark = pytest.mark.django_db


def entry() -> PeriodicTask:
    return PeriodicTask.objects.select_related("interval").get(name=PERIODIC_TASK_NAME)


def setup_command(*args: str) -> str:
    out = StringIO()
    call_command("procedures_beat_setup", *args, stdout=out)
    return out.getvalue().strip()


# -- the task ----------------------------------------------------------------------------------


def test_the_task_runs_one_scheduling_pass_and_reports_it_as_json():
    schedule, _ = register_schedule("beat", Heartbeat, period=timedelta(minutes=1))
    report = tick_task.apply().get()  # eagerly, in this process, as a Celery worker would run it
    assert json.loads(json.dumps(report)) == report
    assert (report["schedules"], report["started"], report["skipped"], report["errors"]) == (1, 1, 0, [])
    assert ProcedureRun.objects.filter(schedule=schedule).count() == 1
    assert tick_task()["started"] == 0  # a plain call is one more pass: nothing is due any more


def test_the_task_is_registered_under_its_name_in_the_projects_celery_app():
    from testproject.celery import app

    assert tick_task.name == TASK_NAME == "django_procedures.tick"
    assert app.tasks[TASK_NAME].run is tick_task.run


# -- the beat entry ----------------------------------------------------------------------------


def test_migrate_set_up_the_beat_entry():
    task = entry()  # created by post_migrate when the test database was migrated
    assert (task.task, task.interval.every, task.interval.period) == (TASK_NAME, 1, IntervalSchedule.SECONDS)
    assert (task.enabled, task.one_off, task.args, task.kwargs) == (True, False, "[]", "{}")
    assert task.expire_seconds == 60 and "TICK_SECONDS" in task.description


def test_migrate_recreates_the_entry_and_follows_tick_seconds():
    PeriodicTask.objects.filter(name=PERIODIC_TASK_NAME).delete()
    call_command("migrate", verbosity=0)
    assert entry().interval.every == 1
    out = StringIO()
    with override_settings(PROCEDURES={"TICK_SECONDS": 5}):
        call_command("migrate", verbosity=1, stdout=out)
    assert entry().interval.every == 5 and entry().expire_seconds == 60
    assert "updated periodic task 'django_procedures: tick' (interval): task django_procedures.tick every 5 s" \
        in out.getvalue()
    with override_settings(PROCEDURES={"TICK_SECONDS": 45}):
        call_command("migrate", verbosity=0)
    assert (entry().interval.every, entry().expire_seconds) == (45, 90)
    assert PeriodicTask.objects.filter(name=PERIODIC_TASK_NAME).count() == 1


@pytest.mark.parametrize(("tick_seconds", "every"), [(0.2, 1), (1, 1), (1.0, 1), (1.5, 2), (2.5, 3), ("7", 7),
                                                     (3600, 3600)])
def test_whole_seconds_rounded_up(tick_seconds, every):
    assert beat.interval_seconds(tick_seconds) == every


@pytest.mark.parametrize("tick_seconds", [0, -1, "soon", float("nan"), float("inf"), [1]])
def test_a_tick_seconds_that_cannot_work_is_refused(tick_seconds):
    with pytest.raises(ImproperlyConfigured, match=r"PROCEDURES\['TICK_SECONDS'\] must be a positive number"):
        beat.interval_seconds(tick_seconds)


def test_the_setup_command_is_idempotent_and_says_what_it_did():
    PeriodicTask.objects.filter(name=PERIODIC_TASK_NAME).delete()
    assert setup_command() == "created periodic task 'django_procedures: tick': task django_procedures.tick every 1 s"
    intervals = IntervalSchedule.objects.count()
    assert setup_command() == ("periodic task 'django_procedures: tick' is up to date: task django_procedures.tick "
                               "every 1 s")
    assert IntervalSchedule.objects.count() == intervals
    assert PeriodicTask.objects.filter(name=PERIODIC_TASK_NAME).count() == 1


def test_a_fractional_tick_seconds_is_rounded_up_and_the_command_says_so():
    with override_settings(PROCEDURES={"TICK_SECONDS": 0.25}):
        out = setup_command()
    assert out.endswith("every 1 s (PROCEDURES['TICK_SECONDS'] is 0.25; django-celery-beat intervals are whole "
                        "seconds, so it was rounded up to 1)")


def test_the_setup_repairs_an_entry_edited_by_hand_but_keeps_the_operators_choices():
    task = entry()
    task.task, task.args, task.interval = "something.else", '["x"]', None
    task.crontab = CrontabSchedule.objects.create(minute="*/5")
    task.queue, task.priority = "ticks", 3
    task.save()
    out = setup_command()
    assert out.startswith("updated periodic task 'django_procedures: tick' (task, interval, crontab, args): ")
    task = entry()
    assert (task.task, task.interval.every, task.crontab, task.args) == (TASK_NAME, 1, None, "[]")
    assert (task.queue, task.priority) == ("ticks", 3)


def test_losing_the_race_to_create_the_entry_updates_it_instead(monkeypatch):
    """Two hosts migrating at once: both look, find nothing, insert; the loser's insert hits the unique name."""
    PeriodicTask.objects.filter(name=PERIODIC_TASK_NAME).update(expire_seconds=5)  # the winner's, out of date
    looks = []
    real = beat._locked_entry

    def first_look_finds_nothing(using):
        looks.append(using)
        return None if len(looks) == 1 else real(using)

    monkeypatch.setattr(beat, "_locked_entry", first_look_finds_nothing)
    result = beat.setup_periodic_task()
    assert (result.action, result.changed, len(looks)) == ("updated", ("expire_seconds",), 2)
    assert PeriodicTask.objects.filter(name=PERIODIC_TASK_NAME).count() == 1 and entry().expire_seconds == 60


def test_a_disabled_entry_stays_disabled_unless_asked():
    PeriodicTask.objects.filter(name=PERIODIC_TASK_NAME).update(enabled=False)
    out = setup_command()
    assert "up to date" in out and "it is disabled, so beat does not send it" in out
    assert not entry().enabled
    call_command("migrate", verbosity=0)
    assert not entry().enabled
    assert setup_command("--enable").startswith("updated periodic task 'django_procedures: tick' (enabled)")
    assert entry().enabled


def test_nothing_is_set_up_before_django_celery_beats_tables_exist(monkeypatch):
    PeriodicTask.objects.filter(name=PERIODIC_TASK_NAME).delete()
    monkeypatch.setattr(beat, "tables_exist", lambda using="default": False)
    apps.setup_beat_after_migrate(using="default", verbosity=0)
    assert not PeriodicTask.objects.filter(name=PERIODIC_TASK_NAME).exists()
    with pytest.raises(CommandError, match=r"django-celery-beat's tables do not exist on 'default' yet: run "
                                           r"manage\.py migrate"):
        setup_command()


def test_tables_exist_reads_the_database():
    assert beat.tables_exist("default")


def test_a_check_asks_for_django_celery_beat(monkeypatch):
    from django.apps import apps as registry

    assert apps.check_installed_apps() == []
    monkeypatch.setattr(registry, "is_installed", lambda name: name != "django_celery_beat")
    [error] = apps.check_installed_apps()
    assert error.id == "django_procedures.E101" and "'django_celery_beat' is not in INSTALLED_APPS" in error.msg


@pytest.mark.django_db(False)
def test_the_core_imports_and_starts_without_celery():
    """With celery and django_celery_beat unimportable, Django starts with django_procedures and every core
    module imports (the contrib package is the only one that needs them)."""
    script = textwrap.dedent("""
        import pkgutil, sys
        sys.modules["celery"] = sys.modules["django_celery_beat"] = sys.modules["kombu"] = None
        import django
        from django.conf import settings
        settings.configure(INSTALLED_APPS=["django.contrib.admin", "django.contrib.auth", "django.contrib.contenttypes",
                                           "django.contrib.sessions", "django.contrib.messages", "django_procedures"],
                           DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}},
                           USE_TZ=True)
        django.setup()
        import django_procedures
        names = [m.name for m in pkgutil.walk_packages(django_procedures.__path__, "django_procedures.")
                 if ".contrib" not in m.name and ".migrations" not in m.name]
        for name in names:
            __import__(name)
        print(len(names), "modules")
    """)
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert int(done.stdout.split()[0]) > 30


def test_an_unknown_database_is_a_command_error(db):
    with pytest.raises(CommandError, match=r"--database 'nope' is not in DATABASES; give one of 'default'"):
        setup_command("--database", "nope")
