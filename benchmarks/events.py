"""Benchmark 16, ``events`` (issue 26): from an event's send to the next step, on an idle worker.

One long-running worker (``ctx.threads`` threads) runs ``Sizes.events``
``WaitThenStamp`` procedures to their ``Status.wait_for_event("go")``; then
the runner sends each its event, one at a time at ``Sizes.events_rate`` (each
send in its own transaction, as a webhook view would), and measures from the
send's commit to the start of the step after the wait (the time the step
records), split at the worker's claim (the run's ``step_started_at``: the
worker's clock just before its claim transaction).
"""

from __future__ import annotations

import random
import time

from benchmarks.common import KEEP_HISTORY, Context, Metric, now, submit
from benchmarks.harness import BenchmarkError, percentile, wait_until_done


def _wait_all_waiting(n: int, type_name: str, timeout: float) -> None:
    """Until ``n`` runs of ``type_name`` wait for their event."""
    from django_procedures.models import ProcedureRun

    waiting = ProcedureRun.objects.filter(type_name=type_name, status="waiting", waiting_for="event")
    deadline = time.monotonic() + timeout
    while waiting.count() < n:
        if time.monotonic() > deadline:
            raise BenchmarkError(f"only {waiting.count()} of {n} procedures reached their wait within {timeout:.0f}s")
        time.sleep(0.1)


def events(ctx: Context) -> list[Metric]:
    from django.db import connection, transaction

    import django_procedures
    from benchmarks.procedures import WaitThenStamp
    from django_procedures.models import ProcedureRun

    s, t = ctx.sizes, ctx.threads
    n, rate = s.events, s.events_rate
    p50, p95, p99, worst, wake50, wake99, hand50, hand99, send50 = ([] for _ in range(9))
    for run in range(ctx.runs):
        with ctx.databases.fresh(f"events_{run}") as db, ctx.workers(db) as pool:
            connection.ensure_connection()
            pool.start(1, concurrency=t, burst=False, settings=KEEP_HISTORY)
            pool.wait_idle(ctx.server, db, 1)
            since = now()
            submit(WaitThenStamp, [{}] * n)
            _wait_all_waiting(n, WaitThenStamp.type_name, s.timeout)
            pool.wait_idle(ctx.server, db, 1)
            time.sleep(1.0)  # the worker's claim after the last wait found nothing; it sleeps in LISTEN
            ids = list(ProcedureRun.objects.filter(created_at__gte=since, type_name=WaitThenStamp.type_name)
                       .values_list("id", flat=True))
            random.Random(run).shuffle(ids)
            committed: dict[str, float] = {}
            sending: list[float] = []
            begin = time.monotonic()
            for i, pid in enumerate(ids):
                delay = begin + i / rate - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                t0 = time.time()
                with transaction.atomic():
                    sent = django_procedures.send_event(pid, "go", {"i": i})
                committed[str(pid)] = time.time()
                sending.append((committed[str(pid)] - t0) * 1000)
                if not sent.delivered:
                    raise BenchmarkError(f"the event to {pid} was not taken by its wait (status {sent.status})")
            wait_until_done(n, timeout=s.timeout, workers=pool, type_name=WaitThenStamp.type_name)
            rows = ProcedureRun.objects.filter(id__in=ids).values_list("id", "output", "step_started_at")
            seen = {str(pid): (output["started"], claimed.timestamp()) for pid, output, claimed in rows}
        latency = [(seen[pid][0] - at) * 1000 for pid, at in committed.items()]
        woken = [(seen[pid][1] - at) * 1000 for pid, at in committed.items()]
        handed = [(seen[pid][0] - seen[pid][1]) * 1000 for pid in committed]
        p50.append(percentile(latency, 50))
        p95.append(percentile(latency, 95))
        p99.append(percentile(latency, 99))
        worst.append(max(latency))
        wake50.append(percentile(woken, 50))
        wake99.append(percentile(woken, 99))
        hand50.append(percentile(handed, 50))
        hand99.append(percentile(handed, 99))
        send50.append(percentile(sending, 50))
        ctx.progress(f"  events run {run + 1}: {n} events at {rate:g}/s: p50 {p50[-1]:.1f} ms, p95 {p95[-1]:.1f} ms, "
                     f"p99 {p99[-1]:.1f} ms, max {worst[-1]:.1f} ms (p50/p99 {wake50[-1]:.1f}/{wake99[-1]:.1f} ms "
                     f"to wake and start claiming, {hand50[-1]:.1f}/{hand99[-1]:.1f} ms to claim and hand over); "
                     f"the send's transaction p50 {send50[-1]:.1f} ms")
    what = f"{n:,} events sent one at a time at {rate:g}/s, 1 idle worker x {t} threads"
    return [
        Metric("16 events", f"p50 (next step's start - send commit), {what}", "ms", p50, "≤ 5", lambda v: v <= 5,
               digits=1),
        Metric("16 events", "p95", "ms", p95, digits=1),
        Metric("16 events", "p99", "ms", p99, "≤ 20", lambda v: v <= 20, digits=1),
        Metric("16 events", "max", "ms", worst, digits=1),
        Metric("16 events", "p50 of its first part: send commit -> the worker starts its claim", "ms", wake50,
               digits=1),
        Metric("16 events", "p99 of its first part (wake-up)", "ms", wake99, digits=1),
        Metric("16 events", "p50 of its second part: claim transaction and hand-over -> step starts", "ms", hand50,
               digits=1),
        Metric("16 events", "p99 of its second part (claim and hand-over)", "ms", hand99, digits=1),
        Metric("16 events", "p50 of the send's own transaction (send_event in atomic(), to its commit)", "ms",
               send50, digits=1),
    ]
