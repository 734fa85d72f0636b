"""The public surface: what the package root exports, handles, submit options and async submits."""

import asyncio
import re
import threading
import time
from datetime import timedelta
from pathlib import Path

import pytest
from django.db import connection

import django_procedures
from django_procedures import (
    ChildResult,
    Context,
    NoOutput,
    Procedure,
    RunStatus,
    Status,
    SubmitOptions,
    delete_schedule,
    get_handle,
    pause_schedule,
    register_schedule,
    resume_schedule,
    step,
    trigger_schedule,
)
from django_procedures.models import ProcedureRun, Schedule
from django_procedures.testing import drain
from testproject.testapp.procedures import Heartbeat, Leaf, Refuses, ThreeSteps

ROOT = Path(__file__).resolve().parent.parent


class SpawnsWithOptions(Procedure):
    """Spawns two leaves through ``using(...).child(...)``."""

    type_name = "tests.SpawnsWithOptions"

    @step
    def spawn(self, ctx):
        return Status.suspended([Leaf.using(queue="children", priority=3).child({"n": n}) for n in (1, 2)])

    @step
    def collect(self, ctx):
        return Status.done(output=sorted(c.output for c in ctx.children))


def test_the_root_exports_what_the_docs_tell_users_to_use():
    from django_procedures.policy.status import RunStatus as InnerRunStatus
    from django_procedures.runtime.context import Context as InnerContext
    from django_procedures.store.tree import ChildResult as InnerChildResult

    assert (RunStatus, Context, ChildResult) == (InnerRunStatus, InnerContext, InnerChildResult)
    for name in django_procedures.__all__:
        assert getattr(django_procedures, name) is not None, name
    assert re.fullmatch(r"\d+\.\d+\.\d+\S*", django_procedures.__version__)


def test_no_doc_sends_users_into_internal_modules():
    # An import, or a class named by its internal path; logger names (``django_procedures.store``) are fine.
    internal = re.compile(r"(from|import) django_procedures\.(store|runtime|policy)\b"
                          r"|`django_procedures\.(store|runtime|policy)\.\w+\.[A-Z]")
    found = [f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
             for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
             for n, line in enumerate(path.read_text().splitlines(), 1) if internal.search(line)]
    assert found == []


# -- handles ------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_status_is_a_run_status_and_output_refuses_until_done():
    handle = ThreeSteps.submit({})
    assert handle.status is RunStatus.READY and handle.status == "ready"
    assert handle.is_finished is False
    with pytest.raises(NoOutput, match=re.escape("has not finished yet (it is ready); call wait() first")):
        _ = handle.output
    with pytest.raises(ValueError):  # as TaskResult.return_value in django.tasks
        _ = handle.output
    drain()
    handle.refresh()
    assert handle.status is RunStatus.DONE and handle.is_finished
    assert handle.output == {"done": ["one", "two", "three"]}


@pytest.mark.django_db
@pytest.mark.parametrize(("options", "error", "message"), [
    ({"timeout": float("nan")}, ValueError, "timeout must be a number of seconds of at least 0, or None to wait "
                                            "for ever; got nan"),
    ({"timeout": -1}, ValueError, "timeout must be a number of seconds of at least 0"),
    ({"timeout": "30"}, TypeError, "timeout must be a number of seconds; got str '30'"),
    ({"poll": 0}, ValueError, "poll must be a positive, finite number of seconds; got 0"),
    ({"poll": float("nan")}, ValueError, "poll must be a positive, finite number of seconds"),
])
def test_a_wait_that_could_never_end_or_time_out_is_refused_before_waiting(options, error, message):
    handle = ThreeSteps.submit({})
    drain()  # even a finished procedure: the arguments are checked first, not only while waiting
    with pytest.raises(error, match=re.escape(message)):
        handle.wait(**options)
    with pytest.raises(error, match=re.escape(message)):
        asyncio.run(handle.await_result(**options))


@pytest.mark.django_db
def test_an_infinite_timeout_waits_for_ever_and_zero_checks_once():
    handle = ThreeSteps.submit({})
    with pytest.raises(TimeoutError, match="is still ready after 0 seconds"):
        handle.wait(timeout=0)
    drain()
    assert handle.wait(timeout=float("inf")) is RunStatus.DONE


@pytest.mark.django_db
def test_output_of_a_failed_procedure_says_it_failed_and_why():
    handle = Refuses.submit({})
    drain()
    assert handle.refresh().status == "failed" and handle.is_finished
    with pytest.raises(NoOutput, match="ended failed, so it has no output; its error: NonRetryable: the tenant does"):
        _ = handle.output


