"""ProceduresBackend in-process, through drain(): enqueue, results, retries, atomic tasks, bad input."""

import uuid
from datetime import datetime, timedelta

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.db import transaction
from django.test import override_settings
from django.utils import timezone

from django_procedures import RetryPolicy, registry
from django_procedures.models import ProcedureRun
from django_procedures.tasks import ProceduresBackend, ProceduresTask, TaskCancelled
from django_procedures.tasks.compat import (
    InvalidTask,
    TaskResultDoesNotExist,
    TaskResultStatus,
    task_backends,
    task_enqueued,
    task_finished,
    task_started,
)
from django_procedures.testing import drain

try:
    from django.tasks import task
except ImportError:  # Django 5.2: the django-tasks backport
    from django_tasks import task
from testproject.testapp import tasks
from testproject.testapp.models import Effect
from testproject.testapp.procedures import ThreeSteps

pytestmark = pytest.mark.django_db


def result_of(result_id):
    return task_backends["default"].get_result(result_id)


def test_enqueue_run_and_read_the_result():
    result = tasks.add.enqueue(2, 3)
    assert (result.status, result.args, result.kwargs, result.backend) == (TaskResultStatus.READY, [2, 3], {},
                                                                          "default")
    assert result.enqueued_at is not None and result.worker_ids == [] and result.errors == []
    assert ProcedureRun.objects.get(id=result.id).type_name == "task:testproject.testapp.tasks.add"

    assert drain().claimed == 1
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == 5
    assert result.errors == [] and len(result.worker_ids) == 1 and result.attempts == 1
    assert result.enqueued_at <= result.started_at <= result.last_attempted_at <= result.finished_at
    again = tasks.add.get_result(result.id)  # the task's own lookup checks the function too
    assert (again.status, again.return_value, again.task.func) == (TaskResultStatus.SUCCESSFUL, 5, tasks.add.func)


def test_queue_priority_and_run_after_are_kept():
    later = timezone.now() + timedelta(hours=1)
    result = tasks.send_email.using(run_after=later).enqueue("a@example.com", subject="hi")
    row = ProcedureRun.objects.get(id=result.id)
    assert (row.queue, row.priority, row.run_at) == ("emails", 10, later)
    assert drain().claimed == 0  # deferred
    assert drain(now=later).claimed == 1
    done = result_of(result.id)
    assert done.return_value == {"sent_to": "a@example.com", "subject": "hi"}
    assert (done.task.queue_name, done.task.priority, done.kwargs) == ("emails", 10, {"subject": "hi"})


def test_priority_orders_the_claim():
    low = tasks.add.using(priority=-5).enqueue(1, 1)
    high = tasks.add.using(priority=50).enqueue(2, 2)
    drain()
    assert result_of(high.id).started_at <= result_of(low.id).started_at
    assert ProcedureRun.objects.get(id=high.id).priority == 50


@pytest.mark.parametrize(("change", "message"), [
    ({"queue_name": "nowhere"}, "Queue 'nowhere' is not valid for backend."),
    ({"priority": 101}, "priority must be a whole number between -100 and 100."),
    ({"run_after": datetime(2030, 1, 1)}, "run_after must be an aware datetime."),
])
def test_invalid_tasks_are_refused_as_the_framework_does(change, message):
    with pytest.raises(InvalidTask, match=message):
        tasks.add.using(**change)
    assert not ProcedureRun.objects.exists()


def test_a_function_that_is_not_module_level_is_refused():
    def local():
        return 1

    with pytest.raises(InvalidTask, match="Task function must be defined at a module level"):
        ProceduresTask(func=local)


def test_a_non_json_argument_is_refused_by_name_and_nothing_is_written():
    with pytest.raises(TypeError, match=r"cannot enqueue testproject\.testapp\.tasks\.send_email: argument "
                                        r"'subject' is a datetime, which is not JSON"):
        tasks.send_email.enqueue("a@example.com", subject=timezone.now())
    with pytest.raises(TypeError, match=r"argument 'to'\[0\] is a set"):
        tasks.send_email.enqueue([{1, 2}])
    with pytest.raises(TypeError, match="argument 'b' is nan"):
        tasks.add.enqueue(1, float("nan"))
    assert not ProcedureRun.objects.exists()


