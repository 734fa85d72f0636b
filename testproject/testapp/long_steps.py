"""Procedures whose atomic step holds its transaction open a long time: PostgreSQL's idle timeout, SQLite's lock.

Imported by ``testapp/procedures.py`` so workers register them.
"""

import os
import time
from pathlib import Path

from django_procedures import Procedure, RetryPolicy, Status, step
from testproject.testapp.models import Effect


class IdlesInTransaction(Procedure):
    """One atomic step that writes an Effect row, then leaves its transaction idle for ``state['sleep']`` s.

    ``state['then']``: ``"query"`` runs one more query after the pause (the step itself meets the cut
    connection), anything else returns at once (the checkpoint meets it).
    """

    type_name = "testapp.IdlesInTransaction"
    retry = RetryPolicy(max_attempts=2, initial_delay=0.0, backoff=1.0, jitter=0.0)

    @step
    def idle(self, ctx):
        Effect.objects.create(procedure_id=ctx.procedure_id, step="idle", attempt=ctx.attempt,
                              worker_pid=os.getpid())
        time.sleep(self.state["sleep"])
        if self.state.get("then") == "query":
            Effect.objects.filter(procedure_id=ctx.procedure_id).count()
        return Status.done(output={"slept": self.state["sleep"]})


class HoldsTheWriteLock(Procedure):
    """One atomic step that writes an Effect row, touches ``state['marker']``, then works ``state['sleep']`` s.

    On SQLite its transaction holds the database's only write lock all that time.
    """

    type_name = "testapp.HoldsTheWriteLock"
    retry = RetryPolicy(max_attempts=1)

    @step
    def hold(self, ctx):
        Effect.objects.create(procedure_id=ctx.procedure_id, step="hold", attempt=ctx.attempt,
                              worker_pid=os.getpid())
        Path(self.state["marker"]).write_text(str(os.getpid()))
        time.sleep(self.state["sleep"])
        ctx.ensure_active()
        return Status.done(output={"held": self.state["sleep"]})
