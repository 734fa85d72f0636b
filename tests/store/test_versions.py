"""Procedure versions: the class's declaration, the claim's version rule, and older runs under newer code (drain)."""

from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from django_procedures import LockKey, Procedure, RetryPolicy, Status, clock, register_schedule, step, tick
from django_procedures.exceptions import ProceduresConfigError
from django_procedures.models import ProcedureRun, Step
from django_procedures.store.claim import claim, newer_versions
from django_procedures.store.due import next_due
from django_procedures.testing import drain, isolated_registry

T0 = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
RETRY_LATER = RetryPolicy(max_attempts=3, initial_delay=60.0, backoff=1.0, jitter=0.0)
pytestmark = pytest.mark.django_db


def run_of(handle):
    return ProcedureRun.objects.get(id=handle.id)


# -- the class's declaration ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("attributes", "fragment"), [
    ({"version": 0}, "Bad.version must be an int of at least 1"),
    ({"version": "2"}, "Bad.version must be an int of at least 1"),
    ({"version": True}, "Bad.version must be an int of at least 1"),
    ({"renamed_steps": {"old": "gone"}}, "maps 'old' to 'gone', which is not a step of Bad"),
    ({"renamed_steps": {"one": "two"}}, "maps 'one', which is still a step of Bad"),
    ({"renamed_steps": ["old", "one"]}, "renamed_steps must be a dict of step names"),
])
def test_a_bad_version_or_renamed_steps_is_refused_where_the_class_is_defined(attributes, fragment):
    body = {"type_name": "versions.Bad", "one": step(lambda self, ctx: None),
            "two": step(lambda self, ctx: None), **attributes}
    with pytest.raises(ProceduresConfigError, match=fragment):
        type("Bad", (Procedure,), body)


def test_submit_stores_the_class_version_and_children_their_own():
    class Child(Procedure):
        type_name = "versions.Child"
        version = 4

        @step
        def only(self, ctx):
            pass

    class Parent(Procedure):
        type_name = "versions.Parent"
        version = 3

        @step
        def spawn(self, ctx):
            return Status.suspended([Child()])

    handle = Parent.submit(run_after=T0)
    assert run_of(handle).version == 3
    drain(now=T0)
    assert run_of(handle).status == "done"
    assert ProcedureRun.objects.get(parent_id=handle.id).version == 4


def test_runs_started_by_a_schedule_store_the_class_version():
    class Nightly(Procedure):
        type_name = "versions.Nightly"
        version = 5

        @step
        def only(self, ctx):
            pass

    with clock.frozen_at(T0):
        register_schedule("nightly-versions", Nightly, period=timedelta(minutes=1))
    assert tick(T0).started == 1
    assert ProcedureRun.objects.get(type_name=Nightly.type_name).version == 5


# -- the claim's rule ----------------------------------------------------------------------------------------


class Keyed(Procedure):
    type_name = "versions.Keyed"
    abstract = True

    def lock_keys(self):
        return [LockKey.exclusive(self.state["key"])] if "key" in self.state else []

    @step
    def only(self, ctx):
        pass


def test_a_claim_leaves_runs_of_a_newer_version_and_takes_equal_and_older_ones():
    class Job(Keyed):
        type_name = "versions.Job"
        abstract = False

    handles = [Job.submit({"v": v, **({"key": f"k{v}"} if v == 3 else {})}) for v in (1, 2, 3, 3)]
    for handle, version in zip(handles, (1, 2, 3, 3), strict=True):
        ProcedureRun._writer.filter(id=handle.id).update(version=version)
    names = [Job.type_name]

    claimed = claim("w", type_names=names, versions=[2], limit=10, lease_seconds=30)
    assert sorted(c.state["v"] for c in claimed) == [1, 2]
    assert {c.version for c in claimed} == {1, 2}
    # Both runs of version 3 (one taking a lock key) are left alone, and are not due for this worker either.
    assert claim("w", type_names=names, versions=[2], limit=10, lease_seconds=30) == []
    assert next_due(type_names=names, versions=[2]) is None
    assert newer_versions(names, [2]) == {Job.type_name: (2, 3)}
    assert next_due(type_names=names, versions=[3]) is not None


def test_the_registered_class_version_is_the_default():
    class Job(Procedure):
        type_name = "versions.Job"
        version = 2

        @step
        def only(self, ctx):
            pass

    newer = Job.submit(run_after=T0)
    ProcedureRun._writer.filter(id=newer.id).update(version=3)
    assert drain(now=T0).claimed == 0
    assert drain(now=T0).next_due is None  # an idle worker does not spin on it
    assert run_of(newer).status == "ready"


# -- older runs under newer code -----------------------------------------------------------------------------


def test_upgrade_state_runs_once_and_the_next_checkpoint_records_the_new_version():
    with isolated_registry():
        class V1(Procedure):
            type_name = "versions.Order"

            @step
            def price(self, ctx):
                self.state["amount"] = 5

            @step
            def charge(self, ctx):
                pass

        old = V1.submit({"item": "tea"}, run_after=T0)
    calls = []

    class V2(Procedure):
        type_name = "versions.Order"
        version = 2
        retry = RETRY_LATER

        def upgrade_state(self, state, from_version):
            calls.append((dict(state), from_version))
            return {"item": state["item"], "cents": state.get("amount", 0) * 100}

        @step
        def price(self, ctx):
            self.state["cents"] = 500

        @step
        def charge(self, ctx):
            if ctx.attempt == 1:
                raise RuntimeError("card network down")
            return Status.done(output=self.state)

    drain(now=T0)
    run = run_of(old)
    assert calls == [({"item": "tea"}, 1)]
    assert (run.status, run.version, run.step_name) == ("retrying", 2, "charge")
    assert run.state == {"item": "tea", "cents": 500}
    drain(now=T0 + timedelta(seconds=60))  # a later claim of a version-2 run: no upgrade again
    assert calls == [({"item": "tea"}, 1)]
    assert old.refresh().status == "done"


