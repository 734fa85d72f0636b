"""``procedures workers``: worker processes, alive, gone (silent) or stopped, and what each runs now."""

from __future__ import annotations

import argparse
from typing import Any

from django.utils import timezone

from django_procedures.cli.common import ago
from django_procedures.cli.output import Output, Refused
from django_procedures.models import Worker
from django_procedures.policy.workers import WorkerState
from django_procedures.store.overview import running_by_worker

HELP = "List worker processes: alive, gone (stopped renewing without a word) or stopped, and what they run."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--state", choices=[s.value for s in WorkerState])
    parser.add_argument("--limit", type=int, default=50, help="most rows shown, last seen first (default 50)")
    parser.add_argument("--json", action="store_true", help="print one JSON document")


def run(options: dict[str, Any], out: Output) -> None:
    qs = Worker.objects.with_state()
    state = options.get("state")
    if state:
        qs = qs.filter(state=state)
    # procedures_worker_seen_idx, newest first.
    workers = list(qs.order_by("-last_seen_at", "-id")[: max(1, options["limit"])])
    running = running_by_worker([w.worker_id for w in workers if w.state != WorkerState.STOPPED])
    rows = [{"worker_id": w.worker_id, "state": w.state, "hostname": w.hostname, "pid": w.pid,
             "queues": w.queues, "concurrency": w.concurrency, "with_scheduler": w.with_scheduler,
             "version": w.version, "started_at": w.started_at, "last_seen_at": w.last_seen_at,
             "stopped_at": w.stopped_at, "stop_reason": w.stop_reason or None, "stop_detail": w.stop_detail or None,
             "running": [] if w.state == WorkerState.STOPPED else
             [{"id": str(r["id"]), "type": r["type_name"], "step": r["step_name"]} for r in running[w.worker_id]]}
            for w in workers]
    if out.as_json:
        out.document({"workers": rows})
        return
    if not rows:
        if state:
            raise Refused(f"no worker is {state}")
        out.line("no workers")
        return
    now = timezone.now()
    out.table(["worker", "state", "host", "pid", "queues", "conc", "seen", "running"],
              [[r["worker_id"], r["state"] + (f" ({r['stop_reason']})" if r["stop_reason"] else ""), r["hostname"],
                str(r["pid"]), ",".join(r["queues"]) or "*", str(r["concurrency"]),
                ago((now - r["last_seen_at"]).total_seconds()) + " ago",
                ", ".join(f"{x['type'].rsplit('.', 1)[-1]}·{x['step'] or '-'}" for x in r["running"]) or "-"]
               for r in rows])
