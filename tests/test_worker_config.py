"""A worker's settings and options are resolved once, by the rules the system checks apply to the settings alone.

Each contradictory combination is refused with the system check's own message, whether both halves come
from ``PROCEDURES`` (the check) or one comes from the command line (``procedures_worker``'s CommandError).
"""

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from django.test import override_settings

from django_procedures.checks import check_settings
from django_procedures.models import ProcedureRun

pytestmark = pytest.mark.django_db


def the_error(settings):
    with override_settings(PROCEDURES=settings):
        errors = [e for e in check_settings() if e.level >= 40]
    assert len(errors) == 1, errors
    return errors[0]


def command_error(settings, *args):
    with override_settings(PROCEDURES=settings), pytest.raises(CommandError) as raised:
        call_command("procedures_worker", "--burst", *args)
    assert not ProcedureRun.objects.exists()
    return str(raised.value)


# Both halves in PROCEDURES; the same with one half given on the command line instead.
CONTRADICTIONS = {
    "lease longer than the idle-transaction timeout": (
        {"LEASE_SECONDS": 120, "IDLE_IN_TRANSACTION_TIMEOUT_SECONDS": 60},
        {"IDLE_IN_TRANSACTION_TIMEOUT_SECONDS": 60}, ["--lease-seconds", "120"], "E005"),
    "lease as long as the idle-transaction timeout": (
        {"LEASE_SECONDS": 60, "IDLE_IN_TRANSACTION_TIMEOUT_SECONDS": 60},
        {"IDLE_IN_TRANSACTION_TIMEOUT_SECONDS": 60}, ["--lease-seconds", "60"], "E005"),
    "renewal timeout within one heartbeat interval of a long lease": (
        {"LEASE_SECONDS": 120, "RENEWAL_TIMEOUT_SECONDS": 20},
        {"RENEWAL_TIMEOUT_SECONDS": 20}, ["--lease-seconds", "120"], "E004"),
    "renewal timeout longer than a short lease": (
        {"LEASE_SECONDS": 10, "RENEWAL_TIMEOUT_SECONDS": 15},
        {"RENEWAL_TIMEOUT_SECONDS": 15}, ["--lease-seconds", "10"], "E004"),
}


@pytest.mark.parametrize(("settings_alone", "settings", "args", "code"), CONTRADICTIONS.values(),
                         ids=CONTRADICTIONS.keys())
def test_a_contradiction_half_on_the_command_line_gets_the_system_checks_message(settings_alone, settings, args,
                                                                                code):
    error = the_error(settings_alone)
    assert error.id == f"django_procedures.{code}"
    assert [e for e in check_settings() if e.level >= 40] == []  # the other half alone is fine ...
    message = command_error(settings, *args)  # ... until the command line adds its half
    assert message.startswith(f"cannot start a worker: {error.msg} (django_procedures.{code}). ")
    # The hint says what to change: the setting, or the option that contradicts it.
    assert f"{args[0]}." in message and args[0] not in error.msg


def test_the_settings_alone_are_refused_by_the_command_with_the_same_message():
    settings, _, _, _ = CONTRADICTIONS["lease longer than the idle-transaction timeout"]
    error = the_error(settings)
    assert command_error(settings) == f"cannot start a worker: {error.msg} ({error.id}). {error.hint}"
    assert "PROCEDURES['LEASE_SECONDS']." in error.hint


# One value out of range: the same rule, the message naming where the value came from.
RANGES = {
    "lease too short": ("LEASE_SECONDS", "--lease-seconds", "0.5", 0.5, "between 1 and 86400 seconds"),
    "lease not a number": ("LEASE_SECONDS", "--lease-seconds", "nan", float("nan"), "between 1 and 86400 seconds"),
    "lease over a day": ("LEASE_SECONDS", "--lease-seconds", "86401", 86401.0, "between 1 and 86400 seconds"),
    "negative shutdown timeout": ("SHUTDOWN_TIMEOUT_SECONDS", "--shutdown-timeout", "-1", -1.0, "between 0 and 86400"),
    "concurrency over 256": ("CONCURRENCY", "--concurrency", "300", 300, "between 1 and 256"),
    "concurrency 0": ("CONCURRENCY", "--concurrency", "0", 0, "between 1 and 256"),
    "async concurrency 0": ("ASYNC_CONCURRENCY", "--async-concurrency", "0", 0, "an integer between 1 and 100000"),
    "async concurrency too high": ("ASYNC_CONCURRENCY", "--async-concurrency", "100001", 100001,
                                   "an integer between 1 and 100000"),
}


@pytest.mark.parametrize(("key", "option", "arg", "value", "expected"), RANGES.values(), ids=RANGES.keys())
def test_a_value_out_of_range_gets_one_message_from_the_setting_and_from_the_option(key, option, arg, value,
                                                                                   expected):
    error = the_error({key: value})
    label = f"PROCEDURES[{key!r}]"
    assert error.msg.startswith(f"{label} must be ") and expected in error.msg
    from_option = command_error({}, f"{option}={arg}")
    assert from_option == f"cannot start a worker: {error.msg.replace(label, option)} ({error.id})"
    # The command refuses the setting too, naming the setting (not an option that was never given).
    assert command_error({key: value}) == f"cannot start a worker: {error.msg} ({error.id})"


@pytest.mark.skipif(connection.vendor != "sqlite", reason="SQLite only")
def test_sqlite_concurrency_from_the_setting_and_from_the_option():
    error = the_error({"CONCURRENCY": 2})
    assert error.id == "django_procedures.E008"
    assert command_error({}, "--concurrency", "2").startswith(f"cannot start a worker: {error.msg} ")
