"""Outcomes and submissions the database could not take as they are: refused or cleaned before it sees them."""

import pytest

from django_procedures import LockKey, Procedure, step
from django_procedures.models import ProcedureRun, Step
from django_procedures.policy.state import StateError
from django_procedures.testing import drain
from testproject.testapp.faults import SpawnsUnstorableChild, Unstorable
from testproject.testapp.models import Effect
from testproject.testapp.procedures import ThreeSteps

pytestmark = pytest.mark.django_db


def _nested(levels):
    value = {}
    for _ in range(levels):
        value = {"a": value}
    return value


@pytest.mark.parametrize(
    ("state", "fragment"),
    [({"n": 10**5000}, "state['n'] is an integer of more than"),
     ({"deep": _nested(5000)}, "nested more than 100 levels deep"),
     ({"s": "\ud800"}, "state['s'] contains a lone surrogate"),
     ({"s": "a\x00"}, "state['s'] contains a NUL character")],
)
def test_submit_refuses_what_cannot_be_stored_with_a_type_error(state, fragment):
    with pytest.raises(TypeError, match=fragment.replace("[", r"\[").replace("]", r"\]")) as raised:
        ThreeSteps.submit(state)
    assert isinstance(raised.value, StateError)
    assert not ProcedureRun.objects.exists()


def test_a_child_state_that_cannot_be_stored_fails_the_parent_naming_it():
    parent = SpawnsUnstorableChild.submit()
    drain()
    run = ProcedureRun.objects.get(id=parent.id)
    assert run.status == "failed"
    assert "cannot submit the children" in run.error and "children[0].state['n'] is an integer" in run.error
    assert ProcedureRun.objects.count() == 1  # no child was written


def test_large_floats_come_back_as_floats():
    handle = Unstorable.submit({"kind": "float", "start": 1e300, "neg": -2.5e20})
    assert drain()["completed"] == 1
    run = ProcedureRun.objects.get(id=handle.id)
    assert run.state["start"] == 1e300 and isinstance(run.state["start"], float)
    assert run.state["neg"] == -2.5e20 and isinstance(run.state["neg"], float)
    assert run.state["f"] == 1e300 and isinstance(run.state["f"], float)  # written by the step's checkpoint
    assert run.output == {"f": 1.5e17, "small": 1e-7} and isinstance(run.output["f"], float)
    checkpoint = Step.objects.get(procedure_id=handle.id).state
    assert isinstance(checkpoint["f"], float)


@pytest.mark.parametrize(
    ("kind", "error", "attempts"),
    [("nul_error", "ValueError: badtext", 2),
     ("surrogate_error", "ValueError: half a pair: \\ud800", 2),
     ("str_raises", "_Unprintable", 2),
     ("deep_state", "state['deep']", 1),
     ("big_int", "state['n'] is an integer of more than", 1),
     ("surrogate_state", "state['s'] contains a lone surrogate", 1),
     ("deep_output", "output['a']", 1)],
)
def test_an_outcome_that_cannot_be_stored_as_it_is_fails_the_step(kind, error, attempts):
    handle = Unstorable.submit({"kind": kind})
    for _ in range(attempts):
        drain()
    run = ProcedureRun.objects.get(id=handle.id)
    assert run.status == "failed", (run.status, run.error)
    assert error in run.error
    assert "\x00" not in run.traceback
    assert run.lost == 0 and run.attempt == attempts + 1
    assert list(Step.objects.filter(procedure_id=handle.id).values_list("attempt", "status")) == [
        (n, "failed") for n in range(1, attempts + 1)]
    assert Effect.objects.filter(procedure_id=handle.id).count() == attempts


class _NulKey(Procedure):
    type_name = "tests.NulLockKey"

    def lock_keys(self):
        return [LockKey.exclusive(f"tenant:{self.state['tenant']}\x00")]

    @step
    def only(self, ctx):
        pass


def test_a_lock_key_name_that_cannot_be_stored_is_refused_at_submit():
    with pytest.raises(TypeError, match=r"lock key name .* contains a NUL character"):
        _NulKey.submit({"tenant": "acme"})
    assert not ProcedureRun.objects.exists()
