"""Tasks of Django's Tasks framework that the test suite runs on ``ProceduresBackend``.

Imported by every process (the app's ``tasks`` module is autodiscovered when
``TASKS`` uses ``ProceduresBackend``), so worker subprocesses can claim them.
"""

import asyncio
import datetime
import os
import time
from pathlib import Path

from django_procedures import NonRetryable, RetryPolicy
from testproject.testapp.models import Effect

try:
    from django.tasks import task
except ImportError:  # Django 5.2: the django-tasks backport
    from django_tasks import task

QUICK_RETRY = RetryPolicy(max_attempts=3, initial_delay=0.0, backoff=1.0, jitter=0.0)


class Declined(Exception):
    """A task's own exception: its class path is what the result's errors report."""


@task
def noop():
    """Does nothing: what its attempt costs is the backend's own work."""


@task
def add(a, b):
    return a + b


@task(queue_name="emails", priority=10)
def send_email(to, subject="hello"):
    return {"sent_to": to, "subject": subject}


@task(takes_context=True, retry=QUICK_RETRY)
def flaky(context, succeed_on):
    """Fails until attempt ``succeed_on``; returns the attempt it succeeded on."""
    if context.attempt < succeed_on:
        raise ValueError(f"attempt {context.attempt} fails on purpose")
    return {"attempt": context.attempt, "worker_ids": len(context.task_result.worker_ids)}


@task(retry=QUICK_RETRY)
def declines(card):
    raise Declined(f"card {card} declined")


@task(takes_context=True, atomic=True, retry=QUICK_RETRY)
def record_then_fail(context, fail_until):
    """Writes an Effect row, then fails until attempt ``fail_until``: only the last attempt's row commits."""
    Effect.objects.create(procedure_id=context.task_result.id, step="record", attempt=context.attempt,
                          worker_pid=os.getpid())
    if context.attempt < fail_until:
        raise RuntimeError("rolled back with the attempt")
    return context.attempt


@task(takes_context=True, atomic=True)
def record_slowly(context, marker, seconds):
    """Writes an Effect row, touches ``marker`` with its pid, then (first attempt only) sleeps ``seconds``."""
    Effect.objects.create(procedure_id=context.task_result.id, step="record", attempt=context.attempt,
                          worker_pid=os.getpid())
    Path(marker).write_text(str(os.getpid()))
    time.sleep(seconds if context.attempt == 1 else 0)
    return {"pid": os.getpid()}


@task(retry=RetryPolicy(max_attempts=5, initial_delay=0.0, non_retryable=(PermissionError,)))
def forbidden(final):
    """Raises an exception its policy lists as non-retryable, or (``final``) a NonRetryable not worth a retry."""
    if final:
        raise NonRetryable("the account is closed", manual_retry=False)
    raise PermissionError("not allowed")


@task
def returns_a_date():
    return datetime.date(2026, 1, 1)


@task
async def async_add(a, b):
    await asyncio.sleep(0.01)
    return a + b


@task(takes_context=True)
async def where_am_i(context, pause=0.0):
    """Which thread awaited it (a worker's event loop, or the caller's under drain()), and its attempt."""
    import threading

    await asyncio.sleep(pause)
    return {"thread": threading.current_thread().name, "attempt": context.attempt}


@task(takes_context=True)
def who_am_i(context):
    return {"id": context.task_result.id, "attempt": context.attempt, "pid": os.getpid()}


if os.environ.get("TESTAPP_EXTRA_TYPES"):
    from testproject.testapp import extra_tasks  # noqa: F401  (only some workers know these tasks)


@task
def approval_requested(order):
    """docs/waiting.md's Django Tasks example: a task that starts a procedure that waits for an event."""
    from testproject.testapp.waiting import Approval

    handle = Approval.submit({"order": order}, key=f"approval:{order}")
    return str(handle.id)
