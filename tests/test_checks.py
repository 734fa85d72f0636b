import sys

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import override_settings

from django_procedures.checks import check_settings
from django_procedures.conf import conf


def ids(errors):
    return [e.id for e in errors]


def test_defaults_pass():
    assert [e for e in check_settings() if e.level >= 40] == []


@override_settings(PROCEDURES={"LEASE_SECONDS": 30, "RENEWAL_TIMEOUT_SECONDS": 30})
def test_renewal_timeout_must_be_shorter_than_the_lease():
    (error,) = check_settings()
    assert error.id == "django_procedures.E004"
    assert "must be shorter than the lease (30s)" in error.msg


@override_settings(PROCEDURES={"LEASE_SECONDS": 30, "RENEWAL_TIMEOUT_SECONDS": 5})
def test_renewal_timeout_must_outlast_a_heartbeat_interval():
    assert ids(check_settings()) == ["django_procedures.E004"]


@override_settings(PROCEDURES={"LEASE_SECOND": 10})
def test_unknown_keys_are_typos():
    (error,) = check_settings()
    assert error.id == "django_procedures.E002" and error.hint == "Did you mean 'LEASE_SECONDS'?"


@override_settings(PROCEDURES={"POLL_SECONDS": 0})
def test_durations_must_be_positive():
    assert ids(check_settings()) == ["django_procedures.E003"]


@override_settings(PROCEDURES={"IDLE_IN_TRANSACTION_TIMEOUT_SECONDS": 10})
def test_idle_transaction_timeout_must_outlast_the_lease():
    assert ids(check_settings()) == ["django_procedures.E005"]


@override_settings(PROCEDURES=["LEASE_SECONDS"])
def test_procedures_must_be_a_dict():
    assert ids(check_settings()) == ["django_procedures.E001"]


def test_settings_are_read_lazily():
    assert conf.LEASE_SECONDS == 30.0
    with override_settings(PROCEDURES={"LEASE_SECONDS": 12}):
        assert conf.LEASE_SECONDS == 12
        assert conf.renewal_timeout == 8
        assert conf.idle_in_transaction_timeout == 24
    assert conf.LEASE_SECONDS == 30.0


def test_sqlite_refuses_concurrency(settings):
    from django.db import connection

    if connection.vendor != "sqlite":
        pytest.skip("SQLite only")
    settings.PROCEDURES = {"CONCURRENCY": 4}
    assert "django_procedures.E008" in ids(check_settings())
    settings.PROCEDURES = {}
    with pytest.raises(CommandError, match="not possible on SQLite"):
        call_command("procedures_worker", "--concurrency", "2", "--burst")


@override_settings(PROCEDURES={"REDACT": "password"})
def test_redact_must_be_a_list_of_keys():
    (error,) = check_settings()
    assert error.id == "django_procedures.E010" and "must be a list of state keys" in error.msg


@override_settings(PROCEDURES={"REDACT": ["password", "api_key"]})
def test_redact_accepts_a_list_of_keys():
    assert [e for e in check_settings() if e.level >= 40] == []


@pytest.mark.parametrize("value", [-1, 2.5, "8", True])
def test_prefetch_must_be_a_whole_number_of_at_least_zero(value):
    with override_settings(PROCEDURES={"PREFETCH": value}):
        (error,) = check_settings()
    assert error.id == "django_procedures.E011" and "PREFETCH" in error.msg


@pytest.mark.parametrize("value", [0, 1, 64])
def test_prefetch_accepts_zero_and_up(value):
    with override_settings(PROCEDURES={"PREFETCH": value}):
        assert [e for e in check_settings() if e.level >= 40] == []


@override_settings(PROCEDURES={"RETENTION": "99999999999d"})
def test_a_retention_too_long_to_hold_is_an_error_not_a_crash():
    (error,) = check_settings()
    assert error.id == "django_procedures.E009" and "at most 999999999 days" in error.msg


@pytest.mark.parametrize("queue", [None, "", "a,b", 5, "q" * 101])
def test_the_default_queue_must_be_a_queue_workers_can_serve(queue):
    with override_settings(PROCEDURES={"DEFAULT_QUEUE": queue}):
        (error,) = check_settings()
    assert error.id == "django_procedures.E012" and "DEFAULT_QUEUE" in error.msg


