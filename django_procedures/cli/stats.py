"""``procedures stats``: counts by status, type and queue; completions and failures per minute; queue lag.

Every number is read from an index range or a capped scan: unfinished procedures by status (the status
index, at most ``METRICS_COUNT_CAP`` rows per status), what finished in the window (``procedures_finished_idx``),
the oldest due procedure per queue (``procedures_due_idx``).
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from datetime import timedelta
from typing import Any

from django_procedures import clock
from django_procedures.cli.common import ago
from django_procedures.cli.output import Output, Usage
from django_procedures.conf import conf
from django_procedures.policy.status import UNFINISHED, RunStatus
from django_procedures.store.activity import finished_rows, whole_minute
from django_procedures.store.overview import counts_by_type_and_queue, oldest_due

HELP = "Counts by status, type and queue; completions and failures per minute; oldest ready age per queue."
FAILED = (RunStatus.FAILED.value, RunStatus.ROLLED_BACK.value)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--window", type=int, default=15, metavar="MINUTES",
                        help="the recent minutes the finished counts cover (default 15, at most 1440)")
    parser.add_argument("--json", action="store_true", help="print one JSON document")


def collect(window_minutes: int) -> dict[str, Any]:
    now = clock.now()
    cap = int(conf.METRICS_COUNT_CAP)
    unfinished: list[dict[str, Any]] = []
    capped = []
    for status in UNFINISHED:
        counts, over = counts_by_type_and_queue(status.value, cap)
        if over:
            capped.append(status.value)
        unfinished += [{"status": status.value, "type": t, "queue": q, "count": n} for (t, q), n in counts.items()]
    start = whole_minute(now) - timedelta(minutes=window_minutes - 1)
    per_minute: dict[Any, dict[str, int]] = defaultdict(lambda: {"done": 0, "failed": 0, "cancelled": 0})
    finished: dict[tuple[str, str], int] = defaultdict(int)
    for minute, type_name, status, n, _last in finished_rows(start, now + timedelta(microseconds=1), 60):
        finished[(status, type_name)] += n
        per_minute[minute]["failed" if status in FAILED else status] += n
    minutes = [start + timedelta(minutes=i) for i in range(window_minutes)]
    oldest = oldest_due(now, cap)
    return {
        "now": now, "count_cap": cap, "capped_statuses": capped, "window_minutes": window_minutes,
        "unfinished": sorted(unfinished, key=lambda r: (r["status"], -r["count"], r["type"], r["queue"])),
        "finished": [{"status": s, "type": t, "count": n} for (s, t), n in sorted(finished.items())],
        "per_minute": [{"minute": m, **per_minute.get(m, {"done": 0, "failed": 0, "cancelled": 0})} for m in minutes],
        "oldest_ready": {q: {"run_at": at, "age_seconds": round((now - at).total_seconds(), 3)}
                         for q, at in sorted(oldest.items())},
    }


def run(options: dict[str, Any], out: Output) -> None:
    window = options["window"]
    if not 1 <= window <= 1440:
        raise Usage(f"--window must be between 1 and 1440 minutes; got {window}")
    doc = collect(window)
    if out.as_json:
        out.document(doc)
        return
    by_status: dict[str, int] = defaultdict(int)
    by_type: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    by_queue: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for row in doc["unfinished"]:
        by_status[row["status"]] += row["count"]
        by_type[row["type"]][row["status"]] += row["count"]
        by_queue[row["queue"]][row["status"]] += row["count"]
    for row in doc["finished"]:
        by_status[row["status"]] += row["count"]
        by_type[row["type"]][row["status"]] += row["count"]
    capped = set(doc["capped_statuses"])
    out.line(f"unfinished now, and finished in the last {window} min")
    out.table(["status", "count"], [[s.value, ("at least " if s.value in capped else "")
                                     + f"{by_status.get(s.value, 0):,}"] for s in RunStatus])
    if capped:
        out.line(f"(at most {doc['count_cap']:,} rows are read per status: PROCEDURES['METRICS_COUNT_CAP'])")
    shown = [s.value for s in RunStatus if any(by_type[t].get(s.value) for t in by_type)]
    if by_type:
        out.line()
        out.table(["type", *shown], [[t, *(f"{by_type[t].get(s, 0):,}" for s in shown)] for t in sorted(by_type)])
    out.line()
    queues = sorted(set(by_queue) | set(doc["oldest_ready"]))
    unfinished_shown = [s.value for s in UNFINISHED]
    out.table(["queue", *unfinished_shown, "oldest ready"],
              [[q, *(f"{by_queue[q].get(s, 0):,}" for s in unfinished_shown),
                ago(doc["oldest_ready"][q]["age_seconds"]) if q in doc["oldest_ready"] else "-"] for q in queues]
              or [["-", *("0" for _ in unfinished_shown), "-"]])
    out.line()
    total = {k: sum(m[k] for m in doc["per_minute"]) for k in ("done", "failed", "cancelled")}
    out.line(f"per minute over the last {window} min: {total['done'] / window:.1f} done, "
             f"{total['failed'] / window:.1f} failed, {total['cancelled'] / window:.1f} cancelled")
    out.table(["minute", "done", "failed", "cancelled"],
              [[m["minute"].strftime("%H:%M"), str(m["done"]), str(m["failed"]), str(m["cancelled"])]
               for m in doc["per_minute"][-15:]])
