"""Pure formatting: step labels, attempts, schedule cadences, redaction, pretty JSON."""

import json
from datetime import UTC, datetime, timedelta

import pytest

from django_procedures.admin.display import MASK, attempts_made, cadence, pretty_json, redact, relative, step_label


@pytest.mark.parametrize(("args", "kwargs", "label"), [
    ((2, "charge", 5), {}, "3/5 · charge"),
    ((0, "start", None), {}, "1/? · start"),
    ((5, "", 5), {}, "5/5"),
    ((6, "execute", 1), {"machine": True}, "#7 · execute"),
    ((6, "", 1), {"machine": True}, "#6"),
    ((1, "confirm", 2), {"in_rollback": True}, "2/2 · confirm · rollback"),
])
def test_step_label(args, kwargs, label):
    assert step_label(*args, **kwargs) == label


@pytest.mark.parametrize(("status", "attempt", "made"), [
    ("running", 2, 2), ("rolling_back", 1, 1), ("retrying", 3, 2), ("failed", 4, 3), ("ready", 1, 0),
    ("done", 1, None),
])
def test_attempts_made(status, attempt, made):
    assert attempts_made(status, attempt) == made


@pytest.mark.parametrize(("period", "cron", "zone", "label"), [
    (timedelta(minutes=5), "", "UTC", "every 5m"),
    (timedelta(hours=1, minutes=30), "", "UTC", "every 1h 30m"),
    (timedelta(days=1), "", "UTC", "every 1d"),
    (timedelta(milliseconds=250), "", "UTC", "every 250ms"),
    (None, "0 3 * * *", "Europe/Berlin", "cron 0 3 * * * Europe/Berlin"),
    (None, "", "UTC", "—"),
])
def test_cadence(period, cron, zone, label):
    assert cadence(period, cron, zone) == label


def test_relative():
    now = datetime(2030, 1, 1, tzinfo=UTC)
    assert relative(now + timedelta(minutes=4, seconds=10), now) == "in 4m 10s"
    assert relative(now - timedelta(seconds=3), now) == "3s ago"
    assert relative(now, now) == "now"
    assert relative(None, now) == "—"


def test_redact_masks_keys_at_any_depth_case_insensitively():
    state = {"user": "ann", "Password": "p", "nested": {"token": "t", "list": [{"token": "u", "ok": 1}, "token"]},
             "tokens": ["token"]}
    masked = redact(state, ["password", "token"])
    assert masked == {"user": "ann", "Password": MASK,
                      "nested": {"token": MASK, "list": [{"token": MASK, "ok": 1}, "token"]}, "tokens": ["token"]}
    assert state["Password"] == "p"  # the original is left alone


def test_redact_without_keys_returns_the_value():
    value = {"a": 1}
    assert redact(value, []) is value
    assert redact(None, ["a"]) is None


def test_pretty_json_keeps_non_ascii_and_cuts_long_values():
    assert pretty_json({"name": "Zoë"}) == '{\n  "name": "Zoë"\n}'
    text = pretty_json({"blob": "x" * 500}, limit=100)
    assert text.startswith('{\n  "blob": "xxx') and "more characters not shown" in text
    assert json.loads(pretty_json([1, {"a": None}])) == [1, {"a": None}]


@pytest.mark.parametrize(("seconds", "text"), [
    (0, "0ms"), (0.0004, "0ms"), (0.0123, "12ms"), (0.999, "999ms"), (1, "1.0s"), (2.46, "2.4s"), (9.99, "9.9s"),
    (10, "10s"), (75, "1m 15s"), (-3, "0ms"),
])
def test_elapsed_is_precise_under_ten_seconds(seconds, text):
    from django_procedures.admin.display import elapsed

    assert elapsed(seconds) == text


def test_a_sub_second_run_does_not_read_0s():
    from django_procedures.admin.display import run_duration

    start = datetime(2030, 1, 1, tzinfo=UTC)
    assert run_duration(start, start + timedelta(milliseconds=250), start) == "250ms"


@pytest.mark.parametrize(("args", "text"), [
    (("done", 3, 0, 0, 0), "—"),
    (("ready", 1, 0, 0, 0), "0 attempts"),
    (("running", 1, 0, 0, 0), "1 attempt: 1 running now"),
    (("retrying", 3, 2, 0, 0), "2 attempts: 2 failed"),
    (("failed", 4, 3, 0, 0), "3 attempts: 3 failed"),
    (("ready", 4, 0, 1, 0), "3 attempts: 1 lost with their worker"),
    # After a manual retry the budget restarts but the count goes on: say which attempts came before it.
    (("failed", 5, 1, 0, 1), "4 attempts: 1 failed since the last manual retry, 3 before the manual retry"),
    (("running", 5, 0, 0, 2), "5 attempts: 1 running now, 4 before 2 manual retries"),
])
def test_attempts_text(args, text):
    from django_procedures.admin.display import attempts_text

    assert attempts_text(*args) == text
