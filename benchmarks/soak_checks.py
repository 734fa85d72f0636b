"""The soak's checks: waiting until every procedure is final, then the invariants it verifies
(docs/guarantees.md) from the database and the worker logs, printed as a table.
"""

from __future__ import annotations

import contextlib
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.soak_cluster import ChaosReport, SoakWorker, log, supervise

# --------------------------------------------------------------------------- waiting and invariants


def with_reconnect(fn: Callable[[], Any], attempts: int = 30) -> Any:
    """Run a read on this process's own connection, reconnecting while the database restarts."""
    from django.db import DatabaseError, connection

    for attempt in range(attempts):
        try:
            return fn()
        except DatabaseError:
            connection.close()
            if attempt == attempts - 1:
                raise
            time.sleep(0.5)
    return None


def unfinished() -> int:
    from django_procedures.models import ProcedureRun

    return with_reconnect(lambda: ProcedureRun.objects.unfinished().count())


def wait_quiescent(timeout: float, pool: list[SoakWorker], report: ChaosReport) -> tuple[bool, float]:
    started = time.monotonic()
    last = None
    while True:
        supervise(pool, report, time.monotonic())
        left = unfinished()
        if left == 0:
            return True, time.monotonic() - started
        if left != last:
            log(f"{left} procedures not final yet")
            last = left
        if time.monotonic() - started > timeout:
            return False, time.monotonic() - started
        time.sleep(1.0)


@dataclass
class Check:
    name: str
    value: str
    ok: bool
    detail: str = ""


#: Expected final status of a top-level procedure, from its type and state.
def expected_statuses(type_name: str, state: dict[str, Any]) -> set[str]:
    if type_name == "soak.Flaky":
        return {"failed"} if state.get("fail_times", 0) >= 4 else {"done"}
    if type_name == "soak.Tree":
        return {"rolled_back"} if state.get("failing") else {"done"}
    if type_name == "soak.Compensated":
        return {"rolled_back"}
    if type_name == "soak.Charge":
        return {"done", "failed"}  # failed only when parked: lost inside the non-idempotent step
    return {"done"}


ATOMIC_STEPS = {
    "soak.Steps": {"a", "b", "c"}, "soak.Flaky": {"prepare", "work"}, "soak.Leaf": {"work"},
    "soak.Tree": {"spawn", "collect", "rollback"}, "soak.Keyed": {"take", "put"},
    "soak.Compensated": {"book", "rollback"}, "soak.Charge": {"receipt"},
}
NON_ATOMIC_STEPS = {"soak.Steps": {"d"}}
NON_IDEMPOTENT_STEPS = {"soak.Charge": {"charge"}}


#: WARNING lines a worker writes when it loses its database connection (one per outage is the promise).
LOSS_MESSAGES = ("database connection lost", "database error", "lease renewal failed", "could not record")


