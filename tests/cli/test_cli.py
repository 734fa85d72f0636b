"""``manage.py procedures`` in-process: each subcommand's output, refusals, --json, --dry-run, the prompt, the actor."""

from __future__ import annotations

import io
import uuid
from datetime import timedelta

import pytest

from django_procedures import register_schedule
from django_procedures.cli.common import actor
from django_procedures.cli.output import WIDTH
from django_procedures.models import ProcedureRun, Schedule
from django_procedures.testing import drain
from testproject.testapp.procedures import Heartbeat, Refuses, ThreeSteps
from tests.cli.helpers import cli

pytestmark = pytest.mark.django_db


def failed(n=1, **state):
    handles = [Refuses.submit(state) for _ in range(n)]
    drain()
    return [h.id for h in handles]


def statuses(ids):
    return dict(ProcedureRun.objects.filter(id__in=ids).values_list("id", "status"))


def test_list_is_newest_first_with_a_limit_and_fits_100_columns():
    ids = [ThreeSteps.submit({}).id for _ in range(5)]
    result = cli("list", "--limit", "3")
    assert result.code == 0
    header, *rows = result.out.splitlines()
    assert header.split()[:3] == ["id", "status", "type"]
    assert [row.split()[0] for row in rows] == [str(i) for i in reversed(ids)][:3]
    assert all(len(line) <= WIDTH for line in result.out.splitlines())
    assert f"--before {ids[2]}" in result.err  # the next page


def test_list_next_page_with_before():
    ids = [ThreeSteps.submit({}).id for _ in range(4)]
    page = cli("list", "--limit", "2", "--before", str(ids[2]), "--json").json()
    assert [p["id"] for p in page["procedures"]] == [str(ids[1]), str(ids[0])]
    assert page["more"] is False


def test_list_filters_by_status_type_queue_error_and_age():
    [bad] = failed()
    ok = ThreeSteps.submit({}).id
    assert [p["id"] for p in cli("list", "--status", "failed", "--json").json()["procedures"]] == [str(bad)]
    assert [p["id"] for p in cli("list", "--type", ThreeSteps.type_name, "--json").json()["procedures"]] == [str(ok)]
    assert [p["id"] for p in cli("list", "--error", "TENANT does", "--json").json()["procedures"]] == [str(bad)]
    assert len(cli("list", "--queue", "default", "--since", "1h", "--json").json()["procedures"]) == 2
    assert cli("list", "--older-than", "1h").code == 1


def test_list_json_is_one_document():
    ThreeSteps.submit({})
    doc = cli("list", "--json").json()
    assert set(doc) == {"procedures", "limit", "more", "next_before"}
    assert doc["procedures"][0]["type"] == ThreeSteps.type_name


@pytest.mark.parametrize("args", [["list", "--status", "failed"], ["list", "--type", "nope.Nope"],
                                  ["list", "--error", "no such words"]])
def test_a_filter_matching_nothing_is_exit_1_with_one_line(args):
    ThreeSteps.submit({})
    result = cli(*args)
    assert result.code == 1
    assert result.err.strip().count("\n") == 0
    assert "no procedure matches" in result.err


def test_an_empty_table_lists_nothing_and_succeeds():
    assert cli("list").out == "no procedures\n"


def test_show_prints_tree_steps_leases_error_and_traceback():
    [pid] = failed()
    result = cli("show", str(pid))
    assert result.code == 0
    assert f"{Refuses.type_name} {pid}" in result.out
    assert "the tenant does not exist" in result.out
    assert "traceback:" in result.out and "Traceback" in result.out
    assert "token" in result.out  # the leases table
    doc = cli("show", str(pid), "--json").json()
    assert doc["procedure"]["status"] == "failed"
    assert doc["steps"][0]["name"] == "check" and doc["steps"][0]["status"] == "failed"
    assert doc["leases"][0]["outcome"] == "failed"
    assert [m["id"] for m in doc["tree"]] == [str(pid)]


@pytest.mark.parametrize("verb", ["show", "retry", "cancel"])
def test_unknown_and_malformed_ids_are_exit_1(verb):
    unknown = cli(verb, str(uuid.uuid4()))
    assert unknown.code == 1 and "does not exist" in unknown.err
    malformed = cli(verb, "not-an-id")
    assert malformed.code == 1 and "is not a procedure id" in malformed.err


def test_retry_records_the_cli_actor():
    [pid] = failed()
    result = cli("retry", str(pid))
    assert result.code == 0, result.err
    run = ProcedureRun.objects.get(id=pid)
    assert run.status == "ready"
    assert run.retried_by == actor() and actor().startswith("cli:")