@pytest.mark.django_db
def test_created_tells_a_new_procedure_from_an_existing_key():
    first = ThreeSteps.submit({}, key="job:1")
    again = ThreeSteps.submit({}, key="job:1")
    assert (first.created, again.created, again.id) == (True, False, first.id)
    handles = ThreeSteps.submit_many([{}, {}, {}], keys=["job:1", None, "job:2"])
    assert [h.created for h in handles] == [False, True, True]
    assert handles[0].id == first.id
    assert get_handle(first.id).created is False


# -- submit options -----------------------------------------------------------------------------


@pytest.mark.django_db
def test_using_submits_with_its_options_and_falls_back_to_the_class():
    options = ThreeSteps.using(queue="reports", priority=7)
    assert isinstance(options, SubmitOptions)
    handle = options.using(run_after=timedelta(hours=1), key="r:1").submit({"a": 1})
    row = ProcedureRun.objects.get(id=handle.id)
    assert (row.queue, row.priority, row.key, row.state) == ("reports", 7, "r:1", {"a": 1})
    assert row.run_at - row.created_at == timedelta(hours=1)
    assert options.key is None  # using() returned a copy
    plain = ProcedureRun.objects.get(id=ThreeSteps.using().submit().id)
    assert (plain.queue, plain.priority) == ("default", 0)
    many = ThreeSteps.using(priority=2).submit_many([{}, {}], keys=["m:1", "m:2"])
    assert set(ProcedureRun.objects.filter(id__in=[h.id for h in many]).values_list("priority", flat=True)) == {2}


def test_using_with_a_key_cannot_name_many_procedures_nor_a_child():
    with pytest.raises(TypeError, match=re.escape("pass keys=[...] (one per state) to submit_many")):
        ThreeSteps.using(key="k").submit_many([{}, {}])
    with pytest.raises(TypeError, match="take no idempotency key; drop key="):
        Leaf.using(key="k").child({})


@pytest.mark.django_db
def test_children_made_with_using_carry_its_options():
    handle = SpawnsWithOptions.submit({})
    drain()
    assert handle.refresh().status == "done" and handle.output == [2, 4]
    kids = ProcedureRun.objects.filter(parent_id=handle.id)
    assert set(kids.values_list("queue", "priority")) == {("children", 3)}


# -- async --------------------------------------------------------------------------------------


def _close_connections_of_the_sync_thread():
    from asgiref.sync import sync_to_async

    def close():
        connection.close()  # this thread's connection (``connection.close`` would bind the caller's)

    asyncio.run(sync_to_async(close)())


@pytest.mark.django_db(transaction=True)
def test_async_submit_refresh_and_await_result():
    async def main():
        handle = await ThreeSteps.asubmit({}, key="async:1")
        again = await ThreeSteps.using(key="async:1").asubmit({})
        many = await ThreeSteps.asubmit_many([{}, {}])
        assert (handle.created, again.created, again.id) == (True, False, handle.id)
        assert (await handle.arefresh()).status == "ready"
        from asgiref.sync import sync_to_async

        await sync_to_async(drain)()
        statuses = [await h.await_result(timeout=60) for h in (handle, *many)]
        assert statuses == ["done", "done", "done"]
        assert handle.output == {"done": ["one", "two", "three"]}
        assert (await django_procedures.aget_handle(handle.id)).id == handle.id

    try:
        asyncio.run(main())
    finally:
        _close_connections_of_the_sync_thread()


