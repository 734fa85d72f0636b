"""Debounced submits: one pending procedure per key with the latest state, due a delay after the last submit."""

import math
from datetime import UTC, datetime, timedelta

import pytest

from django_procedures import Procedure, Status, clock, step
from django_procedures.exceptions import KeyConflict
from django_procedures.models import ProcedureRun
from django_procedures.store.claim import claim
from django_procedures.testing import drain

T0 = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
pytestmark = pytest.mark.django_db


class Reindex(Procedure):
    type_name = "debounce.Reindex"

    @step
    def run(self, ctx):
        return Status.done(output=self.state)


class Other(Procedure):
    type_name = "debounce.Other"

    @step
    def run(self, ctx):
        pass


def rows(key="user:1"):
    return list(ProcedureRun.objects.filter(type_name=Reindex.type_name).order_by("created_at", "id"))


def submit_at(when, state, debounce=60, key="user:1"):
    with clock.frozen_at(when):
        return Reindex.submit(state, key=key, debounce=debounce)


def test_a_submit_before_the_claim_replaces_the_state_and_moves_the_due_time():
    first = submit_at(T0, {"v": 1})
    second = submit_at(T0 + timedelta(seconds=10), {"v": 2}, debounce=timedelta(seconds=60))
    assert first.created and not second.created and second.id == first.id
    (run,) = rows()
    assert (run.state, run.run_at, run.key) == ({"v": 2}, T0 + timedelta(seconds=70), "user:1")
    assert drain(now=T0 + timedelta(seconds=69)).claimed == 0  # not due before debounce after the last submit
    drain(now=T0 + timedelta(seconds=70))
    assert first.refresh().output == {"v": 2}


@pytest.mark.parametrize("how", ["final", "running"])
def test_once_claimed_a_submit_makes_a_new_one_and_the_key_moves_to_it(how):
    first = submit_at(T0, {"v": 1}, debounce=0)
    with clock.frozen_at(T0):
        if how == "final":
            drain(now=T0)
        else:
            claim("w", type_names=[Reindex.type_name], lease_seconds=60)
    second = submit_at(T0 + timedelta(seconds=5), {"v": 2}, debounce=30)
    assert second.created and second.id != first.id
    old, new = rows()
    assert (old.id, old.key, old.state) == (first.id, None, {"v": 1})
    assert (new.key, new.state, new.run_at, new.status) == ("user:1", {"v": 2}, T0 + timedelta(seconds=35), "ready")
    third = submit_at(T0 + timedelta(seconds=6), {"v": 3}, debounce=30)
    assert third.id == second.id and ProcedureRun.objects.get(id=second.id).state == {"v": 3}


def test_without_debounce_a_key_keeps_its_meaning():
    first = submit_at(T0, {"v": 1})
    again = Reindex.submit({"v": 2}, key="user:1")
    assert again.id == first.id and not again.created and rows()[0].state == {"v": 1}


def test_using_and_an_instance_carry_debounce():
    with clock.frozen_at(T0):
        first = Reindex.using(key="k", debounce=5).submit({"v": 1})
        second = Reindex({"v": 2}, key="k").submit(debounce=5)
    assert second.id == first.id and ProcedureRun.objects.get(id=first.id).state == {"v": 2}


def test_a_key_of_another_type_is_refused_and_nothing_changes():
    Other.submit({}, key="user:1")
    with pytest.raises(KeyConflict, match=r"already names procedure .* of type debounce\.Other"):
        submit_at(T0, {"v": 1})
    assert rows() == []


@pytest.mark.parametrize(("debounce", "error", "fragment"), [
    (-1, ValueError, "debounce must be a finite delay of at least 0 seconds; got -1"),
    (timedelta(seconds=-1), ValueError, "debounce must be a finite delay of at least 0 seconds"),
    (math.nan, ValueError, "debounce must be a finite delay of at least 0 seconds; got nan"),
    (math.inf, ValueError, "debounce must be a finite delay of at least 0 seconds; got inf"),
    (True, TypeError, "debounce must be a timedelta or a number of seconds; got bool"),
    ("5", TypeError, "debounce must be a timedelta or a number of seconds; got str"),
])
def test_a_bad_debounce_is_refused(debounce, error, fragment):
    with pytest.raises(error, match=fragment):
        Reindex.submit({}, key="k", debounce=debounce)
    assert rows() == []


def test_debounce_needs_a_key_and_one_procedure():
    with pytest.raises(ValueError, match="debounce needs a key"):
        Reindex.submit({}, debounce=5)
    with pytest.raises(ValueError, match="give run_after or debounce, not both"):
        Reindex.submit({}, key="k", debounce=5, run_after=5)
    with pytest.raises(ValueError, match="submit_many\\(\\) does not take it"):
        Reindex.using(debounce=5).submit_many([{}], keys=["k"])
    with pytest.raises(TypeError, match="cannot make a child"):
        Reindex.using(debounce=5).child({})
    assert rows() == []


def test_the_pending_procedure_keeps_its_queue_and_priority_and_takes_the_new_states_lock_keys():
    from django_procedures import LockKey

    class Keyed(Procedure):
        type_name = "debounce.Keyed"

        def lock_keys(self):
            return [LockKey.exclusive(f"tenant:{self.state['tenant']}")]

        @step
        def run(self, ctx):
            pass

    with clock.frozen_at(T0):
        first = Keyed.submit({"tenant": 1}, key="k", debounce=5, queue="a", priority=3)
        Keyed.submit({"tenant": 2}, key="k", debounce=5, queue="b", priority=9)
    run = ProcedureRun.objects.get(id=first.id)
    assert (run.queue, run.priority, run.lock_keys) == ("a", 3, [["tenant:2", "exclusive"]])
