import json

import pytest

from django_procedures.policy.state import MAX_DEPTH, StateEncoder, StateError, check_state, dumps, find_problem
from django_procedures.policy.text import clean_text, describe


@pytest.mark.parametrize(
    "value",
    [{}, {"a": 1, "b": [1, 2.5, "x", None, True], "c": {"d": {"e": []}}}, {"big": 2**70}],
)
def test_strict_json_passes(value):
    assert find_problem(value) is None


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ({"ratio": float("nan")}, "state['ratio'] is nan"),
        ({"x": [1, float("inf")]}, "state['x'][1] is inf"),
        ({"s": "a\x00b"}, "state['s'] contains a NUL character"),
        ({1: "a"}, "has the key 1 of type int"),
        ({"t": (1, 2)}, "state['t'] is a tuple, which is not JSON; use a list"),
        ({"o": object()}, "state['o'] is a object"),
        ({"nested": {"deep": {"set": {1}}}}, "state['nested']['deep']['set'] is a set"),
    ],
)
def test_problems_name_the_offending_key(value, fragment):
    problem = find_problem(value)
    assert problem is not None and fragment in problem


def test_check_state_raises_type_error():
    with pytest.raises(TypeError, match="NaN"):
        check_state({"x": float("nan")})
    assert issubclass(StateError, TypeError)


def _nested(levels):
    value = {}
    for _ in range(levels):
        value = {"a": value}
    return value


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ({"n": 10**5000}, "state['n'] is an integer of more than 4300 digits"),
        ({"n": [-(10**4400)]}, "state['n'][0] is an integer of more than"),
        ({"deep": _nested(5000)}, "is nested more than 100 levels deep"),
        ({"deep": [[[[[[[[[[[]]]]]]]]]]] * 1}, None),
        ({"s": "half \ud800 a pair"}, "state['s'] contains a lone surrogate"),
        ({"\udc80": 1}, "state has a key that contains a lone surrogate"),
        ({"k\x00": 1}, "state has a key that contains a NUL character"),
    ],
)
def test_values_the_database_or_python_cannot_round_trip_are_refused(value, fragment):
    problem = find_problem(value)
    if fragment is None:
        assert problem is None
    else:
        assert problem is not None and fragment in problem, problem


def test_nesting_up_to_the_limit_passes():
    assert find_problem(_nested(MAX_DEPTH - 1)) is None  # MAX_DEPTH dicts, the outermost included
    assert "nested more than" in find_problem(_nested(MAX_DEPTH))


def test_a_state_nested_too_deeply_is_named_by_a_shortened_path():
    problem = find_problem({"deep": _nested(5000)})
    assert problem.startswith("state['deep']") and len(problem) < 250, problem  # not 100 levels of path


def test_integers_up_to_the_digit_limit_pass():
    assert find_problem({"n": 10**4299, "m": -(10**4299), "big": 2**64}) is None


@pytest.mark.parametrize("number", [1e300, -1.5e17, 1e16, 1.7976931348623157e308, 123456789012345678.0])
def test_large_floats_are_written_out_so_jsonb_keeps_them_floats(number):
    text = dumps({"f": number, "s": "1e+300 stays in a string"})
    assert "e+" not in text.replace("1e+300 stays", "")
    assert text.endswith('.0,"s":"1e+300 stays in a string"}')
    back = json.loads(text)
    assert back["f"] == number and isinstance(back["f"], float)
    assert json.loads(json.dumps({"f": number}, cls=StateEncoder))["f"] == number


def test_small_and_ordinary_numbers_are_written_as_json_writes_them():
    value = {"a": 1e-7, "b": 2.5, "c": 10, "d": 1e15}
    assert dumps(value) == json.dumps(value, separators=(",", ":"))


@pytest.mark.parametrize(
    ("text", "clean"),
    [("plain", "plain"), ("bad\x00text", "badtext"), ("half \ud800 pair", "half \\ud800 pair"),
     ("\udcff\x00", "\\udcff")],
)
def test_clean_text_removes_nul_and_escapes_lone_surrogates(text, clean):
    assert clean_text(text) == clean
    clean.encode("utf-8")  # storable


class _Unprintable(Exception):
    def __str__(self):
        raise SystemExit("no")


class _NotAString(Exception):
    def __str__(self):
        return 42


@pytest.mark.parametrize(
    ("error", "text"),
    [(ValueError("x"), "ValueError: x"), (KeyError(), "KeyError"), (_Unprintable(), "_Unprintable"),
     (_NotAString(), "_NotAString"), (ValueError("a\x00b\ud800"), "ValueError: ab\\ud800"),
     (SystemExit(3), "SystemExit: 3")],
)
def test_describe_never_raises_and_gives_storable_text(error, text):
    assert describe(error) == text
