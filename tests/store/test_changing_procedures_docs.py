"""The examples of docs/changing-procedures.md: runs stored by the old class, drained under the new one."""

from contextlib import contextmanager
from datetime import UTC, datetime

import pytest

from django_procedures import Procedure, Status, step
from django_procedures.admin.reads import facts_of
from django_procedures.admin.why import explain
from django_procedures.models import ProcedureRun, Step
from django_procedures.testing import drain, isolated_registry

T0 = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
pytestmark = pytest.mark.django_db


@contextmanager
def deployed():
    """Code of one deploy: the classes defined inside are gone (replaced by the next deploy's) at its end."""
    with isolated_registry():
        yield


def at_step(handle, name):
    """Stand the run at ``name``, as if the old code had run the steps before it."""
    ProcedureRun._writer.filter(id=handle.id).update(step_name=name)


def names(handle):
    return list(Step.objects.filter(procedure_id=handle.id).order_by("id").values_list("name", flat=True))


def test_add_a_step():
    with deployed():
        class Invoice(Procedure):
            type_name = "docs.Invoice"

            @step
            def render(self, ctx): ...

            @step
            def send(self, ctx): ...

        at_render, at_send = Invoice.submit(run_after=T0), Invoice.submit(run_after=T0)
        at_step(at_send, "send")

    class Invoice(Procedure):  # the next deploy's class
        type_name = "docs.Invoice"
        version = 2

        @step
        def render(self, ctx): ...

        @step
        def archive(self, ctx): ...

        @step
        def send(self, ctx): ...

    drain(now=T0)
    assert names(at_render) == ["render", "archive", "send"]
    assert names(at_send) == ["send"]  # resumes at the step it names: archive does not run for it
    assert {run.version for run in ProcedureRun.objects.all()} == {2}


def test_remove_a_step():
    with deployed():
        class Invoice(Procedure):
            type_name = "docs.Invoice"
            version = 2

            @step
            def render(self, ctx): ...

            @step
            def archive(self, ctx): ...

            @step
            def send(self, ctx): ...

        mapped, unmapped = Invoice.submit(run_after=T0), Invoice.submit(run_after=T0)
        at_step(mapped, "archive")

    with deployed():
        class Unmapped(Procedure):
            type_name = "docs.Invoice"
            version = 3

            @step
            def render(self, ctx): ...

            @step
            def send(self, ctx): ...

        drain(now=T0)
        failed = ProcedureRun.objects.get(id=mapped.id)
        assert failed.status == "failed" and failed.failure_can_retry
        assert failed.error.startswith(
            "step 'archive' no longer exists in docs.Invoice (the run was written by version 2; this worker's "
            "class is version 3): restore the step, or map it in renamed_steps = {'archive': 'new_name'}")
        assert unmapped.refresh().status == "done"

    class Invoice(Procedure):  # as the page writes it
        type_name = "docs.Invoice"
        version = 3
        renamed_steps = {"archive": "send"}

        @step
        def render(self, ctx): ...

        @step
        def send(self, ctx): ...

    mapped.retry()
    drain(now=T0)
    assert mapped.refresh().status == "done"
    assert names(mapped)[-1] == "send"


def test_rename_a_step():
    with deployed():
        class Export(Procedure):
            type_name = "docs.Export"

            @step
            def fetch(self, ctx): ...

        old = Export.submit(run_after=T0)

    class Export(Procedure):
        type_name = "docs.Export"
        version = 2
        renamed_steps = {"fetch": "download"}

        @step
        def download(self, ctx): ...

    drain(now=T0)
    assert old.refresh().status == "done" and names(old) == ["download"]


def test_change_the_states_shape():
    with deployed():
        class Payment(Procedure):
            type_name = "docs.Payment"

            @step
            def charge(self, ctx): ...

        old, broken = Payment.submit({"amount": 12.5}, run_after=T0), Payment.submit({}, run_after=T0)

    class Payment(Procedure):
        type_name = "docs.Payment"
        version = 2

        def upgrade_state(self, state, from_version):
            if from_version < 2:
                state["cents"] = round(state.pop("amount") * 100)
            return state

        @step
        def charge(self, ctx):
            return Status.done(output=self.state)

    new = Payment.submit({"cents": 300}, run_after=T0)
    drain(now=T0)
    assert old.refresh().output == {"cents": 1250}
    assert new.refresh().output == {"cents": 300}
    failed = ProcedureRun.objects.get(id=broken.id)
    assert failed.status == "failed" and failed.failure_can_retry
    assert failed.error.startswith("docs.Payment.upgrade_state(state, from_version=1) to version 2 failed: "
                                   "KeyError: 'amount'; fix it, deploy, and retry the procedure")


def test_going_back_to_an_older_version_leaves_newer_runs_waiting():
    with deployed():
        class Invoice(Procedure):
            type_name = "docs.Invoice"
            version = 3

            @step
            def send(self, ctx): ...

        newer = Invoice.submit(run_after=T0)

    class Invoice(Procedure):  # the deploy rolled back
        type_name = "docs.Invoice"
        version = 2

        @step
        def send(self, ctx): ...

    assert drain(now=T0).claimed == 0
    row = ProcedureRun.objects.get(id=newer.id)
    assert row.status == "ready"
    (reason,) = explain(facts_of(row), T0)
    assert reason.text.startswith("written by version 3 of docs.Invoice, newer than version 2 in this code")


def test_re_run_the_failed_orders_from_the_step_that_was_wrong():
    from django_procedures import NonRetryable, get_handle

    with deployed():  # the fix is deployed by the flag below; the class is the same
        bug = {"on": True}

        class Order(Procedure):
            type_name = "shop.Order"

            @step
            def reserve(self, ctx):
                self.state["reserved"] = True

            @step
            def charge(self, ctx):
                if bug["on"]:
                    raise NonRetryable("amount in euros, not cents")
                self.state["charged"] = self.state["cents"]

            @step
            def ship(self, ctx):
                return Status.done(output=self.state)

        orders = [Order.submit({"cents": n}, run_after=T0) for n in range(3)]
        drain(now=T0)
        bug["on"] = False  # the fix is deployed

        failed = (ProcedureRun.objects.filter(type_name="shop.Order", status="failed", failed_step="charge")
                  .order_by("-created_at").values_list("id", flat=True)[:500])
        reruns = [get_handle(procedure_id).rerun(from_step="charge") for procedure_id in failed]
        drain(now=T0)
        assert sorted(h.refresh().output["charged"] for h in reruns) == [0, 1, 2]
        assert {names(h)[0] for h in reruns} == {"charge"}  # reserve did not run again
        assert {h.refresh().status for h in orders} == {"failed"}  # the originals stay as they were
        assert {ProcedureRun.objects.get(id=h.id).rerun_of_id for h in reruns} == {h.id for h in orders}
