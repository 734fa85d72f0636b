import pytest

from django_procedures.policy.state import StateError, check_state, find_problem


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