def nested(levels, kind=list):
    """``levels`` dicts or lists, each in the one before."""
    value = kind()
    for _ in range(levels - 1):
        value = [value] if kind is list else {"a": value}
    return value


@pytest.mark.parametrize("kind", [list, dict])
def test_an_argument_nested_too_deeply_is_refused_saying_how_deep_is_allowed(kind):
    message = (r"cannot enqueue testproject\.testapp\.tasks\.add: argument 'a' is nested more than 98 levels deep "
               r"\(dicts and lists, the value itself counting as one\); flatten it, or pass the deep part as a JSON")
    with pytest.raises(TypeError, match=message):
        tasks.add.enqueue(nested(5000, kind), [])
    with pytest.raises(TypeError, match="argument 'b' is nested more than 98 levels deep"):
        tasks.add.enqueue(b=nested(99, kind), a=[])
    assert not ProcedureRun.objects.exists()
    result = tasks.add.enqueue([nested(97)], [])  # 98 levels: the deepest allowed, stored and run
    drain()
    assert result_of(result.id).return_value == [nested(97)]


def returns_deep():
    return nested(5000)


def test_a_return_value_nested_too_deeply_fails_the_attempt_saying_so():
    result = ProceduresTask(func=returns_deep).enqueue()
    drain()
    row = ProcedureRun.objects.get(id=result.id)
    assert row.status == "failed"
    assert "the return value of tests.tasks.test_backend.returns_deep is nested more than 100 levels deep" in row.error


def test_tuples_and_bytes_are_converted_as_the_framework_does():
    result = tasks.add.enqueue((1, 2), (3,))
    assert result.args == [[1, 2], [3]]
    drain()
    assert result_of(result.id).return_value == [1, 2, 3]


def test_a_rolled_back_transaction_leaves_no_task_and_sends_no_signal(django_capture_on_commit_callbacks):
    sent = []
    task_enqueued.connect(receiver := lambda sender, task_result, **kw: sent.append(task_result.id), weak=False)
    try:
        with django_capture_on_commit_callbacks(execute=True), pytest.raises(RuntimeError):
            with transaction.atomic():
                tasks.add.enqueue(1, 2)
                raise RuntimeError("roll back")
        assert not ProcedureRun.objects.exists()
        assert drain().claimed == 0
        with django_capture_on_commit_callbacks(execute=True):
            kept = tasks.add.enqueue(1, 2)
        assert sent == [kept.id]
    finally:
        task_enqueued.disconnect(receiver)


def test_retries_record_one_error_and_one_worker_per_attempt():
    result = tasks.flaky.enqueue(succeed_on=3)
    drain()
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == {"attempt": 3, "worker_ids": 3}  # context.attempt is 1-based
    assert [e.exception_class_path for e in result.errors] == ["builtins.ValueError"] * 2
    assert result.errors[0].exception_class is ValueError
    for n, error in enumerate(result.errors, start=1):  # each attempt's own traceback, not only the last one's
        assert error.traceback.startswith("Traceback (most recent call last)")
        assert f"attempt {n} fails on purpose" in error.traceback
    assert len(result.worker_ids) == 3


def test_a_task_that_keeps_failing_fails_with_its_own_exception_class():
    result = tasks.declines.enqueue("4242")
    drain()
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert [e.exception_class_path for e in result.errors] == ["testproject.testapp.tasks.Declined"] * 3
    assert result.errors[-1].exception_class is tasks.Declined
    assert "Traceback" in result.errors[-1].traceback and "card 4242 declined" in result.errors[-1].traceback
    with pytest.raises(ValueError, match="Task failed"):
        result.return_value  # noqa: B018


def test_without_a_retry_policy_a_task_runs_once():
    result = tasks.returns_a_date.enqueue()
    drain()
    result.refresh()
    assert result.status == TaskResultStatus.FAILED and len(result.worker_ids) == 1
    row = ProcedureRun.objects.get(id=result.id)
    assert "the return value of testproject.testapp.tasks.returns_a_date is a date, which is not JSON" in row.error
    assert row.failure_can_retry  # nothing is lost: the arguments are kept for a manual retry


