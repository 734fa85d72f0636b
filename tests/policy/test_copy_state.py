"""copy_state: the executor's copy of a claim's state is the copy copy.deepcopy makes, for less CPU."""

import copy
from decimal import Decimal

from django_procedures.policy.state import copy_state


def test_a_json_state_is_copied_as_deepcopy_copies_it():
    state = {"args": [1, 2.5, "x", None, True, {"k": [[], {}]}], "kwargs": {"a": {"b": [False, -3]}}}
    copied = copy_state(state)
    assert copied == copy.deepcopy(state) == state
    assert copied is not state and copied["args"] is not state["args"]
    assert copied["args"][5]["k"][0] is not state["args"][5]["k"][0]
    copied["kwargs"]["a"]["b"].append(1)
    assert state["kwargs"]["a"]["b"] == [False, -3]


def test_shared_and_self_containing_values_stay_so_and_other_types_are_deep_copied():
    shared = [1]
    state = {"a": shared, "b": shared, "other": (Decimal("1.5"), [shared]), "set": {1}}
    state["self"] = state
    copied = copy_state(state)
    assert copied["a"] is copied["b"] is copied["other"][1][0] and copied["a"] is not shared
    assert copied["self"] is copied
    assert copied["other"] == (Decimal("1.5"), [[1]]) and copied["set"] == {1} and copied["set"] is not state["set"]
