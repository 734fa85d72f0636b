"""The harness's JSONL records: the start-up descriptor and the per-tick samples.

Every figure that describes the queue (completions, pickup latency, depth) is read
from PostgreSQL, not counted in this process: the workers are other processes, a
killed adapter must not lose its counts, and the percentiles are computed by the
database over a 30 s window, so this process holds no growing state (the guide
asks for bounded memory). A tick is one round trip.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import sys
import threading
from dataclasses import dataclass
from typing import Any, TextIO

from benchmarks.hardbyte.procedures import BenchJob

SYSTEM = "django-procedures"
EVENT_TABLES = ["public.django_procedures_procedurerun", "public.django_procedures_step",
                "public.django_procedures_lease"]
#: Global observations: in a multi-replica run only instance 0 reports them (as the guide's peers do).
OBSERVER_METRICS = frozenset({"queue_depth", "producer_target_rate"})
#: Finished runs are counted a second behind the database's clock, so a run whose finishing transaction
#: commits just after a tick's read is still counted, by the next tick.
SETTLE = dt.timedelta(seconds=1)

_lock = threading.Lock()


def now_iso() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def instance_id() -> int:
    try:
        return int(os.environ.get("BENCH_INSTANCE_ID", "0"))
    except ValueError:
        return 0


def emit(record: dict[str, Any], out: TextIO | None = None) -> None:
    """One JSON line on stdout (telemetry only; logs go to stderr), flushed at once."""
    record.setdefault("instance_id", instance_id())
    line = json.dumps(record)
    with _lock:  # the producer and the sampler both write
        stream = out or sys.stdout
        stream.write(line + "\n")
        stream.flush()


def descriptor(db_name: str, version: str) -> dict[str, Any]:
    return {"kind": "descriptor", "system": SYSTEM, "event_tables": EVENT_TABLES, "extensions": [],
            "version": version, "schema_version": "0001_initial", "db_name": db_name,
            "started_at": now_iso()}


@dataclass
class Reading:
    """One tick's read of the database."""

    db_now: dt.datetime
    completed: int  # runs of our type finished in (previous watermark, this watermark]
    watermark: dt.datetime
    p50: float
    p95: float
    p99: float
    depth: int


_SAMPLE_SQL = """
WITH w AS (SELECT clock_timestamp() AS now)
SELECT w.now,
  (SELECT count(*) FROM django_procedures_procedurerun r
    WHERE r.finished_at > %(since)s AND r.finished_at <= w.now - %(settle)s AND r.type_name = %(type)s),
  (SELECT percentile_cont(ARRAY[0.5, 0.95, 0.99]) WITHIN GROUP (
            ORDER BY extract(epoch FROM r.started_at - r.created_at) * 1000.0)
     FROM django_procedures_procedurerun r
    WHERE r.finished_at > w.now - interval '30 seconds' AND r.type_name = %(type)s
      AND r.started_at IS NOT NULL),
  (SELECT count(*) FROM django_procedures_procedurerun r
    WHERE r.status IN ('ready', 'retrying') AND r.run_at <= w.now AND r.type_name = %(type)s)
FROM w
"""


def read(since: dt.datetime | None, settle: dt.timedelta = SETTLE) -> Reading:
    """Completions since ``since`` (``None``: start counting now), pickup latency of the last 30 s, depth.

    Pickup latency is ``started_at - created_at``: submit to the first claim, both on this host's clock.
    """
    from django.db import connection

    with connection.cursor() as cursor:
        if since is None:
            cursor.execute("SELECT clock_timestamp() - %s", [settle])
            since = cursor.fetchone()[0]
        cursor.execute(_SAMPLE_SQL, {"since": since, "settle": settle, "type": BenchJob.type_name})
        db_now, completed, pct, depth = cursor.fetchone()
    p50, p95, p99 = (float(v) for v in pct) if pct else (0.0, 0.0, 0.0)
    return Reading(db_now=db_now, completed=int(completed), watermark=db_now - settle,
                   p50=p50, p95=p95, p99=p99, depth=int(depth))


def samples(reading: Reading | None, *, completion_rate: float, enqueue_rate: float, target_rate: float,
            every_s: float, totals: dict[str, int] | None = None) -> list[dict[str, Any]]:
    """The tick's records; without a reading (the database was unreachable) only what this process knows.

    ``totals`` are this process's running counts (worker restarts, jobs whose submit failed), beyond the
    guide's required metrics.
    """
    values: list[tuple[str, float, float]] = [("enqueue_rate", enqueue_rate, every_s),
                                              ("producer_target_rate", target_rate, 0.0)]
    values += [(name, float(total), 0.0) for name, total in (totals or {}).items()]
    if reading is not None:
        values += [("claim_p50_ms", reading.p50, 30.0), ("claim_p95_ms", reading.p95, 30.0),
                   ("claim_p99_ms", reading.p99, 30.0), ("completion_rate", completion_rate, every_s),
                   ("queue_depth", float(reading.depth), 0.0)]
    else:
        values.append(("completion_rate", 0.0, every_s))
    t = now_iso()
    observer = instance_id() == 0
    return [{"t": t, "system": SYSTEM, "kind": "adapter", "subject_kind": "adapter", "subject": "",
             "metric": metric, "value": value, "window_s": window}
            for metric, value, window in values if observer or metric not in OBSERVER_METRICS]
