"""The sweep's read of lock key waiters is served by an index, not a scan of every procedure ever run."""

from __future__ import annotations

import pytest
from django.db import connection, transaction

from django_procedures.models import ProcedureRun

pytestmark = [pytest.mark.postgres, pytest.mark.django_db]


def test_the_waiters_read_can_use_the_partial_index():
    query = ProcedureRun._writer.filter(waiting_for_keys=True).values("id", "parent_id", "lock_keys")
    sql, params = query.query.sql_with_params()
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")  # a table this small would be scanned anyway
        cursor.execute("EXPLAIN " + sql, params)
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "procedures_key_waiters_idx" in plan, plan
