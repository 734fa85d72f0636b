"""Re-running a final procedure from a step (``handle.rerun``, ``store.rerun``): the state, the link, the refusals."""

from datetime import UTC, datetime

import pytest

from django_procedures import NonRetryable, Procedure, Status, step
from django_procedures.models import ProcedureRun, Step
from django_procedures.store.rerun import RerunResult, rerun_many, step_names
from django_procedures.testing import drain, isolated_registry

T0 = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
pytestmark = pytest.mark.django_db

#: What the steps of ``Order`` do; a test changes it to deploy "the fix".
BUGGY = {"charge": True}


class Order(Procedure):
    type_name = "rerun.Order"
    queue = "orders"

    @step
    def fetch(self, ctx):
        self.state["items"] = self.state["n"] * 2

    @step
    def charge(self, ctx):
        if BUGGY["charge"]:
            raise NonRetryable("card declined")
        self.state["charged"] = self.state["items"] * 10

    @step
    def ship(self, ctx):
        return Status.done(output=self.state)


@pytest.fixture(autouse=True)
def _buggy():
    BUGGY["charge"] = True
    yield
    BUGGY["charge"] = True


def run_of(handle):
    return ProcedureRun.objects.get(id=handle.id)


def steps_of(handle):
    return list(Step.objects.filter(procedure_id=handle.id, status="done").order_by("index")
                .values_list("index", "name"))


def failed_order(state=None, **options):
    handle = Order.submit(state or {"n": 3}, run_after=T0, **options)
    drain(now=T0)
    assert handle.refresh().status == "failed"
    return handle


def test_a_failed_run_is_re_run_from_the_step_that_was_wrong_with_the_state_before_it():
    original = failed_order(priority=7)
    BUGGY["charge"] = False  # the fix is deployed
    again = original.rerun(from_step="charge")
    new = run_of(again)
    assert (new.status, new.step, new.step_name, new.state) == ("ready", 1, "charge", {"n": 3, "items": 6})
    assert (new.queue, new.priority, new.key, new.parent_id, new.rerun_of_id) == ("orders", 7, None, None, original.id)
    assert again.created and again != original
    drain(now=T0)
    assert again.refresh().status == "done" and again.output == {"n": 3, "items": 6, "charged": 60}
    assert steps_of(again) == [(1, "charge"), (2, "ship")]  # fetch did not run again
    assert list(run_of(original).reruns.values_list("id", flat=True)) == [again.id]
    assert run_of(original).status == "failed"  # the original is left as it was


def test_the_default_is_the_first_step_with_the_state_as_submitted():
    original = failed_order({"n": 5})
    assert run_of(original).state == {"n": 5, "items": 10}  # the last checkpoint moved on
    again = original.rerun()
    assert (run_of(again).step, run_of(again).step_name, run_of(again).state) == (0, "fetch", {"n": 5})


def test_a_done_run_can_be_re_run_and_a_re_run_again_from_before_its_own_start():
    BUGGY["charge"] = False
    original = Order.submit({"n": 1}, run_after=T0)
    drain(now=T0)
    second = original.rerun(from_step="ship")
    assert run_of(second).state == {"n": 1, "items": 2, "charged": 20}
    drain(now=T0)
    # The re-run's history before its start is its original's: its first step, its checkpoints.
    third = second.rerun(from_step="charge")
    assert (run_of(third).state, run_of(third).rerun_of_id) == ({"n": 1, "items": 2}, second.id)
    assert run_of(second.rerun()).state == {"n": 1}


def test_the_key_stays_with_the_original():
    original = failed_order(key="order-42")
    again = original.rerun(from_step="charge")
    assert run_of(again).key is None
    same = Order.submit({"n": 3}, key="order-42")
    assert same.id == original.id and not same.created


@pytest.mark.parametrize(("from_step", "fragment"), [
    ("refund", "'refund' names no step of rerun.Order; its steps are fetch, charge, ship"),
    ("ship", "never reached step 'ship', so no state was committed before it; re-run it from a step it reached "
             "(fetch, charge)"),
])
def test_a_step_the_type_lacks_or_the_run_never_reached_is_refused_and_nothing_is_written(from_step, fragment):
    original = failed_order()
    before = ProcedureRun.objects.count()
    with pytest.raises(ValueError, match=fragment.replace("(", r"\(").replace(")", r"\)")):
        original.rerun(from_step=from_step)
    assert ProcedureRun.objects.count() == before


def test_a_run_that_is_not_final_is_refused():
    pending = Order.submit({"n": 1}, run_after=T0)
    with pytest.raises(ValueError, match=r"is ready: only a final procedure .* can be re-run; cancel it first"):
        pending.rerun()
    assert ProcedureRun.objects.count() == 1