def test_retry_of_something_not_retryable_changes_nothing():
    [retryable] = failed()
    [not_worth] = failed(manual_retry=False)
    ready = ThreeSteps.submit({}).id
    for ids in ([ready], [retryable, not_worth]):
        result = cli("retry", *map(str, ids))
        assert result.code == 1
        assert "cannot be retried" in result.err and "nothing was retried" in result.err
    assert statuses([retryable, not_worth, ready]) == {retryable: "failed", not_worth: "failed", ready: "ready"}


def test_retry_failed_with_filters_and_dry_run():
    ids = failed(3)
    [not_worth] = failed(manual_retry=False)
    dry = cli("retry", "--failed", "--type", Refuses.type_name, "--dry-run", "--json")
    assert dry.code == 0
    assert sorted(p["id"] for p in dry.json()["would_retry"]) == sorted(map(str, ids))
    assert set(statuses([*ids, not_worth]).values()) == {"failed"}  # the dry run changed nothing
    done = cli("retry", "--failed", "--type", Refuses.type_name)
    assert done.code == 0 and "retried 3 procedures" in done.out
    assert statuses([*ids, not_worth]) == {**dict.fromkeys(ids, "ready"), not_worth: "failed"}
    again = cli("retry", "--failed")
    assert again.code == 1 and "no retryable failed procedure matches" in again.err


def test_cancel_by_id_records_the_actor_and_refuses_a_final_one():
    pid = ThreeSteps.submit({}).id
    result = cli("cancel", str(pid))
    assert result.code == 0 and "cancelled 1 procedure" in result.out
    run = ProcedureRun.objects.get(id=pid)
    assert run.status == "cancelled" and actor() in run.error
    again = cli("cancel", str(pid))
    assert again.code == 1 and "already cancelled" in again.err


def test_cancel_by_filters_dry_run_changes_nothing():
    ids = [ThreeSteps.submit({}, queue="bulk").id for _ in range(3)]
    other = ThreeSteps.submit({}).id
    dry = cli("cancel", "--queue", "bulk", "--dry-run")
    assert dry.code == 0 and "would cancel 3 procedures" in dry.out
    assert set(statuses([*ids, other]).values()) == {"ready"}
    assert cli("cancel", "--queue", "bulk", "--json").json()["cancelled"].keys() == set(map(str, ids))
    assert statuses([*ids, other]) == {**dict.fromkeys(ids, "cancelled"), other: "ready"}


def test_more_than_100_rows_need_yes_without_a_terminal():
    ids = [ThreeSteps.submit({}).id for _ in range(101)]
    refused = cli("cancel", "--type", ThreeSteps.type_name)
    assert refused.code == 1 and "pass --yes" in refused.err
    assert set(statuses(ids).values()) == {"ready"}
    assert cli("cancel", "--type", ThreeSteps.type_name, "--yes").code == 0
    assert set(statuses(ids).values()) == {"cancelled"}


class FakeTerminal(io.StringIO):
    def isatty(self):
        return True


@pytest.mark.parametrize(("answer", "code", "status"), [("yes\n", 0, "cancelled"), ("no\n", 1, "ready")])
def test_more_than_100_rows_ask_on_a_terminal(monkeypatch, answer, code, status):
    ids = [ThreeSteps.submit({}).id for _ in range(101)]
    monkeypatch.setattr("sys.stdin", FakeTerminal(answer))
    result = cli("cancel", "--type", ThreeSteps.type_name)
    assert result.code == code
    assert "This will cancel 101 procedures" in result.err
    assert set(statuses(ids).values()) == {status}


@pytest.mark.parametrize("args", [["retry"], ["retry", "--failed", "--type", "x", str(uuid.uuid4())],
                                  ["cancel"], ["list", "--status", "bogus"], ["list", "--since", "yesterday"],
                                  ["list", "--limit", "0"], ["nope"], ["schedules"], ["stats", "--window", "0"]])
def test_bad_usage(args):
    assert cli(*args).code == 2


def test_workers_lists_states():
    from django_procedures.store import workers

    row = workers.register(worker_id="w-cli", hostname="h", pid=42, version="t", queues=["a"], concurrency=2,
                           lease_seconds=30, with_scheduler=False)
    assert row
    doc = cli("workers", "--json").json()
    assert [(w["worker_id"], w["state"]) for w in doc["workers"]] == [("w-cli", "alive")]
    assert "w-cli" in cli("workers").out
    assert cli("workers", "--state", "gone").code == 1


def test_stats_counts_and_rates():
    failed(2)
    ThreeSteps.submit({})
    doc = cli("stats", "--json").json()
    assert {(r["status"], r["type"], r["count"]) for r in doc["unfinished"]} == {("ready", ThreeSteps.type_name, 1)}
    assert {(r["status"], r["type"], r["count"]) for r in doc["finished"]} == {("failed", Refuses.type_name, 2)}
    assert sum(m["failed"] for m in doc["per_minute"]) == 2
    assert "default" in doc["oldest_ready"]
    text = cli("stats").out
    assert all(len(line) <= WIDTH for line in text.splitlines())
    assert "oldest ready" in text