def fails_always():
    raise LookupError("no such thing")


def test_options_retry_is_the_default_policy():
    with override_settings(TASKS={"default": {"BACKEND": "django_procedures.tasks.ProceduresBackend",
                                              "OPTIONS": {"RETRY": {"max_attempts": 2, "initial_delay": 0}}}}):
        result = ProceduresTask(func=fails_always).enqueue()
        drain()
        assert [e.exception_class_path for e in result_of(result.id).errors] == ["builtins.LookupError"] * 2


def test_with_any_queue_allowed_a_queue_no_worker_could_serve_is_refused_at_enqueue():
    """``QUEUES: []`` lets the framework take any name; the procedures' own queue check still runs (one door)."""
    with override_settings(TASKS={"default": {"BACKEND": "django_procedures.tasks.ProceduresBackend",
                                              "QUEUES": []}}):
        with pytest.raises(ValueError, match="cannot be served"):
            ProceduresTask(func=fails_always, queue_name="a,b").enqueue()
    assert not ProcedureRun.objects.exists()


@pytest.mark.parametrize("options", [{"RETRY": {"max_attempts": 0}}, {"RETRY": 3}, {"RETRIES": {}}])
def test_bad_options_are_configuration_errors(options):
    with pytest.raises(ImproperlyConfigured, match="OPTIONS"):
        ProceduresBackend("default", {"OPTIONS": options})


def takes_no_context(n):
    return n


def test_bad_task_options_are_refused():
    with pytest.raises(InvalidTask, match=r"retry must be a django_procedures\.RetryPolicy"):
        ProceduresTask(func=fails_always, retry={"max_attempts": 2})
    with pytest.raises(InvalidTask, match="atomic must be True or False; got 'yes'"):
        ProceduresTask(func=fails_always, atomic="yes")
    with pytest.raises(InvalidTask, match="Task takes context but does not have a first argument of 'context'"):
        ProceduresTask(func=takes_no_context, takes_context=True)
    assert not ProcedureRun.objects.exists()
    assert ProceduresTask(func=fails_always, retry=RetryPolicy(max_attempts=2)).retry.max_attempts == 2


def test_an_atomic_task_commits_its_writes_only_with_the_attempt_that_succeeds():
    result = tasks.record_then_fail.enqueue(fail_until=2)
    drain()
    assert result_of(result.id).return_value == 2
    assert list(Effect.objects.filter(procedure_id=result.id).values_list("attempt", flat=True)) == [2]


def test_async_tasks_run():
    result = tasks.async_add.enqueue(20, 22)
    drain()
    assert result_of(result.id).return_value == 42
    assert [s.is_async for s in registry.get(f"task:{tasks.async_add.module_path}").steps] == [True]


def test_an_async_task_with_its_context_runs_under_drain():
    result = tasks.where_am_i.enqueue()
    drain()
    assert result_of(result.id).return_value["attempt"] == 1


async def module_level_fetch():
    pass


def test_an_atomic_async_task_is_refused_where_it_is_declared():
    with pytest.raises(InvalidTask, match=r"module_level_fetch is an async def task with atomic=True: an async task "
                                          r"is never atomic"):
        task(atomic=True)(module_level_fetch)


def test_unknown_ids_do_not_exist():
    for result_id in (str(uuid.uuid4()), "not-a-uuid", str(ThreeSteps.submit().id)):
        with pytest.raises(TaskResultDoesNotExist):
            result_of(result_id)


def test_a_cancelled_task_reads_as_failed_saying_so():
    from django_procedures import get_handle

    result = tasks.add.enqueue(1, 2)
    get_handle(result.id).cancel(by="ops")
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert [e.exception_class_path for e in result.errors] == ["django_procedures.tasks.results.TaskCancelled"]
    assert result.errors[0].exception_class is TaskCancelled
    assert "cancelled by ops" in result.errors[0].traceback