@pytest.mark.parametrize(("settings", "code"), [
    ({"METRICS_TOKEN": ""}, "E013"), ({"METRICS_TOKEN": 1234}, "E013"), ({"METRICS_TOKEN": "   "}, "E013"),
    ({"METRICS_COUNT_CAP": 0}, "E014"), ({"METRICS_COUNT_CAP": "100"}, "E014"), ({"METRICS_COUNT_CAP": True}, "E014"),
])
def test_metrics_settings(settings, code):
    with override_settings(PROCEDURES=settings):
        (error,) = check_settings()
    assert error.id == f"django_procedures.{code}"
    assert "1234" not in error.msg  # a token is never echoed


@pytest.mark.parametrize("value", [0, 100, -1, "4MiB", 4.5e6, True, None])
def test_max_state_bytes_must_be_an_integer_of_at_least_1024(value):
    with override_settings(PROCEDURES={"MAX_STATE_BYTES": value}):
        (error,) = check_settings()
    assert error.id == "django_procedures.E020"
    assert error.msg == f"PROCEDURES['MAX_STATE_BYTES'] must be an integer of at least 1024 (bytes); got {value!r}"
    with override_settings(PROCEDURES={"MAX_STATE_BYTES": 1024}):
        assert check_settings() == []


def test_metrics_settings_accept_a_token_and_a_cap():
    with override_settings(PROCEDURES={"METRICS_TOKEN": "s3cret", "METRICS_COUNT_CAP": 5}):
        assert [e for e in check_settings() if e.level >= 40] == []


@pytest.mark.parametrize(("value", "message"), [
    ("-5d", "cannot read '-5d' as a duration"), (-5, "a duration must be positive; got -5"),
    (0, "a duration must be positive"), ("soon", "cannot read 'soon' as a duration"),
    (True, "cannot read True as a duration"), ([30], "cannot read [30] as a duration"),
])
def test_a_retention_that_is_not_a_positive_duration_is_an_error(value, message):
    with override_settings(PROCEDURES={"RETENTION": value}):
        (error,) = check_settings()
    assert error.id == "django_procedures.E009" and message in error.msg and "None" in error.hint


@pytest.mark.parametrize("value", [None, "30d", 3600, "1d12h"])
def test_retention_accepts_a_duration_or_none(value):
    with override_settings(PROCEDURES={"RETENTION": value}):
        assert [e for e in check_settings() if e.level >= 40] == []


@pytest.mark.parametrize("value", ["yes", 1, "off"])
def test_tracing_must_be_none_true_or_false(value):
    with override_settings(PROCEDURES={"TRACING": value}):
        (error,) = check_settings()
    assert error.id == "django_procedures.E015" and "must be None, True or False" in error.msg


def test_tracing_asked_for_without_opentelemetry_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "opentelemetry.trace", None)  # as if opentelemetry-api were not installed
    with override_settings(PROCEDURES={"TRACING": True}):
        (error,) = check_settings()
    assert error.id == "django_procedures.E016"
    assert "django-procedures[otel]" in error.hint


@pytest.mark.parametrize("value", [None, True, False])
def test_tracing_accepts_none_true_and_false_when_opentelemetry_is_installed(value):
    with override_settings(PROCEDURES={"TRACING": value}):
        assert [e for e in check_settings() if e.level >= 40] == []


@pytest.mark.parametrize(("name", "code"), [("MAX_EVENT_BYTES", "E023"), ("MAX_UNCONSUMED_EVENTS", "E024")])
@pytest.mark.parametrize("value", [0, -1, "1MiB", 2.5, True, None])
def test_event_limits_must_be_positive_integers(name, code, value):
    with override_settings(PROCEDURES={name: value}):
        (error,) = check_settings()
    assert error.id == f"django_procedures.{code}"
    assert error.msg == f"PROCEDURES[{name!r}] must be an integer of at least 1; got {value!r}"
    with override_settings(PROCEDURES={name: 1}):
        assert check_settings() == []