def check_invariants(pool: list[SoakWorker], report: ChaosReport,
                     quiescent: bool) -> tuple[list[Check], dict[str, Any]]:
    from django.db.models import Count

    from django_procedures import registry
    from django_procedures.models import KeyRequest, Lease, ProcedureRun, Step
    from django_procedures.policy.status import FINAL, LEASED
    from testproject.testapp.models import Effect

    runs = {r["id"]: r for r in ProcedureRun.objects.values(
        "id", "type_name", "status", "state", "parent_id", "root_id", "lock_keys", "keys_held", "waiting_for_keys",
        "lease_owner", "lease_expires_at", "error", "pending_children")}
    steps = list(Step.objects.values_list("procedure_id", "index", "name", "status", "started_at", "finished_at"))
    effects = Counter({(p, s): n for p, s, n in Effect.objects.values_list("procedure_id", "step")
                       .annotate(n=Count("id")).values_list("procedure_id", "step", "n")})
    checks: list[Check] = []
    facts: dict[str, Any] = {}

    def add(name: str, bad: list[Any], value: str | None = None) -> None:
        detail = "; ".join(str(b) for b in bad[:3])
        checks.append(Check(name, value if value is not None else str(len(bad)), not bad, detail))

    roots = [r for r in runs.values() if r["parent_id"] is None]
    facts["roots"], facts["total"] = len(roots), len(runs)
    facts["statuses"] = dict(Counter(r["status"] for r in runs.values()))

    # 1. every procedure reached a final status (and the one its design expects)
    add("every procedure reached a final status", [f"{r['id']} {r['status']}" for r in runs.values()
                                                    if r["status"] not in FINAL])
    add("each top-level procedure ended as designed",
        [f"{r['type_name']} {r['id']} {r['status']}: {r['error'][:120]}" for r in roots
         if r["status"] not in expected_statuses(r["type_name"], r["state"])
         or (r["type_name"] == "soak.Charge" and r["status"] == "failed"
             and r["error"] != "interrupted during non-idempotent step charge")])

    # 2. no step has two committed checkpoints
    committed = Counter((p, i) for p, i, _, status, _, _ in steps if status == "done")
    add("no step has two committed checkpoints", [k for k, n in committed.items() if n > 1])

    # 3. database effects: exactly once per committed atomic step, >= 1 non-atomic, <= 1 non-idempotent
    done_by_name = Counter((p, name) for p, _, name, status, _, _ in steps if status == "done")
    wrong, duplicates, doubled = [], 0, []
    for pid, r in runs.items():
        t = r["type_name"]
        for name in ATOMIC_STEPS.get(t, ()):
            if effects[(pid, name)] != done_by_name[(pid, name)]:
                wrong.append(f"{t} {pid} step {name}: {effects[(pid, name)]} rows, "
                             f"{done_by_name[(pid, name)]} commits")
        for name in NON_ATOMIC_STEPS.get(t, ()):
            if done_by_name[(pid, name)] and effects[(pid, name)] < 1:
                wrong.append(f"{t} {pid} non-atomic step {name} committed without its effect")
            duplicates += max(0, effects[(pid, name)] - 1)
        for name in NON_IDEMPOTENT_STEPS.get(t, ()):
            if effects[(pid, name)] > 1 or (done_by_name[(pid, name)] and effects[(pid, name)] != 1):
                doubled.append(f"{t} {pid} non-idempotent step {name}: {effects[(pid, name)]} effects")
    add("atomic steps' rows exist exactly once per committed step", wrong,
        f"{len(wrong)} (of {sum(effects.values())} rows)")
    add("non-idempotent steps took effect at most once", doubled)
    facts["non_atomic_reruns"] = duplicates

    # 4. no lease is left open
    open_leases = list(Lease.objects.filter(released_at__isnull=True).values_list("procedure_id", "token")[:10])
    held = [f"{r['id']} {r['status']} {r['lease_owner']}" for r in runs.values()
            if r["status"] in LEASED or r["lease_owner"] or r["lease_expires_at"] is not None]
    add("no lease is left open", open_leases + held, str(len(open_leases) + len(held)))

    # 5. no lock key is held by a finished procedure; exclusive keys never overlapped
    stale_keys = list(KeyRequest.objects.filter(procedure__status__in=FINAL).values_list("name", "procedure_id")[:10])
    stale_keys += [f"{r['id']} keys_held/waiting flag" for r in runs.values()
                   if r["status"] in FINAL and (r["keys_held"] or r["waiting_for_keys"])]
    add("no lock key is held by a finished procedure", stale_keys)
    add("exclusive keys never held by two procedures at once", _key_overlaps(runs, steps))

    # 6. every parent's children are final (and a done parent's children are all done)
    children: dict[Any, list[dict[str, Any]]] = defaultdict(list)
    for r in runs.values():
        if r["parent_id"] is not None:
            children[r["parent_id"]].append(r)
    orphans = []
    for pid, kids in children.items():
        parent = runs[pid]
        for kid in kids:
            if kid["status"] not in FINAL or (parent["status"] == "done" and kid["status"] != "done"):
                orphans.append(f"parent {pid} {parent['status']}: child {kid['id']} {kid['status']}")
        if parent["status"] in FINAL and parent["pending_children"]:
            orphans.append(f"parent {pid} final with pending_children={parent['pending_children']}")
    add("every parent's children are final", orphans, f"{len(orphans)} (of {len(children)} parents)")

    # 7. retry counts within budget
    failed_per_step = Counter((p, i) for p, i, name, status, _, _ in steps if status == "failed" and name != "rollback")
    lost_per_step = Counter((p, i) for p, i, _, status, _, _ in steps if status == "lost")
    over = []
    for (pid, index), n in failed_per_step.items():
        policy = registry.get(runs[pid]["type_name"]).retry
        if n > policy.max_attempts:
            over.append(f"{pid} step {index}: {n} failed attempts > max_attempts {policy.max_attempts}")
    for (pid, index), n in lost_per_step.items():
        policy = registry.get(runs[pid]["type_name"]).retry
        if n >= policy.max_lost:
            over.append(f"{pid} step {index}: lost {n} times (max_lost {policy.max_lost})")
    over += [f"{r['id']} failed as poisonous" for r in runs.values() if "poisonous" in r["error"]]
    blamed = [f"{p} step {i} {name}: {error[:100]}" for p, i, name, status, error in
              Step.objects.filter(status="failed").values_list("procedure_id", "index", "name", "status", "error")
              if "OperationalError" in error or "InterfaceError" in error]
    add("no attempt failed because the database went away", blamed)
    max_lost = max(lost_per_step.values(), default=0)
    add("retry counts within budget", over,
        f"{len(over)} (most failures of a step {max(failed_per_step.values(), default=0)}, "
        f"most lost {max_lost})")
    facts["lost_attempts"] = sum(lost_per_step.values())
    facts["failed_attempts"] = sum(failed_per_step.values())
    facts["lease_outcomes"] = dict(Lease.objects.values_list("outcome").annotate(n=Count("id")))

    # 8. the workers themselves: they carried on, said so once per outage, and never logged a traceback
    tracebacks, noisy = [], []
    for w in pool:
        for path, (born, died, frozen) in zip(w.logs, w.lives, strict=True):
            text = path.read_text(errors="replace") if path.exists() else ""
            if "Traceback" in text:
                tracebacks.append(f"{path.name}: {text.count('Traceback')} tracebacks")
            outages = frozen + sum(1 for t in report.database_faults
                                   if born <= t + report.fault_aftermath and (died is None or t <= died))
            warned = sum(1 for line in text.splitlines() if (" WARNING " in line or " ERROR " in line) and any(
                needle in line for needle in LOSS_MESSAGES))
            if warned > outages:
                noisy.append(f"{path.name}: {warned} warnings for {outages} outages")
    add("worker logs have no tracebacks", tracebacks)
    add("connection loss logged once per worker per outage", noisy)
    add("workers never exited on their own", report.unexpected_exits)
    add("workers stopped cleanly on SIGTERM", report.slow_shutdowns + [
        f"{name} exit {rc}" for name, rc in report.final_exit_codes.items() if rc != 0])
    add("quiescent within the bound", [] if quiescent else ["procedures still unfinished at the deadline"],
        "yes" if quiescent else "no")
    return checks, facts


