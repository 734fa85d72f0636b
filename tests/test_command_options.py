"""Every option of the commands is bounded: a bad value is a CommandError saying what to give, never a traceback."""

from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import override_settings

from django_procedures.models import ProcedureRun
from django_procedures.policy.durations import parse_duration

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(("args", "message"), [
    (["--older-than", "9999999d"], r"9999999 days ago is before the year 1; give an age of at most \d+ days"),
    (["--older-than", "99999999999d"], "is too long; a duration is at most 999999999 days"),
    (["--older-than", "0s"], "must be positive"),
    (["--older-than=-3d"], "cannot read"),
    (["--batch-size", "0"], "between 1 and 10,000"),
    (["--batch-size", "100000000000000000000"], "between 1 and 10,000"),
    (["--status", ","], "at least one final status"),
])
def test_prune_options_are_bounded(args, message):
    with pytest.raises(CommandError, match=message):
        call_command("procedures_prune", *args, stdout=StringIO())


@override_settings(PROCEDURES={"RETENTION": "9999999d"})
def test_a_retention_setting_too_long_names_the_setting():
    with pytest.raises(CommandError, match=r"PROCEDURES\['RETENTION'\]: 9999999 days ago is before the year 1"):
        call_command("procedures_prune", stdout=StringIO())


def test_the_longest_possible_age_prunes_nothing_and_says_so():
    out = StringIO()
    call_command("procedures_prune", "--older-than", "700000d", "--dry-run", stdout=out)
    assert "would delete 0 trees" in out.getvalue()


@pytest.mark.parametrize(("args", "message"), [
    (["--concurrency", "0"], "between 1 and 256"),
    (["--concurrency", "100000"], "between 1 and 256"),
    (["--lease-seconds", "0"], "between 1 and 86400"),
    (["--lease-seconds", "0.1"], "between 1 and 86400"),
    (["--lease-seconds", "nan"], "between 1 and 86400"),
    (["--lease-seconds", "inf"], "between 1 and 86400"),
    (["--lease-seconds", "1e300"], "between 1 and 86400"),
    (["--shutdown-timeout", "-1"], "between 0 and 86400"),
    (["--shutdown-timeout", "nan"], "between 0 and 86400"),
    (["--shutdown-timeout", "inf"], "between 0 and 86400"),
    (["--queues", ""], "at least one queue name"),
    (["--queues", " , "], "at least one queue name"),
    (["--queues", "a,b\x00"], "NUL"),
    (["--queues", "q" * 101], "at most 100"),
    (["--worker-id", "w" * 201], "at most 200 printable characters"),
    (["--worker-id", "w\x00"], "at most 200 printable characters"),
])
def test_worker_options_are_bounded_before_anything_starts(args, message):
    with pytest.raises(CommandError, match=message):
        call_command("procedures_worker", "--burst", *args)
    assert not ProcedureRun.objects.exists()


@override_settings(PROCEDURES={"IDLE_IN_TRANSACTION_TIMEOUT_SECONDS": 60})
def test_a_lease_longer_than_the_idle_transaction_timeout_is_refused():
    with pytest.raises(CommandError, match="IDLE_IN_TRANSACTION_TIMEOUT_SECONDS"):
        call_command("procedures_worker", "--burst", "--lease-seconds", "90")


@pytest.mark.parametrize("value", ["99999999999d", 1e300, float("inf"), float("nan")])
def test_parse_duration_says_what_it_cannot_hold(value):
    with pytest.raises(ValueError, match="at most 999999999 days"):
        parse_duration(value)


def test_a_worker_process_puts_its_start_up_heap_out_of_the_collectors_reach():
    import gc

    from django_procedures.management.commands.procedures_worker import freeze_start_up_heap

    try:
        frozen = freeze_start_up_heap()
        assert frozen == gc.get_freeze_count() > 10_000  # Django and the apps, at least
        gc.collect()
        assert gc.get_freeze_count() == frozen  # a full collection no longer walks them
    finally:
        gc.unfreeze()


def test_the_metrics_server_listens_on_loopback_unless_told_otherwise():
    from django_procedures.management.commands.procedures_worker import Command

    parser = Command().create_parser("manage.py", "procedures_worker")
    assert parser.parse_args(["--metrics-port", "9108"]).metrics_host == "127.0.0.1"
    assert parser.parse_args(["--metrics-host", "0.0.0.0"]).metrics_host == "0.0.0.0"
