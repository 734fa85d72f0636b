"""Only ``django_procedures.store`` writes the procedures models: every other write is refused, saying why.

The static half of the rule (no private writer, ORM write or writing SQL outside
``store/``) is in ``tests/test_layers.py``.
"""

from datetime import timedelta

import pytest

from django_procedures import register_schedule
from django_procedures.models import KeyRequest, Lease, ProcedureRun, Schedule, Step
from django_procedures.models.readonly import WriteOutsideStore
from testproject.testapp.procedures import Heartbeat, ThreeSteps

pytestmark = pytest.mark.django_db

MODELS = [ProcedureRun, Step, Lease, Schedule, KeyRequest]
QUERYSET_WRITES = {
    "update": lambda qs: qs.update(id=None),
    "delete": lambda qs: qs.delete(),
    "create": lambda qs: qs.create(),
    "get_or_create": lambda qs: qs.get_or_create(pk=1),
    "update_or_create": lambda qs: qs.update_or_create(pk=1),
    "bulk_create": lambda qs: qs.bulk_create([]),
    "bulk_update": lambda qs: qs.bulk_update([], ["id"]),
}


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.__name__)
@pytest.mark.parametrize("write", QUERYSET_WRITES, ids=str)
def test_the_default_manager_reads_but_refuses_every_write(model, write):
    with pytest.raises(WriteOutsideStore, match=r"written only by django_procedures\.store.*handle\.cancel\(\)"):
        QUERYSET_WRITES[write](model.objects.all())
    with pytest.raises(WriteOutsideStore, match=f"{model.__name__}: .{write}"):
        QUERYSET_WRITES[write](model.objects.filter(pk__isnull=False))


def test_a_loaded_row_refuses_save_and_delete_and_nothing_changes():
    handle = ThreeSteps.submit(state={"n": 1})
    run = ProcedureRun.objects.get(id=handle.id)
    run.status = "done"
    with pytest.raises(WriteOutsideStore, match=r"ProcedureRun: save\(\) is refused"):
        run.save()
    with pytest.raises(WriteOutsideStore, match=r"ProcedureRun: delete\(\) is refused"):
        run.delete()
    assert ProcedureRun.objects.get(id=handle.id).status == "ready"


def test_a_schedule_made_with_the_orm_is_refused_and_register_schedule_is_the_way():
    with pytest.raises(WriteOutsideStore, match="register_schedule"):
        Schedule.objects.create(name="by-hand", procedure=Heartbeat.type_name, period=timedelta(minutes=1))
    schedule, created = register_schedule("by-api", Heartbeat, period=timedelta(minutes=1))
    assert created and schedule.next_tick_at is not None
    assert not Schedule.objects.filter(name="by-hand").exists()


def test_reads_and_related_lookups_still_work():
    handle = ThreeSteps.submit(state={})
    assert ProcedureRun.objects.filter(id=handle.id).count() == 1
    assert list(ProcedureRun.objects.get(id=handle.id).steps.all()) == []
    assert ProcedureRun.objects.unfinished().filter(id=handle.id).exists()