def _key_overlaps(runs: dict[Any, dict[str, Any]], steps: list[tuple[Any, ...]]) -> list[str]:
    """Committed step intervals of procedures sharing a key, overlapping while one of them holds it exclusive.

    A parent lends its keys to its descendants, so ancestor/descendant pairs are not compared.
    """
    spans: dict[Any, tuple[Any, Any]] = {}
    for pid, _, _, status, started, finished in steps:
        if status == "done" and started is not None:
            lo, hi = spans.get(pid, (started, finished))
            spans[pid] = (min(lo, started), max(hi, finished))
    by_key: dict[str, list[tuple[Any, Any, Any, str]]] = defaultdict(list)
    for pid, r in runs.items():
        if pid in spans:
            for name, mode in r["lock_keys"]:
                by_key[name].append((*spans[pid], pid, mode))

    def lineage(pid: Any) -> set[Any]:
        found = set()
        while pid is not None:
            found.add(pid)
            pid = runs[pid]["parent_id"]
        return found

    bad = []
    for name, items in by_key.items():
        items.sort(key=lambda x: x[0])
        for i, (_, end, pid, mode) in enumerate(items):
            for other_start, _, other, other_mode in items[i + 1:]:
                if other_start >= end:
                    break
                if "exclusive" in (mode, other_mode) and pid not in lineage(other) and other not in lineage(pid):
                    bad.append(f"{name}: {pid} and {other}")
    return bad


