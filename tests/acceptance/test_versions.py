"""Acceptance: docs/changing-procedures.md read as a user would. Old runs are parked by a durable sleep under
one class, then drained under the next deploy's class of the same type name."""

from datetime import UTC, datetime, timedelta

import pytest
from django.core.exceptions import ImproperlyConfigured

from django_procedures import NonRetryable, Procedure, Status, get_handle, step
from django_procedures.exceptions import ProceduresConfigError
from django_procedures.models import ProcedureRun
from django_procedures.testing import drain, isolated_registry

pytestmark = pytest.mark.django_db
T0 = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
LATER = T0 + timedelta(hours=1)


def park_v1(type_name="acc.Payment", state=None, count=1):
    """Version 1 of a procedure runs its first step, which sleeps: the runs stand at 'charge'."""
    with isolated_registry():
        def prepare(self, ctx):
            return Status.sleep(3600)

        def charge(self, ctx):
            self.state["charged_v1"] = True

        Payment = type("Payment", (Procedure,), {"type_name": type_name, "__module__": __name__,
                                                 "prepare": step(prepare), "charge": step(charge)})
        handles = []
        for i in range(count):
            handles.append(Payment.submit(state or {"amount": 12.5, "i": i}, run_after=T0))
        drain(now=T0)
    for handle in handles:
        assert handle.refresh().status == "waiting"
    return handles


def test_the_version_is_stored_on_each_run():
    class V3(Procedure):
        type_name = "acc.V3"
        version = 3

        @step
        def only(self, ctx): ...

    handle = V3.submit({})
    assert ProcedureRun.objects.get(id=handle.id).version == 3


def test_the_default_version_is_one():
    class V(Procedure):
        type_name = "acc.Vdefault"

        @step
        def only(self, ctx): ...

    assert V.version == 1
    assert ProcedureRun.objects.get(id=V.submit({}).id).version == 1


def test_upgrade_state_changes_the_shape_and_the_checkpoint_records_the_new_version():
    (handle,) = park_v1()
    seen = []

    class Payment(Procedure):
        type_name = "acc.Payment"
        version = 2

        def upgrade_state(self, state, from_version):
            seen.append(from_version)
            if from_version < 2:
                state["cents"] = round(state.pop("amount") * 100)
            return state

        @step
        def prepare(self, ctx): ...

        @step
        def charge(self, ctx):
            self.state["charged"] = self.state["cents"]

    drain(now=LATER)
    run = ProcedureRun.objects.get(id=handle.id)
    assert (run.status, run.version, run.state.get("charged"), seen) == ("done", 2, 1250, [1])


@pytest.mark.parametrize("bad", ["raise", "list", "none", "not json"])
def test_upgrade_state_raising_or_not_a_dict_fails_that_run_retryable_and_spares_others(bad):
    broken, fine = park_v1(count=2)

    class Payment(Procedure):
        type_name = "acc.Payment"
        version = 2

        def upgrade_state(self, state, from_version):
            if state["i"] == 0:
                if bad == "raise":
                    raise KeyError("amount")
                if bad == "not json":
                    return {**state, "when": datetime(2030, 1, 1)}
                return [] if bad == "list" else None
            return state

        @step
        def prepare(self, ctx): ...

        @step
        def charge(self, ctx): ...

    drain(now=LATER)
    assert fine.refresh().status == "done"
    assert broken.refresh().status == "failed"
    assert "upgrade_state" in broken.error
    run = ProcedureRun.objects.get(id=broken.id)
    assert run.version == 1  # nothing changed on the failed run
    assert run.failure_can_retry


def test_a_removed_step_fails_at_once_naming_step_type_and_both_versions():
    (handle,) = park_v1("acc.Removed")

    class Removed(Procedure):
        type_name = "acc.Removed"
        version = 2

        @step
        def prepare(self, ctx): ...

        @step
        def finish(self, ctx): ...

    report = drain(now=LATER)
    handle.refresh()
    assert handle.status == "failed", report
    for word in ("'charge'", "acc.Removed", "version 1", "version 2", "renamed_steps"):
        assert word in handle.error
    assert ProcedureRun.objects.get(id=handle.id).failure_can_retry


def test_renamed_steps_resume_at_the_new_name():
    (handle,) = park_v1("acc.Renamed")

    class Renamed(Procedure):
        type_name = "acc.Renamed"
        version = 2
        renamed_steps = {"charge": "bill"}

        @step
        def prepare(self, ctx): ...

        @step
        def bill(self, ctx):
            self.state["billed"] = True

    drain(now=LATER)
    assert handle.refresh().status == "done"
    assert handle.run.state["billed"] is True


def test_a_newer_run_is_left_alone_by_an_older_class():
    with isolated_registry():
        class New(Procedure):
            type_name = "acc.Newer"
            version = 3

            @step
            def only(self, ctx): ...

        handle = New.submit({}, run_after=T0)

    class Old(Procedure):
        type_name = "acc.Newer"
        version = 2

        @step
        def only(self, ctx): ...

    assert drain(now=LATER).claimed == 0
    assert handle.refresh().status == "ready"


def bad_version_class(version):
    return type("Bad", (Procedure,), {"type_name": "acc.BadV", "version": version,
                                      "__module__": __name__, "only": step(lambda self, ctx: None)})