def test_started_and_finished_signals(django_capture_on_commit_callbacks):
    seen = []

    def started(sender, task_result, **kwargs):
        seen.append(("started", sender, task_result.status, len(task_result.worker_ids)))

    def finished(sender, task_result, **kwargs):
        seen.append(("finished", sender, task_result.status, task_result.return_value))

    task_started.connect(started)
    task_finished.connect(finished)
    try:
        with django_capture_on_commit_callbacks(execute=True):
            tasks.add.enqueue(1, 1)
        with django_capture_on_commit_callbacks(execute=True):
            drain()
    finally:
        task_started.disconnect(started)
        task_finished.disconnect(finished)
    assert seen == [("started", ProceduresBackend, TaskResultStatus.RUNNING, 1),
                    ("finished", ProceduresBackend, TaskResultStatus.SUCCESSFUL, 2)]


def test_a_task_enqueued_by_a_step_commits_with_the_step():
    from testproject.testapp.procedures import EnqueuesATask

    kept = EnqueuesATask.submit({"numbers": [4, 5]})
    dropped = EnqueuesATask.submit({"numbers": [6, 7], "fail": True})
    drain()  # runs the procedures, then the task the committed step enqueued
    task_id = ProcedureRun.objects.get(id=kept.id).state["task_id"]
    assert result_of(task_id).return_value == 9
    assert ProcedureRun.objects.get(id=dropped.id).status == "failed"
    assert ProcedureRun.objects.filter(type_name="task:testproject.testapp.tasks.add").count() == 1


def test_a_manual_retry_runs_a_failed_task_again_and_its_attempts_keep_counting():
    from django_procedures import get_handle

    result = tasks.flaky.enqueue(succeed_on=5)
    drain()
    result.refresh()
    assert (result.status, len(result.errors)) == (TaskResultStatus.FAILED, 3)  # max_attempts=3
    get_handle(result.id).retry(by="ops")
    drain()
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == {"attempt": 5, "worker_ids": 5}
    assert (len(result.errors), len(result.worker_ids)) == (4, 5)


@pytest.mark.parametrize(("final", "path", "can_retry"), [
    (False, "builtins.PermissionError", True),  # listed in the task's RetryPolicy.non_retryable
    (True, "django_procedures.exceptions.NonRetryable", False),  # NonRetryable(manual_retry=False)
])
def test_non_retryable_exceptions_fail_the_task_at_once(final, path, can_retry):
    result = tasks.forbidden.enqueue(final)
    drain()
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert [e.exception_class_path for e in result.errors] == [path]  # one attempt of the five allowed
    assert ProcedureRun.objects.get(id=result.id).failure_can_retry is can_retry


def test_the_async_api():
    from asgiref.sync import async_to_sync

    result = async_to_sync(tasks.add.aenqueue)(3, 4)
    drain()
    read = async_to_sync(tasks.add.aget_result)(result.id)
    assert (read.status, read.return_value) == (TaskResultStatus.SUCCESSFUL, 7)
    async_to_sync(result.arefresh)()
    assert result.return_value == 7


def test_cancelling_sends_task_finished(django_capture_on_commit_callbacks):
    from django_procedures import get_handle

    seen = []

    def finished(sender, task_result, **kwargs):
        seen.append((task_result.id, task_result.status))

    task_finished.connect(finished)
    try:
        result = tasks.add.enqueue(1, 2)
        with django_capture_on_commit_callbacks(execute=True):
            get_handle(result.id).cancel()
    finally:
        task_finished.disconnect(finished)
    assert seen == [(result.id, TaskResultStatus.FAILED)]


def test_a_failing_task_started_receiver_is_logged_and_does_not_fail_the_task(caplog):
    def broken(sender, task_result, **kwargs):
        raise RuntimeError("receiver bug")

    task_started.connect(broken)
    try:
        result = tasks.add.enqueue(2, 2)
        drain()
    finally:
        task_started.disconnect(broken)
    assert result_of(result.id).return_value == 4
    assert any("task_started receiver" in r.getMessage() and r.name == "django_procedures.tasks"
               for r in caplog.records)
