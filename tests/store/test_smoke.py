from django_procedures.models import ProcedureRun, Step
from django_procedures.testing import drain
from testproject.testapp.models import Effect
from testproject.testapp.procedures import ThreeSteps


def test_three_steps_run_to_done(db):
    handle = ThreeSteps.submit({"x": 1})
    report = drain()
    assert report.claimed == 1
    assert handle.refresh().status == "done"
    assert handle.output == {"done": ["one", "two", "three"]}
    assert list(Step.objects.filter(procedure_id=handle.id).values_list("index", "name", "status")) == [
        (0, "one", "done"), (1, "two", "done"), (2, "three", "done")]
    assert Effect.objects.filter(procedure_id=handle.id).count() == 3
    assert ProcedureRun.objects.get(id=handle.id).step == 3