def test_a_from_step_that_is_not_a_name_is_a_type_error():
    original = failed_order()
    with pytest.raises(TypeError, match="from_step must be a step name"):
        original.rerun(from_step=1)


def test_an_old_step_name_is_found_through_renamed_steps():
    with isolated_registry():
        class V1(Procedure):
            type_name = "rerun.Export"

            @step
            def fetch(self, ctx):
                self.state["fetched"] = True

            @step
            def write(self, ctx):
                raise NonRetryable("disk full")

        original = V1.submit({}, run_after=T0)
        drain(now=T0)

    class V2(Procedure):
        type_name = "rerun.Export"
        version = 2
        renamed_steps = {"write": "store"}

        @step
        def fetch(self, ctx):
            self.state["fetched"] = True

        @step
        def store(self, ctx):
            return Status.done(output=self.state)

    for name in ("write", "store"):
        again = original.rerun(from_step=name)
        assert (run_of(again).step_name, run_of(again).state) == ("store", {"fetched": True})


def test_an_older_run_is_re_run_at_its_version_and_upgraded_by_the_worker():
    with isolated_registry():
        class V1(Procedure):
            type_name = "rerun.Pay"

            @step
            def prepare(self, ctx):
                self.state["amount"] = 12.5

            @step
            def pay(self, ctx):
                raise NonRetryable("gateway down")

        original = V1.submit({}, run_after=T0)
        drain(now=T0)

    class V2(Procedure):
        type_name = "rerun.Pay"
        version = 2

        def upgrade_state(self, state, from_version):
            return {"cents": round(state.pop("amount") * 100)}

        @step
        def prepare(self, ctx):
            self.state["cents"] = 1250

        @step
        def pay(self, ctx):
            return Status.done(output=self.state)

    again = original.rerun(from_step="pay")
    assert run_of(again).version == 1
    drain(now=T0)
    assert again.refresh().output == {"cents": 1250} and run_of(again).version == 2


def test_a_run_of_a_newer_version_than_the_code_is_refused():
    original = failed_order()
    ProcedureRun._writer.filter(id=original.id).update(version=3)
    with pytest.raises(ValueError, match=r"written by version 3 of rerun\.Order, newer than version 1 in this code"):
        original.rerun()
    assert ProcedureRun.objects.count() == 1


def test_steps_committed_together_have_no_checkpoint_between_them():
    with isolated_registry():
        class Batch(Procedure):
            type_name = "rerun.Batch"

            @step
            def one(self, ctx):
                self.state["one"] = 1
                return Status.executing(persist=False)

            @step
            def two(self, ctx):
                self.state["two"] = 2

            @step
            def three(self, ctx):
                raise NonRetryable("no")

        original = Batch.submit({}, run_after=T0)
        drain(now=T0)
        with pytest.raises(ValueError, match="committed no checkpoint before step 'two'"):
            original.rerun(from_step="two")
        assert run_of(original.rerun(from_step="three")).state == {"one": 1, "two": 2}


def test_a_parent_re_run_starts_fresh_children():
    with isolated_registry():
        class Leaf(Procedure):
            type_name = "rerun.Leaf"

            @step
            def work(self, ctx):
                return Status.done(output=self.state["i"])

        class Tree(Procedure):
            type_name = "rerun.Tree"

            @step
            def spawn(self, ctx):
                return Status.suspended([Leaf({"i": i}) for i in range(2)])

            @step
            def total(self, ctx):
                return Status.done(output=sum(c.output for c in ctx.children))

        original = Tree.submit({}, run_after=T0)
        drain(now=T0)
        assert original.refresh().output == 1
        again = original.rerun()
        drain(now=T0)
        assert again.refresh().output == 1
        assert ProcedureRun.objects.filter(parent_id=again.id).count() == 2
        assert ProcedureRun.objects.filter(parent_id=original.id).count() == 2


def test_rerun_many_reports_each_id():
    failed = failed_order()
    pending = Order.submit({"n": 1}, run_after=T0)
    missing = "0190e000-0000-7000-8000-000000000000"
    results = rerun_many([failed.id, pending.id, missing], "charge", by="cli:alice")
    assert [r.ok for r in results] == [True, False, False]
    assert isinstance(results[0], RerunResult) and results[0].original == failed.id
    assert run_of(failed).reruns.get().id == results[0].rerun
    assert "is ready" in results[1].refusal and "does not exist" in results[2].refusal
    assert step_names("rerun.Order") == ["fetch", "charge", "ship"] and step_names("rerun.Nope") == []
