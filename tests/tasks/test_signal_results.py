"""The results a worker sends with ``task_started`` and ``task_finished``: built from what it holds, they read as
the framework would build them (its constructor, ``dataclasses.replace``), and their sender follows the settings."""

import dataclasses

import pytest
from django.test import override_settings

from django_procedures.tasks import ProceduresBackend
from django_procedures.tasks.compat import TaskResultStatus, task_finished, task_started
from django_procedures.testing import drain
from testproject.testapp import tasks

pytestmark = pytest.mark.django_db


class OtherBackend(ProceduresBackend):
    """Configured under another path: the signals' sender is the configured class."""


def signalled(django_capture_on_commit_callbacks, enqueue, on_started=None):
    """``[(signal, sender, result)]`` of the task ``enqueue()`` enqueues, drained in-process."""
    seen = []

    def started(sender, task_result, **kwargs):
        seen.append(("started", sender, task_result))
        if on_started is not None:
            on_started(task_result)

    def finished(sender, task_result, **kwargs):
        seen.append(("finished", sender, task_result))

    task_started.connect(started)
    task_finished.connect(finished)
    try:
        enqueue()
        with django_capture_on_commit_callbacks(execute=True):
            drain()
    finally:
        task_started.disconnect(started)
        task_finished.disconnect(finished)
    return seen


def test_the_finished_result_is_the_started_one_replaced_as_the_framework_would(django_capture_on_commit_callbacks):
    [(_, _, running), (_, _, done)] = signalled(
        django_capture_on_commit_callbacks,
        lambda: tasks.send_email.enqueue(["a@example.com", {"cc": [1, 2.5, None, True]}], subject="hi"))
    expected = dataclasses.replace(running, status=TaskResultStatus.SUCCESSFUL, finished_at=done.finished_at)
    for field in dataclasses.fields(done):
        if field.init:
            assert getattr(done, field.name) == getattr(expected, field.name), field.name
    assert done.return_value == {"sent_to": ["a@example.com", {"cc": [1, 2.5, None, True]}], "subject": "hi"}
    assert running.status == TaskResultStatus.RUNNING  # the started result is left as its receivers saw it
    # Fresh copies, as the constructor makes: changing one result's arguments leaves the other's alone.
    assert done.args is not running.args and done.args[0][1] is not running.args[0][1]
    assert done.kwargs is not running.kwargs


def test_arguments_a_started_receiver_changed_are_converted_as_the_framework_converts_them(
        django_capture_on_commit_callbacks):
    def change(result):
        result.args.append(("a", b"b"))  # not what the constructor leaves: a tuple, bytes

    [_, (_, _, done)] = signalled(django_capture_on_commit_callbacks, lambda: tasks.add.enqueue(1, 2), change)
    assert done.status == TaskResultStatus.SUCCESSFUL
    assert done.args == [1, 2, ["a", "b"]]
    assert done.return_value == 3


def test_the_sender_is_the_configured_backend_class_after_a_settings_change(django_capture_on_commit_callbacks):
    senders = [sender for _, sender, _ in signalled(django_capture_on_commit_callbacks, tasks.noop.enqueue)]
    assert senders == [ProceduresBackend, ProceduresBackend]
    with override_settings(TASKS={"default": {"BACKEND": f"{__name__}.OtherBackend", "QUEUES": ["default"]}}):
        seen = signalled(django_capture_on_commit_callbacks, tasks.noop.enqueue)
    # task_finished is reported for the aliases that name ProceduresBackend itself (none here).
    assert [(signal, sender) for signal, sender, _ in seen] == [("started", OtherBackend)]
