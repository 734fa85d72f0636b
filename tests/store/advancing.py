"""Claims and step records for the store's tests of checkpoints and completions."""

from django.db.models import F

from django_procedures import clock
from django_procedures.models import ProcedureRun
from django_procedures.store import fence
from django_procedures.store.claim import claim
from testproject.testapp.procedures import ThreeSteps


def claim_one(type_name: str):
    (c,) = claim("test-worker", type_names=[type_name], limit=1, lease_seconds=30)
    return c


def claimed():
    ThreeSteps.submit()
    return claim_one(ThreeSteps.type_name)


def records(c, *names):
    now = clock.now()
    return [fence.StepRecord(c.step + i, name, 1, now, now) for i, name in enumerate(names)]


def steal(c):
    ProcedureRun._writer.filter(id=c.id).update(lease_token=F("lease_token") + 1)
