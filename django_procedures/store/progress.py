"""Writing a procedure's progress: fenced by its lease, on whichever connection the caller gives."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any, cast

from django.db import connection as default_connection
from django.db.models.sql import UpdateQuery

from django_procedures.store.fence import held_row

if TYPE_CHECKING:
    from django_procedures.store.claim import Claim


def record(claim: Claim, report: dict[str, Any], at: datetime, *, using: Any = None) -> bool:
    """Store ``report`` as the procedure's progress if ``claim`` still holds it; False if the lease moved.

    ``using`` is a database connection (``DatabaseWrapper``) other than this
    thread's, so the write commits on its own, outside a step's open
    transaction; by default, this thread's connection. The statement is the
    fence every claimed-row write uses (:func:`~.fence.held_row`).
    """
    conn = using or default_connection
    query = cast(UpdateQuery, held_row(claim).query.chain(UpdateQuery))  # the stubs say Query
    query.add_update_values({"progress": report, "progress_updated_at": at})
    sql, params = query.get_compiler(connection=conn).as_sql()
    with conn.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.rowcount == 1