def worker_log_facts(pool: list[SoakWorker]) -> dict[str, int]:
    counts: Counter[str] = Counter()
    patterns = {
        "connection lost": "database connection lost",
        "connection restored": "database connection restored",
        "renewal timed out": "lease renewal timed out",
        "fenced out": "dropping this worker's result",
        "parked": "parked as failed",
        "swept": "its lease expired during step",
        "tracebacks": "Traceback",
    }
    for w in pool:
        for path in w.logs:
            with contextlib.suppress(OSError):
                text = path.read_text(errors="replace")
                for label, needle in patterns.items():
                    counts[label] += text.count(needle)
    return dict(counts)


def diagnose(path: Path, limit: int = 20) -> None:
    """Write what the unfinished procedures look like, with their keys and the open sessions, to ``path``."""
    from django.db import connection

    from django_procedures.models import KeyRequest, ProcedureRun

    lines = []
    fields = ("id", "type_name", "status", "step", "step_name", "parent_id", "root_id", "lock_keys", "keys_held",
              "waiting_for_keys", "pending_children", "run_at", "lease_token", "lease_owner", "attempt", "lost",
              "failures", "error")
    for row in ProcedureRun.objects.unfinished().values(*fields)[:limit]:
        lines.append(" ".join(f"{k}={row[k]!r}" for k in fields))
        for kr in KeyRequest.objects.filter(name__in=[n for n, _ in row["lock_keys"]]).values(
                "name", "procedure_id", "root_id", "mode", "granted", "requested_at"):
            lines.append(f"    key request {kr}")
    with connection.cursor() as cursor:
        cursor.execute("SELECT pid, application_name, state, wait_event_type, wait_event, xact_start, "
                       "left(query, 200) FROM pg_stat_activity WHERE datname = current_database() "
                       "AND pid <> pg_backend_pid()")
        lines += [f"session {row}" for row in cursor.fetchall()]
        cursor.execute("SELECT locktype, relation::regclass, objid, mode, granted, pid FROM pg_locks "
                       "WHERE pid <> pg_backend_pid()")
        lines += [f"lock {row}" for row in cursor.fetchall()]
    path.write_text("\n".join(lines) + "\n")


def print_table(checks: list[Check]) -> None:
    width = max(len(c.name) for c in checks)
    vwidth = max(len(c.value) for c in checks)
    line = f"+-{'-' * width}-+-{'-' * vwidth}-+--------+"
    print(line)
    print(f"| {'invariant'.ljust(width)} | {'breaches'.ljust(vwidth)} | result |")
    print(line)
    for c in checks:
        print(f"| {c.name.ljust(width)} | {c.value.ljust(vwidth)} | {('ok' if c.ok else 'BREACH').ljust(6)} |")
    print(line)
    for c in checks:
        if not c.ok and c.detail:
            print(f"  {c.name}: {c.detail}")