# -- wait() woken by the database ---------------------------------------------------------------


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_the_final_transition_of_an_awaited_procedure_notifies_its_own_channel_and_no_other_does():
    import psycopg

    from django_procedures.store.notify import finished_channel, mark_awaited

    quiet = ThreeSteps.submit({})
    params = connection.get_connection_params()
    params.pop("cursor_factory", None)
    params.pop("context", None)
    with psycopg.connect(**params, autocommit=True) as listener:
        listener.execute(f'LISTEN "{finished_channel(quiet.id)}"')
        drain()  # nobody awaits it: its completion must not NOTIFY (nor take the notification lock)
        handle, other = ThreeSteps.submit({}), Refuses.submit({})
        for h in (handle, other):
            listener.execute(f'LISTEN "{finished_channel(h.id)}"')
            mark_awaited(h.id)
        drain()
        heard = {}
        for note in listener.notifies(timeout=60, stop_after=2):  # the quiet one, had it been sent, came first
            heard[note.channel] = note.payload
    assert quiet.refresh().status == "done"
    assert heard == {finished_channel(handle.id): "done", finished_channel(other.id): "failed"}


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_wait_is_woken_by_the_final_transition_not_by_polling(monkeypatch):
    from django_procedures import handle as handle_module

    monkeypatch.setattr(handle_module, "RECHECK_SECONDS", 3600.0)  # no periodic re-read to hide behind
    handle = ThreeSteps.submit({})
    result = {}

    def waiter():
        try:
            result["status"] = get_handle(handle.id).wait(poll=3600)
        finally:
            connection.close()

    thread = threading.Thread(target=waiter, daemon=True)
    thread.start()
    # Only once the waiter listens (it marks the procedure awaited after its LISTEN) is there a wake-up to test.
    deadline = time.monotonic() + 60
    while not ProcedureRun.objects.filter(id=handle.id, awaited=True).exists():
        assert time.monotonic() < deadline, "the waiter never started listening"
        time.sleep(0.01)
    drain()
    thread.join(60)
    assert not thread.is_alive(), "wait() was not woken by the procedure's final transition"
    assert result["status"] is RunStatus.DONE


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_wait_falls_back_to_polling_when_its_listening_connection_is_dropped(monkeypatch):
    from django_procedures import handle as handle_module
    from django_procedures.store.notify import finished_channel

    monkeypatch.setattr(handle_module, "RECHECK_SECONDS", 3600.0)
    handle = ThreeSteps.submit({})
    result = {}

    def waiter():
        try:
            result["status"] = get_handle(handle.id).wait(poll=0.05)
        except BaseException as error:
            result["error"] = error
        finally:
            connection.close()

    thread = threading.Thread(target=waiter, daemon=True)
    thread.start()
    listen = f'LISTEN "{finished_channel(handle.id)}"'

    def terminate_listener():
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query = %s", [listen])
            return cursor.fetchall()

    deadline = time.monotonic() + 60
    while not terminate_listener():
        assert time.monotonic() < deadline, "wait() never listened"
        time.sleep(0.05)
    drain()
    thread.join(60)
    assert not thread.is_alive(), "wait() did not notice the procedure finish once its connection was gone"
    assert result == {"status": RunStatus.DONE}


# -- schedule operations ------------------------------------------------------------------------


@pytest.mark.django_db
def test_schedule_operations_from_the_root():
    schedule, _ = register_schedule("public-ops", Heartbeat, period=timedelta(minutes=1))
    pause_schedule("public-ops", reason="maintenance")
    assert Schedule.objects.filter(name="public-ops", enabled=False, disabled_reason="maintenance").exists()
    resume_schedule(schedule)
    assert Schedule.objects.get(name="public-ops").enabled
    assert trigger_schedule(schedule.pk) == {"started": 1, "pending": 0, "skipped": 0}
    deleted = delete_schedule(schedule, by="ops")
    assert (deleted.name, len(deleted.cancelled), deleted.kept) == ("public-ops", 1, 0)
    assert not Schedule.objects.filter(name="public-ops").exists()


SCHEDULE_VERBS = ("register_schedule", "declare_schedule", "tick", "trigger_schedule", "pause_schedule",
                  "resume_schedule", "delete_schedule")


def test_the_schedule_verbs_come_from_one_public_module_and_carry_no_internals():
    """Issue 32: each schedule verb is defined in ``django_procedures.scheduling``, what the reference documents;
    marking a schedule as declared in code is the store's business, not a keyword users see."""
    import inspect

    from django_procedures import scheduling

    assert set(SCHEDULE_VERBS) <= set(django_procedures.__all__)
    for name in SCHEDULE_VERBS:
        verb = getattr(django_procedures, name)
        assert verb is getattr(scheduling, name), name
        assert verb.__module__ == "django_procedures.scheduling", name
        assert f"::: django_procedures.scheduling.{name}" in (ROOT / "docs" / "reference.md").read_text(), name
    assert "from_code" not in inspect.signature(register_schedule).parameters
    with pytest.raises(TypeError, match="from_code"):
        register_schedule("x", Heartbeat, period=timedelta(minutes=1), from_code=True)


def test_using_checks_its_options_where_they_are_written():
    with pytest.raises(TypeError, match="queue"):
        ThreeSteps.using(queue=5)
    with pytest.raises(ValueError, match="key"):
        ThreeSteps.using().using(key="  ")
    assert ThreeSteps.using(run_after=30).run_after == 30  # seconds from now, as submit() takes them
