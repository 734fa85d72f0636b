"""Pure formatting: step labels, attempts, redaction, pretty JSON."""

import json

import pytest

from django_procedures.admin.display import MASK, attempts_made, pretty_json, redact, step_label


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
