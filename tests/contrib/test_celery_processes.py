"""Celery end to end (PostgreSQL and the Redis broker): ``celery beat`` + ``celery worker`` + ``procedures_worker``.

Real processes on the test database: beat reads the ``django_procedures: tick`` entry that
``migrate`` set up with django-celery-beat's ``DatabaseScheduler`` and sends
``django_procedures.tick`` every second through Redis; a Celery worker runs the tick; a
``procedures_worker`` runs the procedures the ticks start. Phase one has one beat and no other
ticker: a 1 s fixed_rate schedule yields runs that complete. Phase two adds a second beat and a
second ``procedures_worker --with-scheduler``: three tickers, each every second, race for every
tick, and none starts twice. The test uses a Celery queue of its own, so runs sharing the Redis database do not meet;
every process is killed, and the queue's keys deleted, when it ends.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from django.conf import settings
from django.db.models import Count

from django_procedures import register_schedule
from django_procedures.contrib.celery import PERIODIC_TASK_NAME, TASK_NAME
from django_procedures.contrib.celery.beat import setup_periodic_task
from django_procedures.models import ProcedureRun, Schedule
from django_procedures.store import schedules as schedule_ops
from testproject.testapp.procedures import Heartbeat
from tests.runtime.processes import ROOT, WorkerProcess, Workers, database_url, wait_for

pytestmark = [pytest.mark.subprocess, pytest.mark.django_db(transaction=True)]

SECOND = timedelta(seconds=1)
#: Seconds to wait for anything that is only a matter of time (Celery starts slowly on a loaded machine).
WAIT = 120


class Group(WorkerProcess):
    """A process started in its own session: killing it kills its whole process group."""

    def kill_now(self) -> None:
        if self.popen.poll() is None:
            try:
                os.killpg(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            self.popen.wait(10)
        except subprocess.TimeoutExpired:  # pragma: no cover
            pass


class Stack(Workers):
    """``procedures_worker`` processes (as :class:`Workers`) plus ``celery`` processes on one queue."""

    def __init__(self, tmp_path: Path) -> None:
        super().__init__(tmp_path)
        self.queue = f"procedures-test-{uuid.uuid4().hex[:10]}"
        self.broker = os.environ.get("CELERY_BROKER_URL") or settings.CELERY_BROKER_URL

    def celery(self, name: str, *args: str) -> WorkerProcess:
        env = {**os.environ, "DATABASE_URL": database_url(), "DJANGO_SETTINGS_MODULE": "testproject.settings",
               "PYTHONUNBUFFERED": "1", "PROCEDURES_JSON": "{}", "CELERY_BROKER_URL": self.broker,
               "CELERY_TASK_DEFAULT_QUEUE": self.queue}
        command = [sys.executable, "-m", "celery", "-A", "testproject", *args]
        log_path = self.tmp_path / f"{name}.log"
        with open(log_path, "wb") as log:
            log.write(f"$ {' '.join(command)}\n".encode())
            log.flush()
            popen = subprocess.Popen(command, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=log,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        process = Group(name, popen, log_path, time.monotonic())
        self.started.append(process)
        return process

    def beat(self, name: str) -> WorkerProcess:
        return self.celery(name, "beat", "-S", "django_celery_beat.schedulers:DatabaseScheduler", "--loglevel",
                           "INFO", "--schedule", str(self.tmp_path / f"{name}-schedule"))

    def celery_worker(self, name: str) -> WorkerProcess:
        # Two threads: ticks sent by two beats can run at the same time.
        return self.celery(name, "worker", "--pool", "threads", "--concurrency", "2", "--loglevel", "INFO",
                           "--queues", self.queue,
                           "--hostname", f"{name}-{self.queue}@%h", "--without-gossip", "--without-mingle",
                           "--without-heartbeat")

    def forget_queue(self) -> None:
        import redis

        client = redis.Redis.from_url(self.broker)
        client.delete(self.queue, f"_kombu.binding.{self.queue}", f"_kombu.binding_permanent.{self.queue}")
        client.close()


@pytest.fixture
def stack(transactional_db, tmp_path):
    import redis

    pool = Stack(tmp_path)
    try:
        redis.Redis.from_url(pool.broker, socket_connect_timeout=2).ping()
    except redis.RedisError as error:
        pytest.fail(f"these tests need the Redis broker at {pool.broker} (CELERY_BROKER_URL): {error}")
    yield pool
    pool.close()
    pool.forget_queue()
    print(pool.describe())


def sent_ticks(beat: WorkerProcess) -> int:
    return len(beat.log_lines(containing=f"Sending due task {PERIODIC_TASK_NAME} ({TASK_NAME})"))


def ran_ticks(worker: WorkerProcess) -> int:
    return sum(" succeeded in " in line for line in worker.log_lines(containing=f"Task {TASK_NAME}["))


def runs_of(schedule: Schedule, status: str = "done") -> int:
    return ProcedureRun.objects.filter(schedule=schedule, status=status).count()


def test_celery_beat_ticks_a_one_second_schedule_and_two_beats_never_start_a_tick_twice(stack):
    assert setup_periodic_task().every == 1  # migrate made it; make sure a test before did not change it
    schedule, _ = register_schedule("celery-every-second", Heartbeat, period=SECOND)
    first_tick = schedule.next_tick_at

    # Phase one: one beat, one Celery worker, one procedures_worker that does not tick.
    runner = stack.start("--concurrency", "2", lease_seconds=30)
    celery_worker = stack.celery_worker("celery-worker")
    beat_one = stack.beat("beat-1")
    wait_for(lambda: runs_of(schedule) >= 3, timeout=WAIT, what="three runs started by celery beat", workers=stack)
    # Nothing else ticks (the runner has no scheduler): those runs were started by ticks that beat sent and
    # the Celery worker ran. Celery logs each when it is done with it, which may be after the run ended.
    wait_for(lambda: sent_ticks(beat_one) >= 3 and ran_ticks(celery_worker) >= 3, timeout=WAIT,
             what="beat and the Celery worker to log three ticks", workers=stack)
    assert not runner.log_lines(containing="scheduler")

    # Phase two: a second beat and a procedures_worker --with-scheduler (every second, too) tick the schedule.
    beat_two = stack.beat("beat-2")
    stack.start("--with-scheduler", "--concurrency", "1", lease_seconds=30)
    before = runs_of(schedule)
    wait_for(lambda: sent_ticks(beat_two) >= 4, timeout=WAIT, what="the second beat to send four ticks",
             workers=stack)
    wait_for(lambda: runs_of(schedule) >= before + 3, timeout=WAIT, what="three more runs", workers=stack)
    # Every tick the Celery worker ran was sent by one of the beats (its "succeeded" line is counted first:
    # the "Sending" line of the same tick was written before it).
    ran = ran_ticks(celery_worker)
    assert sent_ticks(beat_one) + sent_ticks(beat_two) >= ran >= 3

    schedule_ops.pause(schedule.name, reason="test over")
    wait_for(lambda: Schedule.objects.get(id=schedule.id).active_runs == 0, timeout=WAIT,
             what="the last run to end", workers=stack)
    schedule.refresh_from_db()
    runs = list(ProcedureRun.objects.filter(schedule=schedule).values_list("tick_at", "status"))
    duplicates = (ProcedureRun.objects.filter(schedule=schedule).values("tick_at").annotate(n=Count("id"))
                  .filter(n__gt=1))
    assert not duplicates.exists(), "a tick started twice"
    assert {status for _, status in runs} == {"done"}
    handled = (schedule.next_tick_at - first_tick) // SECOND
    assert handled == len(runs) + len(schedule.pending_ticks) + schedule.skips, schedule.snapshot()
    assert (schedule.runs, schedule.failures) == (len(runs), 0)
    for process in stack.started:
        assert "Traceback" not in process.log() and not process.log_lines(level="ERROR"), process.describe()
