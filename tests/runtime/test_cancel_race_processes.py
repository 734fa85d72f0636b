"""Random cancels against trees that suspend, with real worker processes: no member of a cancelled tree runs
after its cancel.

Two workers run trees three levels deep (every inner node suspends with
children) while the test cancels members at random, preferring those running
their suspending step. A cancel that met a suspension committing at that
moment used to miss the new children, which then ran and ended ``done`` under
a ``cancelled`` parent (issue 25; the interleaving itself is forced in
``tests/store/test_cancel_races.py``). At the end, once every procedure is
final, each cancelled procedure's descendants are final and none of them
committed a step, or ended ``done``, after the cancel: ``finished_at`` and a
``Step``'s ``finished_at`` are read from the one clock of this machine, and a
write fenced out by the cancel commits nothing. The run is bounded in time;
how many cancels hit a suspension depends on the machine's load, so nothing is
asserted about speed.
"""

from __future__ import annotations

import random
import time
from collections import defaultdict

import pytest

from django_procedures import get_handle
from django_procedures.models import ProcedureRun, Step
from django_procedures.policy.status import FINAL
from testproject.testapp.procedures import Parent
from tests.runtime.processes import wait_for
from tests.runtime.test_tree_processes import WAIT, no_tracebacks, start

pytestmark = [pytest.mark.subprocess, pytest.mark.django_db(transaction=True)]

#: How long the cancels go on, and how many trees are unfinished at once meanwhile.
DURATION, LIVE_TREES = 20.0, 6


def cancel_at_random(rng: random.Random, deadline: float) -> int:
    """Keep ``LIVE_TREES`` trees going and cancel members until ``deadline``; how many cancels changed something."""
    changed = 0
    while time.monotonic() < deadline:
        live = ProcedureRun.objects.filter(parent__isnull=True).exclude(status__in=FINAL).count()
        for _ in range(LIVE_TREES - live):
            Parent.submit({"depth": 3, "fanout": 2})
        inner = list(ProcedureRun.objects.filter(type_name=Parent.type_name).exclude(status__in=FINAL)
                     .values_list("id", "status"))
        running = [pid for pid, status in inner if status == "running"]  # likely inside their suspension
        pool = running if running and rng.random() < 0.8 else [pid for pid, _ in inner]
        if pool:
            changed += get_handle(rng.choice(pool)).cancel(by="race").changed
        time.sleep(rng.uniform(0.0, 0.1))
    return changed


def ran_after_a_cancel() -> list[str]:
    """Members of a cancelled subtree that are unfinished, or ended done or committed a step after the cancel."""
    rows = {r["id"]: r for r in ProcedureRun.objects.values("id", "parent_id", "status", "finished_at")}
    kids = defaultdict(list)
    for r in rows.values():
        kids[r["parent_id"]].append(r["id"])
    last_step = {pid: at for pid, at in Step.objects.filter(status="done").order_by("finished_at")
                 .values_list("procedure_id", "finished_at")}
    found = []
    for cancelled in (r for r in rows.values() if r["status"] == "cancelled"):
        stack = list(kids[cancelled["id"]])
        while stack:
            member = rows[stack.pop()]
            stack.extend(kids[member["id"]])
            late_step = last_step.get(member["id"])
            if (member["status"] not in FINAL
                    or (member["status"] == "done" and member["finished_at"] > cancelled["finished_at"])
                    or (late_step is not None and late_step > cancelled["finished_at"])):
                found.append(f"{member['id']} ({member['status']}, finished {member['finished_at']}, last step "
                             f"{late_step}) under {cancelled['id']} cancelled at {cancelled['finished_at']}")
    return found


def test_no_member_of_a_cancelled_tree_runs_after_its_cancel(workers):
    pool = start(workers)
    changed = cancel_at_random(random.Random(25), time.monotonic() + DURATION)
    wait_for(lambda: not ProcedureRun.objects.exclude(status__in=FINAL).exists(), timeout=WAIT, workers=workers,
             what="every tree to finish")

    assert changed > 0
    assert ProcedureRun.objects.filter(status="cancelled").exists()
    assert ran_after_a_cancel() == []
    no_tracebacks(pool)