@pytest.mark.postgres
def test_a_checkpoint_at_the_same_version_writes_no_version():
    class Same(Procedure):
        type_name = "versions.Same"

        @step
        def one(self, ctx):
            pass

        @step
        def two(self, ctx):
            pass

    Same.submit(run_after=T0)
    with CaptureQueriesContext(connection) as queries:
        drain(now=T0)
    writes = [q["sql"] for q in queries.captured_queries if "UPDATE" in q["sql"] and "step_name" in q["sql"]]
    assert writes and not any("version =" in sql for sql in writes)


def test_a_renamed_step_resumes_under_its_new_name():
    with isolated_registry():
        class V1(Procedure):
            type_name = "versions.Export"

            @step
            def fetch(self, ctx):
                self.state["rows"] = 3

            @step
            def upload(self, ctx):
                pass

        old = V1.submit(run_after=T0)

    class V2(Procedure):
        type_name = "versions.Export"
        version = 2
        renamed_steps = {"fetch": "download"}

        @step
        def download(self, ctx):
            self.state["rows"] = 4

        @step
        def upload(self, ctx):
            return Status.done(output=self.state["rows"])

    drain(now=T0)
    assert old.refresh().status == "done" and old.output == 4
    assert list(Step.objects.filter(procedure_id=old.id).order_by("index").values_list("name", flat=True)) == [
        "download", "upload"]


def test_a_removed_step_fails_naming_both_versions_and_is_retried_by_hand_after_a_fix():
    with isolated_registry():
        class V1(Procedure):
            type_name = "versions.Ship"
            retry = RETRY_LATER

            @step
            def pack(self, ctx):
                pass

            @step
            def label(self, ctx):
                raise RuntimeError("printer jammed")

            @step
            def send(self, ctx):
                pass

        old = V1.submit(run_after=T0)
        drain(now=T0)
        assert run_of(old).step_name == "label"

    with isolated_registry():
        class V2(Procedure):
            type_name = "versions.Ship"
            version = 2

            @step
            def pack(self, ctx):
                pass

            @step
            def send(self, ctx):
                return Status.done(output="sent")

        drain(now=T0 + timedelta(seconds=60))
        run = run_of(old)
        assert run.status == "failed" and run.failure_can_retry
        assert "step 'label' no longer exists in versions.Ship" in run.error
        assert "written by version 1" in run.error and "class is version 2" in run.error
        assert drain(now=T0 + timedelta(seconds=120)).claimed == 0  # failed for good: no crash loop

    class V3(Procedure):  # the fix: the old step maps to the one that replaced it
        type_name = "versions.Ship"
        version = 3
        renamed_steps = {"label": "send"}

        @step
        def pack(self, ctx):
            pass

        @step
        def send(self, ctx):
            return Status.done(output="sent")

    old.retry()
    drain(now=T0 + timedelta(seconds=180))
    assert old.refresh().status == "done" and old.output == "sent"
    assert run_of(old).version == 3


@pytest.mark.parametrize(("bad", "fragment"), [
    ("raise", "ValueError: no currency"),
    ("list", "it must return the state as a dict (a JSON object); got list"),
    ("none", "it must return the state as a dict (a JSON object); got NoneType"),
    ("nan", "the state it returned cannot be stored"),
])
def test_upgrade_state_that_raises_or_returns_no_object_fails_that_run_only(bad, fragment):
    with isolated_registry():
        class V1(Procedure):
            type_name = "versions.Pay"

            @step
            def pay(self, ctx):
                pass

        broken = V1.submit({"bad": bad}, run_after=T0)
        fine = V1.submit({"bad": ""}, run_after=T0)

    class V2(Procedure):
        type_name = "versions.Pay"
        version = 2

        def upgrade_state(self, state, from_version):
            if state["bad"] == "raise":
                raise ValueError("no currency")
            if state["bad"] == "list":
                return [state]
            if state["bad"] == "none":
                return None
            if state["bad"] == "nan":
                return {"amount": float("nan")}
            return {**state, "currency": "EUR"}

        @step
        def pay(self, ctx):
            return Status.done(output=self.state)

    drain(now=T0)
    run = run_of(broken)
    assert run.status == "failed" and run.failure_can_retry and run.version == 1
    assert "versions.Pay.upgrade_state(state, from_version=1) to version 2 failed" in run.error
    assert fragment in run.error
    assert fine.refresh().status == "done" and fine.output == {"bad": "", "currency": "EUR"}
    assert run_of(fine).version == 2


def test_a_suspension_records_the_upgraded_state_and_version():
    class Leaf(Procedure):
        type_name = "versions.Leaf"

        @step
        def only(self, ctx):
            pass

    with isolated_registry():
        class V1(Procedure):
            type_name = "versions.Fan"

            @step
            def spawn(self, ctx):
                pass

        old = V1.submit({"n": 1}, run_after=T0)

    class V2(Procedure):
        type_name = "versions.Fan"
        version = 2

        def upgrade_state(self, state, from_version):
            return {"count": state["n"]}

        @step
        def spawn(self, ctx):
            return Status.suspended([Leaf()])

        @step
        def gather(self, ctx):
            return Status.done(output=self.state)

    # The parent's resumed claim reads version 2, so it does not upgrade {"count": 1} again (which would fail).
    drain(now=T0)
    assert old.refresh().output == {"count": 1}
    assert run_of(old).version == 2
