"""What a driven run measured: per-phase medians, recovery after each chaos phase, and the audit."""

from __future__ import annotations

import datetime as dt
import statistics
from typing import Any

import psycopg

#: Recovered: completions back to this share of the baseline phase's median (issue 31's target).
RECOVERED = 0.95


def _when(record: dict[str, Any]) -> float:
    return dt.datetime.fromisoformat(record["t"].replace("Z", "+00:00")).timestamp()


def _median(records: list[dict[str, Any]], phase: str, metric: str) -> float | None:
    values = [r["value"] for r in records if r.get("phase") == phase and r.get("metric") == metric]
    return round(statistics.median(values), 1) if values else None


def summarize(records: list[dict[str, Any]], events: list[dict[str, Any]]) -> dict[str, Any]:
    phases: dict[str, Any] = {}
    baseline = None
    for event in events:
        label = event["phase"]
        row = {k: event[k] for k in event if k not in ("phase", "start", "end", "disruption_end")}
        row["seconds"] = round(event["end"] - event["start"], 1)
        for metric in ("completion_rate", "enqueue_rate", "claim_p50_ms", "claim_p99_ms", "queue_depth"):
            row[metric] = _median(records, label, metric)
        if event["kind"] == "clean" and baseline is None:
            baseline = row["completion_rate"]
        if event["kind"] in ("pg-backend-kill", "postgres-restart", "kill-worker", "start-worker", "repeated-kill"):
            row["baseline_completion_rate"] = baseline
            row["recovery_s"] = recovery(records, event["disruption_end"], baseline)
            if baseline:
                row["during_vs_baseline"] = round((row["completion_rate"] or 0.0) / baseline, 3)
        phases[label] = row
    return phases


def recovery(records: list[dict[str, Any]], since: float, baseline: float | None) -> float | None:
    """Seconds from the end of the disruption to the first sample back at 95 % of baseline (None: never)."""
    if not baseline:
        return None
    for record in sorted((r for r in records if r.get("metric") == "completion_rate"), key=_when):
        when = _when(record)
        if when >= since and record["value"] >= RECOVERED * baseline:
            return round(max(0.0, when - since), 1)
    return None


def audit(url: str, type_name: str = "hardbyte.Job") -> dict[str, Any]:
    """Every stored job of the run: by status; re-run attempts; steps committed more than once."""
    with psycopg.connect(url, autocommit=True) as conn:
        statuses = dict(conn.execute("SELECT status, count(*) FROM django_procedures_procedurerun"
                                     " WHERE type_name = %s GROUP BY status", [type_name]).fetchall())
        twice = conn.execute(
            "SELECT count(*) FROM (SELECT s.procedure_id FROM django_procedures_step s JOIN"
            " django_procedures_procedurerun r ON r.id = s.procedure_id WHERE r.type_name = %s AND s.status = 'done'"
            " GROUP BY s.procedure_id HAVING count(*) > 1) x", [type_name]).fetchone()[0]
        lost_attempts = conn.execute(
            "SELECT count(*) FROM django_procedures_procedurerun WHERE type_name = %s AND lost > 0",
            [type_name]).fetchone()[0]
    stored = sum(statuses.values())
    return {"stored": stored, "by_status": statuses, "not_done": stored - statuses.get("done", 0),
            "committed_twice": twice, "reclaimed_after_loss": lost_attempts}
