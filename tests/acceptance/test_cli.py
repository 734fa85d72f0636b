"""Acceptance: docs/cli.md and docs/operating.md read as an operator would (``call_command("procedures")``)."""

import getpass
import json
import uuid
from datetime import UTC, datetime, timedelta

import pytest

from django_procedures import NonRetryable, Procedure, Status, register_schedule, step
from django_procedures.models import Event, ProcedureRun, Schedule
from django_procedures.testing import drain
from tests.cli.helpers import cli

pytestmark = pytest.mark.django_db
ME = f"cli:{getpass.getuser()}"


class Fails(Procedure):
    type_name = "acc.Fails"

    @step
    def only(self, ctx):
        raise NonRetryable("card was declined by the bank")


class Waits(Procedure):
    type_name = "acc.Waits"

    @step
    def wait(self, ctx):
        return Status.wait_for_event("approved", timeout=timedelta(days=1))

    @step
    def after(self, ctx):
        return Status.done(output=ctx.event.payload if ctx.event else None)


def failed(n=1):
    handles = [Fails.submit({}) for _ in range(n)]
    drain()
    return [str(h.id) for h in handles]


def status(pid):
    return ProcedureRun.objects.get(id=pid).status


def one_line(result):
    return len(result.err.strip().splitlines()) == 1


def test_given_ids_are_all_or_nothing_for_retry_and_cancel():
    (bad,) = failed()
    unknown = str(uuid.uuid4())
    result = cli("retry", bad, unknown)
    assert result.code == 1 and unknown in result.err and one_line(result)
    assert status(bad) == "failed"

    waiting = Waits.submit({})
    drain()
    result = cli("cancel", str(waiting.id), bad)  # the failed one is final: nothing is cancelled
    assert result.code == 1 and bad in result.err
    assert status(waiting.id) == "waiting"


def test_retry_by_id_records_the_actor_and_resumes():
    (bad,) = failed()
    result = cli("retry", bad)
    assert result.code == 0, result.err
    run = ProcedureRun.objects.get(id=bad)
    assert run.status in ("ready", "retrying") and run.retried_by == ME


def test_cancel_records_the_actor_in_the_error():
    waiting = Waits.submit({})
    drain()
    assert cli("cancel", str(waiting.id)).code == 0
    run = ProcedureRun.objects.get(id=waiting.id)
    assert run.status == "cancelled" and f"cancelled by {ME}" in run.error


def test_list_error_matches_words_without_case_and_skips_done():
    failed()
    result = cli("list", "--error", "CARD WAS DECLINED", "--json")
    assert result.code == 0 and len(result.json()["procedures"]) == 1
    assert set(result.json()) >= {"procedures", "limit", "more", "next_before"}


def test_list_json_pages_with_next_before():
    ids = failed(3)
    page = cli("list", "--limit", "2", "--json")
    doc = page.json()
    assert doc["more"] is True and doc["limit"] == 2 and doc["next_before"] == ids[1]
    assert [p["id"] for p in doc["procedures"]] == [ids[2], ids[1]]
    rest = cli("list", "--limit", "2", "--before", doc["next_before"], "--json").json()
    assert [p["id"] for p in rest["procedures"]] == [ids[0]] and rest["more"] is False


def test_retry_failed_dry_run_changes_nothing_then_retries():
    ids = failed(2)
    dry = cli("retry", "--failed", "--type", "acc.Fails", "--dry-run")
    assert dry.code == 0 and all(i in dry.out for i in ids)
    assert {status(i) for i in ids} == {"failed"}
    assert cli("retry", "--failed", "--type", "acc.Fails").code == 0
    assert {status(i) for i in ids} <= {"ready", "retrying"}


def test_send_event_with_a_key_twice_sends_once():
    handle = Waits.submit({}, key="order:1234")
    first = cli("send-event", "order:1234", "paid", "--payload", '{"amount": 10}', "--key", "psp-evt-881")
    again = cli("send-event", "order:1234", "paid", "--payload", '{"amount": 10}', "--key", "psp-evt-881")
    assert (first.code, again.code) == (0, 0), again.err
    assert Event.objects.filter(procedure_id=handle.id).count() == 1
    assert Event.objects.get().sent_by == ME


def test_send_event_wakes_and_the_step_reads_the_payload():
    handle = Waits.submit({}, key="order:7")
    drain()
    assert cli("send-event", "order:7", "approved", "--payload", '{"by": "ops"}').code == 0
    drain()
    assert (handle.refresh().status, handle.output) == ("done", {"by": "ops"})


@pytest.mark.parametrize("args", [("send-event", "order:none", "go"), ("send-event", "ORDER", "go", "--payload", "{"),
                                  ("send-event", "ORDER", "go", "--payload", '"\\u0000"')])
def test_send_event_refusals_are_one_line_exit_1(args):
    Waits.submit({}, key="ORDER")
    result = cli(*args)
    assert result.code == 1 and one_line(result)
    assert not Event.objects.exists()