@pytest.mark.parametrize("version", [0, -1, "2", 1.5, None, True])
def test_a_bad_version_in_the_class_body_is_a_config_error(version):
    with pytest.raises(ProceduresConfigError):
        bad_version_class(version)


@pytest.mark.parametrize("renamed", [{"old": "missing"}, {"only": "only"}])
def test_bad_renamed_steps_are_config_errors(renamed):
    with pytest.raises(ProceduresConfigError):
        class Bad(Procedure):
            type_name = "acc.BadRenamed"
            renamed_steps = renamed

            @step
            def only(self, ctx): ...


class Order(Procedure):
    type_name = "acc.Order"

    @step
    def prepare(self, ctx):
        self.state["prepared"] = self.state.get("prepared", 0) + 1

    @step
    def charge(self, ctx):
        if self.state.get("fail", True):
            raise NonRetryable("card declined")
        self.state["charged"] = True


def failed_order():
    handle = Order.submit({"n": 1})
    for _ in range(10):
        drain()
        if handle.refresh().status == "failed":
            break
    assert handle.status == "failed"
    return handle


def test_rerun_from_a_step_starts_a_linked_new_run_from_the_state_before_it():
    original = failed_order()
    new = get_handle(original.id).rerun(from_step="charge")
    assert new.id != original.id
    run = ProcedureRun.objects.get(id=new.id)
    assert run.rerun_of_id == original.id
    assert list(ProcedureRun.objects.get(id=original.id).reruns.values_list("id", flat=True)) == [new.id]
    assert run.step_name == "charge"
    assert run.state["prepared"] == 1


def test_rerun_default_is_the_first_step_with_the_submitted_state():
    original = failed_order()
    new = original.rerun()
    run = ProcedureRun.objects.get(id=new.id)
    assert run.step_name == "prepare" and run.state == {"n": 1}


@pytest.mark.parametrize("from_step", ["nope", ""])
def test_rerun_from_no_step_is_a_value_error_and_writes_nothing(from_step):
    original = failed_order()
    before = ProcedureRun.objects.count()
    with pytest.raises(ValueError):
        original.rerun(from_step=from_step)
    assert ProcedureRun.objects.count() == before


def test_rerun_of_an_unfinished_run_is_a_value_error():
    handle = Order.submit({}, run_after=T0)
    with pytest.raises(ValueError):
        handle.rerun()
    assert ProcedureRun.objects.count() == 1


def test_rerun_from_code_of_a_lower_version_is_a_value_error():
    with isolated_registry():
        class Down(Procedure):
            type_name = "acc.Down"
            version = 2

            @step
            def only(self, ctx):
                raise ValueError("x")

        handle = Down.submit({})
        handle.cancel()

    class Down(Procedure):
        type_name = "acc.Down"

        @step
        def only(self, ctx): ...

    with pytest.raises(ValueError):
        handle.rerun()
    assert ProcedureRun.objects.count() == 1


def test_only_improperly_configured_is_the_base_of_config_errors():
    assert issubclass(ProceduresConfigError, ImproperlyConfigured)


def test_a_version_past_the_columns_range_is_a_config_error_and_the_largest_one_is_stored():
    # ProcedureRun.version is a PositiveIntegerField: PostgreSQL's integer ends at 2**31 - 1, where SQLite's does not.
    with pytest.raises(ProceduresConfigError):
        bad_version_class(2**31)
    largest = bad_version_class(2**31 - 1)
    handle = largest.submit({})
    assert ProcedureRun.objects.get(id=handle.id).version == 2**31 - 1


def test_a_failed_attempt_keeps_the_old_state_and_version_and_the_next_claim_upgrades_again():
    (handle,) = park_v1("acc.Again")
    calls = []

    class Again(Procedure):
        type_name = "acc.Again"
        version = 2

        def upgrade_state(self, state, from_version):
            calls.append(from_version)
            state["cents"] = round(state["amount"] * 100)
            return state

        @step
        def prepare(self, ctx): ...

        @step
        def charge(self, ctx):
            if len(calls) == 1:
                raise RuntimeError("flaky")
            self.state["charged"] = self.state["cents"]

    drain(now=LATER)
    run = ProcedureRun.objects.get(id=handle.id)
    assert run.status == "retrying" and run.version == 1 and "cents" not in run.state
    drain(now=LATER + timedelta(days=1))
    run = ProcedureRun.objects.get(id=handle.id)
    assert (run.status, run.version, run.state["charged"], calls) == ("done", 2, 1250, [1, 1])


def test_children_of_a_suspension_and_scheduled_runs_carry_their_classs_version():
    from django_procedures import register_schedule, tick

    class Child(Procedure):
        type_name = "acc.VChild"
        version = 4

        @step
        def only(self, ctx): ...

    class Parent(Procedure):
        type_name = "acc.VParent"
        version = 2

        @step
        def spawn(self, ctx):
            return Status.suspended([Child(state={})])

    Parent.submit({})
    drain()
    assert ProcedureRun.objects.get(type_name="acc.VChild").version == 4
    assert ProcedureRun.objects.get(type_name="acc.VParent").version == 2
    register_schedule("acc-versioned", Child, period=timedelta(hours=1))
    tick()
    assert set(ProcedureRun.objects.filter(type_name="acc.VChild").values_list("version", flat=True)) == {4}
    assert ProcedureRun.objects.filter(type_name="acc.VChild").count() == 2
