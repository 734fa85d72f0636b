"""Acceptance: docs/waiting.md's "Django Tasks": a task starts a procedure that waits, once per idempotency key."""

from datetime import timedelta

import pytest

from django_procedures import Procedure, Status, send_event, step
from django_procedures.models import ProcedureRun
from django_procedures.testing import drain

try:
    from django.tasks import task
except ImportError:  # Django 5.2: the backport
    from django_tasks import task

pytestmark = pytest.mark.django_db


class TaskRefund(Procedure):
    type_name = "acc.TaskRefund"

    @step
    def ask(self, ctx):
        return Status.wait_for_event("approved", "rejected", timeout=timedelta(days=2))

    @step
    def decide(self, ctx):
        return Status.done(output=ctx.event.name if ctx.event else "timed out")


@task
def refund_requested(order):
    handle = TaskRefund.submit({"order": order}, key=f"refund:{order}")
    return str(handle.id)


def test_a_task_starts_a_waiting_procedure_once_per_key():
    first, again = refund_requested.enqueue(7), refund_requested.enqueue(7)  # a retried task, say
    drain()
    first.refresh()
    again.refresh()
    assert first.return_value == again.return_value
    run = ProcedureRun.objects.get(key="refund:7")
    assert (str(run.id), run.status, run.waiting_for) == (first.return_value, "waiting", "event")
    send_event("refund:7", "approved")
    drain()
    run.refresh_from_db()
    assert (run.status, run.output) == ("done", "approved")