def test_show_json_has_state_output_and_progress():
    (bad,) = failed()
    result = cli("show", bad, "--json")
    assert result.code == 0
    text = json.dumps(result.json())
    for word in ('"state"', '"output"', '"progress"', "card was declined"):
        assert word in text


def test_show_prints_the_error_and_traceback_in_full():
    (bad,) = failed()
    result = cli("show", bad)
    assert result.code == 0 and "card was declined by the bank" in result.out and "Traceback" in result.out


def test_rerun_by_id_from_a_step():
    (bad,) = failed()
    result = cli("rerun", bad, "--from-step", "only")
    assert result.code == 0, result.err
    new = ProcedureRun.objects.get(rerun_of_id=bad)
    assert new.status == "ready"
    assert cli("rerun", bad, "--from-step", "nope").code == 1
    assert ProcedureRun.objects.filter(rerun_of_id=bad).count() == 1


def test_schedules_pause_resume_trigger_refusals():
    register_schedule("acc-nightly", Waits, period=timedelta(hours=1))
    assert cli("schedules", "resume", "acc-nightly").code == 1  # enabled already
    assert cli("schedules", "pause", "acc-nightly").code == 0
    assert Schedule.objects.get(name="acc-nightly").disabled_reason == f"paused by {ME}"
    assert cli("schedules", "pause", "acc-nightly").code == 1  # paused already
    assert cli("schedules", "trigger", "acc-nightly").code == 1  # paused: refused
    assert cli("schedules", "resume", "acc-nightly").code == 0
    assert cli("schedules", "trigger", "acc-nightly").code == 0
    assert cli("schedules", "pause", "no-such").code == 1


def test_stats_and_workers_json_are_one_document_each():
    failed()
    stats = cli("stats", "--json").json()
    assert stats["window_minutes"] == 15
    assert isinstance(cli("workers", "--json").json(), dict)


@pytest.mark.parametrize("args", [("list", "--limit", "0"), ("list", "--status", "nope"), ("retry",), ("cancel",),
                                  ("frobnicate",), ("list", "--since", "soon")])
def test_bad_usage_is_2(args):
    assert cli(*args).code == 2


def test_an_empty_table_lists_nothing_with_exit_0():
    assert cli("list").code == 0
    assert cli("list", "--json").json()["procedures"] == []


def test_ages_in_iso_form_are_utc():
    ids = failed()
    past = (datetime.now(UTC) - timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M")
    assert cli("list", "--since", past, "--json").json()["procedures"][0]["id"] == ids[0]


def test_the_help_names_every_subcommand():
    from django.core.management import load_command_class

    command = load_command_class("django_procedures", "procedures")
    for name in ("list", "show", "retry", "cancel", "rerun", "send-event", "workers", "stats", "schedules"):
        assert name in command.help


def test_filters_touch_at_most_limit_procedures_newest_first():
    ids = failed(3)
    assert cli("retry", "--failed", "--type", "acc.Fails", "--limit", "2").code == 0
    assert status(ids[0]) == "failed"  # the oldest is past the limit
    assert status(ids[1]) != "failed" and status(ids[2]) != "failed"


def test_cancel_by_filters_with_a_limit():
    handles = [Waits.submit({}) for _ in range(3)]
    drain()
    assert cli("cancel", "--type", "acc.Waits", "--limit", "2", "--yes").code == 0
    assert [status(h.id) for h in handles] == ["waiting", "cancelled", "cancelled"]


def test_rerun_final_by_filters_with_a_limit():
    ids = failed(3)
    assert cli("rerun", "--final", "--status", "failed", "--type", "acc.Fails", "--limit", "1").code == 0
    assert list(ProcedureRun.objects.filter(rerun_of__isnull=False).values_list("rerun_of_id", flat=True)) == [
        uuid.UUID(ids[2])]


def test_rerun_of_a_type_this_code_lacks_is_refused_up_front_in_one_line():
    from django_procedures.testing import isolated_registry

    with isolated_registry():
        class Gone(Procedure):
            type_name = "acc.Gone"

            @step
            def only(self, ctx):
                raise NonRetryable("x")

        handle = Gone.submit({})
        drain()
    (bad,) = failed()
    result = cli("rerun", bad, str(handle.id))
    assert result.code == 1 and one_line(result) and "acc.Gone" in result.err and result.out == ""
    assert not ProcedureRun.objects.filter(rerun_of__isnull=False).exists()  # all or nothing
    dry = cli("rerun", "--final", "--dry-run")
    assert dry.code == 0 and "acc.Gone" in dry.out + dry.err


def test_show_lists_events_and_says_an_untaken_one_of_a_finished_procedure_was_never_consumed():
    handle = Waits.submit({}, key="order:9")
    drain()
    assert cli("send-event", "order:9", "other").code == 0
    assert cli("send-event", "order:9", "approved").code == 0
    drain()
    lines = cli("show", str(handle.id)).out.splitlines()
    other = next(line for line in lines if " other " in line)
    approved = next(line for line in lines if " approved " in line)
    assert other.rstrip().endswith("never") and "(step 1)" in approved
    assert [e["name"] for e in cli("show", str(handle.id), "--json").json()["events"]] == ["other", "approved"]
