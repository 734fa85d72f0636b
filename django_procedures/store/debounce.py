"""Debounced submits: one pending procedure per key, holding the latest state, due a delay after the last submit.

While the procedure with the key has never been claimed (``ready``, lease token 0), a submit replaces its state
and moves its ``run_at``; otherwise (none, or claimed, running, waiting or final) it inserts a new one, and the
key moves to it from the old one (the key's unique constraint covers every row). Race-safe on PostgreSQL: the
key's row is locked first, so a claim either took it before (then it is "claimed" here, and a new one is made)
or skips it while it is locked (``SKIP LOCKED``) and later claims the new state; two submits racing for a key
that has no pending procedure insert with ``ON CONFLICT DO NOTHING``, and the loser goes round again and
updates the winner's row.
"""

from __future__ import annotations

import logging
from datetime import datetime

from django.db import transaction

from django_procedures.models import ProcedureRun
from django_procedures.policy.procedure_class import NewRun
from django_procedures.policy.status import RunStatus
from django_procedures.store.notify import notify
from django_procedures.store.schema import tables_required
from django_procedures.store.submit import Submitted, _refuse_other_types, insert, row_of

logger = logging.getLogger("django_procedures.submit")

#: Rounds before giving up; each round lost means another submit of the key committed meanwhile.
ROUNDS = 50


def submit_debounced(run: NewRun, *, now: datetime) -> Submitted:
    """Submit ``run`` (its ``key`` set, its ``run_at`` now + the debounce) as a debounced submit; see the module.

    ``created`` is False when an unclaimed procedure with the key took the new state. ``KeyConflict`` (a
    ``ValueError``) when the key names a procedure of another type; nothing is written then.
    """
    assert run.key is not None  # checked where the options were made (django_procedures.submitting)
    with tables_required():
        for _ in range(ROUNDS):
            with transaction.atomic():  # a savepoint inside the caller's transaction
                found = (ProcedureRun._writer.select_for_update().filter(key=run.key)
                         .values("id", "type_name", "status", "lease_token", "waiting_for_keys", "queue").first())
                if found is not None:
                    row = row_of(run, now=now, parent=None)
                    _refuse_other_types([row], {run.key: (found["id"], found["type_name"])})
                    if found["status"] == RunStatus.READY and found["lease_token"] == 0:
                        changes = {"state": run.state, "submitted_state": run.state, "run_at": run.run_at}
                        if not found["waiting_for_keys"]:  # queued for its keys: it keeps the keys it asked for
                            changes["lock_keys"] = run.lock_keys
                        ProcedureRun._writer.filter(id=found["id"]).update(**changes)
                        if run.run_at <= now:
                            notify({found["queue"]})
                        return Submitted(found["id"], False)
                    # Claimed already: the key moves to the new procedure.
                    ProcedureRun._writer.filter(id=found["id"]).update(key=None)
                row = row_of(run, now=now, parent=None)
                if insert([row], skip_conflicts=True):
                    return Submitted(row.id, True)
            # Another submit of the key inserted first (and committed): its row is the pending one now.
        raise RuntimeError(f"a debounced submit of key {run.key!r} lost {ROUNDS} races in a row to other submits "
                           "of that key; try again")
