"""``procedures show ID``: one procedure with its tree, step attempts, leases, error and traceback."""

from __future__ import annotations

import argparse
from typing import Any

from django.db.models import Q

from django_procedures import clock
from django_procedures.cli.common import ago, procedure_id, when
from django_procedures.cli.output import Output, Refused
from django_procedures.models import Event, Lease, ProcedureRun, Step
from django_procedures.policy.status import FINAL

HELP = "Show one procedure: its tree, steps with attempts and durations, leases, events, error and traceback."
#: Most tree members, step attempts, leases and events read (a procedure can have many of each).
TREE_LIMIT, STEP_LIMIT, LEASE_LIMIT, EVENT_LIMIT = 200, 100, 20, 50
TREE_FIELDS = ("id", "type_name", "status", "parent_id", "depth", "spawned_in", "position", "step_name",
               "created_at")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("id", metavar="ID", help="the procedure's id")
    parser.add_argument("--json", action="store_true", help="print one JSON document")


def _seconds(start: Any, end: Any) -> float | None:
    return None if start is None or end is None else round((end - start).total_seconds(), 3)


def details(pid: Any) -> dict[str, Any]:
    """Everything ``show`` prints, as one document (a fixed number of queries, each on an index)."""
    run = ProcedureRun.objects.filter(id=pid).first()  # primary key
    if run is None:
        raise Refused(f"procedure {pid} does not exist")
    root = run.root_id or run.id
    # The primary key and procedures_root_idx; shallowest first, cut at TREE_LIMIT.
    members = list(ProcedureRun.objects.filter(Q(id=root) | Q(root_id=root)).only(*TREE_FIELDS)
                   .order_by("depth", "spawned_in", "position", "created_at", "id")[: TREE_LIMIT + 1])
    # procedures_step_order_idx, the latest attempts.
    steps = list(Step.objects.filter(procedure_id=run.id).order_by("-index", "-attempt")
                 .values("index", "name", "attempt", "status", "started_at", "finished_at", "error")[:STEP_LIMIT])
    steps.reverse()
    # procedures_lease_token (procedure, token), the latest claims.
    leases = list(Lease.objects.filter(procedure_id=run.id).order_by("-token")
                  .values("token", "worker", "claimed_at", "expires_at", "released_at", "outcome")[:LEASE_LIMIT])
    # procedures_event_idx (procedure, id), the latest events.
    events = list(Event.objects.filter(procedure_id=run.id).order_by("-id")
                  .values("id", "name", "key", "sent_at", "sent_by", "consumed_at", "consumed_step",
                          "payload")[:EVENT_LIMIT])
    events.reverse()
    return {
        "procedure": {
            "id": str(run.id), "type": run.type_name, "status": run.status, "queue": run.queue,
            "priority": run.priority, "key": run.key, "version": run.version, "step": run.step,
            "step_name": run.step_name, "attempt": run.attempt, "failures": run.failures, "lost": run.lost,
            "waiting_for": run.waiting_for or None, "waiting_events": run.waiting_events, "wake_at": run.wake_at,
            "run_at": run.run_at, "rerun_of": str(run.rerun_of_id) if run.rerun_of_id else None,
            "parent": str(run.parent_id) if run.parent_id else None, "root": str(root), "depth": run.depth,
            "pending_children": run.pending_children, "lease_owner": run.lease_owner or None,
            "lease_token": run.lease_token, "lease_expires_at": run.lease_expires_at,
            "created_at": run.created_at, "started_at": run.started_at, "finished_at": run.finished_at,
            "retried_at": run.retried_at, "retried_by": run.retried_by or None,
            "manual_retries": run.manual_retries, "failure_can_retry": run.failure_can_retry,
            "failed_step": run.failed_step or None, "error": run.error, "traceback": run.traceback,
            "rollback_error": run.rollback_error, "progress": run.progress, "state": run.state,
            "output": run.output,
        },
        "tree": [{"id": str(m.id), "type": m.type_name, "status": m.status,
                  "parent": str(m.parent_id) if m.parent_id else None, "depth": m.depth,
                  "step_name": m.step_name} for m in members[:TREE_LIMIT]],
        "tree_truncated": len(members) > TREE_LIMIT,
        "steps": [{**s, "seconds": _seconds(s["started_at"], s["finished_at"])} for s in steps],
        "leases": [{**lease, "seconds": _seconds(lease["claimed_at"], lease["released_at"] or lease["expires_at"])}
                   for lease in leases],
        "events": events,
    }


def run(options: dict[str, Any], out: Output) -> None:
    doc = details(procedure_id(options["id"]))
    if out.as_json:
        out.document(doc)
        return
    p = doc["procedure"]
    now = clock.now()
    out.line(f"{p['type']} {p['id']}")
    waits = " or ".join(p["waiting_events"] or []) if p["waiting_for"] == "event" else p["waiting_for"]
    fields = [("status", p["status"] + (f" (waiting for {waits})" if p["waiting_for"] else "")),
              ("queue", f"{p['queue']} (priority {p['priority']})"), ("key", p["key"] or "-"),
              ("step", f"{p['step_name'] or '-'} (committed {p['step']}, attempt {p['attempt']}, "
                       f"failures {p['failures']}, lost {p['lost']})"),
              ("created", f"{when(p['created_at'])} ({ago((now - p['created_at']).total_seconds())} ago)"),
              ("started", when(p["started_at"])), ("finished", when(p["finished_at"])),
              ("run at", when(p["run_at"])), ("wake at", when(p["wake_at"])),
              ("lease", f"{p['lease_owner']} token {p['lease_token']} until {when(p['lease_expires_at'])}"
               if p["lease_owner"] else "-"),
              ("retried", f"{when(p['retried_at'])} by {p['retried_by']}" if p["retried_at"] else "-"),
              ("re-run of", p["rerun_of"] or "-")]
    for label, value in fields:
        out.line(f"  {label:<9} {value}")
    out.line()
    out.line("tree" + (" (first 200 members)" if doc["tree_truncated"] else ""))
    for m in doc["tree"]:
        mark = "*" if m["id"] == p["id"] else " "
        out.line(f" {mark}{'  ' * m['depth']}{m['type']} {m['id']} {m['status']}"[:100])
    out.line()
    if doc["steps"]:
        out.table(["#", "step", "try", "status", "started", "seconds", "error"],
                  [[str(s["index"]), s["name"], str(s["attempt"]), s["status"], when(s["started_at"]),
                    "-" if s["seconds"] is None else f"{s['seconds']:.3f}", s["error"] or "-"]
                   for s in doc["steps"]])
    else:
        out.line("no step attempts ended yet")
    out.line()
    if doc["leases"]:
        out.table(["token", "worker", "claimed", "released", "outcome"],
                  [[str(x["token"]), x["worker"], when(x["claimed_at"]), when(x["released_at"]), x["outcome"] or "-"]
                   for x in doc["leases"]])
    else:
        out.line("no leases")
    if doc["events"]:
        out.line()
        unconsumed = "never" if p["status"] in FINAL else "not yet"  # as the admin's page says it
        out.table(["event", "name", "sent", "by", "consumed"],
                  [[str(e["id"]), e["name"], when(e["sent_at"]), e["sent_by"] or "-",
                    f"{when(e['consumed_at'])} (step {e['consumed_step']})" if e["consumed_at"] else unconsumed]
                   for e in doc["events"]])
    for label, text in (("error", p["error"]), ("rollback error", p["rollback_error"]),
                        ("traceback", p["traceback"])):
        if text:
            out.line()
            out.line(f"{label}:")
            out.line(text.rstrip())
