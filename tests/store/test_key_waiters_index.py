"""The sweep's read of lock key waiters is served by an index, not a scan of every procedure ever run."""

from __future__ import annotations

import pytest

from django_procedures.models import ProcedureRun
from tests.plans import plan_of

pytestmark = [pytest.mark.postgres, pytest.mark.django_db]


def test_the_waiters_read_can_use_the_partial_index():
    query = ProcedureRun._writer.filter(waiting_for_keys=True).values("id", "parent_id", "lock_keys")
    plan = plan_of(query, "seqscan")
    assert "procedures_key_waiters_idx" in plan, plan
