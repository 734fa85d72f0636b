"""``manage.py procedures_demo`` prints ids as the admin does, so the procedures it lists can be told apart."""

from datetime import UTC, datetime, timedelta
from io import StringIO

import pytest

from django_procedures import clock, register_schedule, tick
from django_procedures.models import ProcedureRun
from django_procedures.policy.ids import short_id
from django_procedures.testing import drain
from testproject.demo.management.commands.procedures_demo import Command, Expected
from testproject.demo.procedures import ProvisionTenant, RefreshRates

pytestmark = pytest.mark.django_db


def test_the_demo_prints_each_id_by_its_random_end_as_the_admin_does():
    handles = [ProvisionTenant.submit({"tenant": f"t{n}"}) for n in range(2)]
    schedule, _ = register_schedule("demo-ids", RefreshRates, period=timedelta(seconds=1))
    with clock.frozen_at(datetime(2030, 1, 1, tzinfo=UTC)):
        tick()
    drain()
    runs = [ProcedureRun.objects.get(id=h.id) for h in handles] + list(ProcedureRun.objects.filter(schedule=schedule))
    assert len(runs) == 3 and len({str(run.id)[:8] for run in runs}) == 1  # time-ordered: alike first digits

    command = Command(stdout=StringIO())
    command.width = 200
    for run in runs[:2]:
        command._show(run, Expected("done", 1))
    command._show_schedule(schedule)
    printed = command.stdout.getvalue()
    for run in runs:
        assert short_id(run.id) in printed
    assert str(runs[0].id)[:8] not in printed