def test_schedules_list_pause_resume_trigger():
    register_schedule("cli-reports", Heartbeat, period=timedelta(minutes=1))
    assert "cli-reports" in cli("schedules", "list").out
    assert cli("schedules", "pause", "cli-reports").code == 0
    s = Schedule.objects.get(name="cli-reports")
    assert not s.enabled and s.disabled_reason == f"paused by {actor()}"
    assert cli("schedules", "pause", "cli-reports").code == 1  # already paused
    assert cli("schedules", "trigger", "cli-reports").code == 1  # paused: resume first
    assert cli("schedules", "resume", "cli-reports").code == 0
    assert cli("schedules", "trigger", "cli-reports", "--json").json()["started"] == 1
    assert cli("schedules", "pause", "nope").code == 1
    assert cli("schedules", "list", "--json").json()["schedules"][0]["name"] == "cli-reports"


@pytest.mark.parametrize("args", [["list", "--type", "a\x00b"], ["list", "--error", "\x00"],
                                  ["schedules", "pause", "x\x00"], ["show", "\x00"]])
def test_a_nul_character_is_refused_not_a_database_error(args):
    result = cli(*args)
    assert result.code == 1
    assert "NUL" in result.err or "not a procedure id" in result.err


@pytest.mark.parametrize("age", ["9999999d", "99999999999d", "0s", "-3d", "soon"])
def test_ages_out_of_range_are_bad_usage(age):
    assert cli("list", "--since", age).code == 2


def test_an_iso_time_is_an_age_too():
    ThreeSteps.submit({})
    assert len(cli("list", "--since", "2000-01-01", "--json").json()["procedures"]) == 1
    assert cli("list", "--older-than", "2000-01-01T00:00+00:00").code == 1


@pytest.mark.postgres
def test_error_words_common_to_many_errors_walk_the_errors_newest_first(monkeypatch):
    from django_procedures.cli import common

    walked = []
    monkeypatch.setattr(common, "ERROR_WALK_ABOVE", 1)
    monkeypatch.setattr(common, "newest_matches_first", lambda qs: walked.append(1) or list(qs))
    ids = failed(3)
    doc = cli("list", "--error", "tenant", "--limit", "2", "--json").json()
    assert [p["id"] for p in doc["procedures"]] == [str(i) for i in reversed(ids)][:2]
    assert walked == [1]


def test_tables_cut_the_widest_cells_but_never_an_id():
    from django_procedures.cli.output import fit

    long_id = "0190d7a2-5c3e-7b1a-9f00-2d4e6a8b0c1d"
    lines = fit(["id", "type", "error"], [[long_id, "t" * 60, "e" * 80]])
    assert all(len(line) <= WIDTH for line in lines)
    assert long_id in lines[1] and lines[1].endswith("…")


def test_workers_gone_and_stopped():
    from django_procedures.models import Worker
    from django_procedures.policy.workers import StopReason
    from django_procedures.store import workers

    stopped = workers.register(worker_id="w-stopped", hostname="h", pid=1, version="t", queues=[], concurrency=1,
                               lease_seconds=30)
    workers.stop(stopped, StopReason.SIGTERM, "bye")
    gone = workers.register(worker_id="w-gone", hostname="h", pid=2, version="t", queues=[], concurrency=1,
                            lease_seconds=30)
    Worker._writer.filter(id=gone).update(alive_until=Worker.objects.get(id=gone).started_at - timedelta(hours=1))
    states = {w["worker_id"]: w["state"] for w in cli("workers", "--json").json()["workers"]}
    assert states == {"w-stopped": "stopped", "w-gone": "gone"}
    assert [w["worker_id"] for w in cli("workers", "--state", "gone", "--json").json()["workers"]] == ["w-gone"]


def test_a_json_option_that_is_not_json_is_refused_in_one_line():
    from django_procedures.cli.common import json_argument
    from django_procedures.cli.output import Refused

    assert json_argument('{"a": [1]}', "--payload") == {"a": [1]}
    with pytest.raises(Refused, match=r"^--payload is not JSON \(.*\); give e\.g\. --payload"):
        json_argument("{nope", "--payload")


def test_every_subcommand_is_one_module_with_help_arguments_and_run():
    import importlib

    from django_procedures.cli import SUBCOMMANDS

    for name, path in SUBCOMMANDS.items():
        module = importlib.import_module(path)
        assert module.HELP and callable(module.add_arguments) and callable(module.run), name


def test_stats_counts_are_capped_and_say_so(settings):
    settings.PROCEDURES = {"METRICS_COUNT_CAP": 2}
    for _ in range(4):
        ThreeSteps.submit({})
    doc = cli("stats", "--json").json()
    assert doc["capped_statuses"] == ["ready"]
    assert "at least 3" in cli("stats").out  # the rows read: a floor
