"""The tasks benchmark: Django's Tasks framework on ``ProceduresBackend``, beside a one-step procedure and,
with ``--peers``, beside django-tasks-db's ``db_worker`` in the same run.

- throughput: ``n`` no-op tasks enqueued, then 2 burst workers drain them (as the
  procedure throughput benchmark does); worker CPU per task against a one-step
  no-op procedure drained the same way in the same run;
- pickup: tasks enqueued one at a time (each its own transaction) to 2 idle
  workers; the latency is the task's start minus the enqueue's commit.

The peer (``benchmarks.peers``) is measured by its own harness with the same
counts: ``thr-W2`` (2 ``db_worker`` processes, default settings) and ``lat-W2``.
"""

from __future__ import annotations

from typing import Any

from benchmarks.common import Context, Metric, drain_noops, measure_pickup
from benchmarks.harness import percentile

#: The peer's harness scenarios that match ours: 2 workers at their default settings.
PEER, PEER_THROUGHPUT, PEER_PICKUP = "dtdb", "thr-W2", "lat-W2"


def enqueue_noops(n: int) -> None:
    """``n`` no-op tasks, enqueued one by one through the framework's API, in one transaction."""
    from django.db import transaction

    from benchmarks.tasks import noop

    with transaction.atomic():
        for _ in range(n):
            noop.enqueue()


def pickup_latencies(ctx: Context, label: str) -> tuple[list[float], float]:
    """Pickup latencies (ms) of ``sizes.pickup`` tasks enqueued at ``sizes.pickup_rate``/s, and the idle CPU
    (% of a core) of the busier of 2 idle workers before them."""
    from benchmarks.tasks import stamp
    from django_procedures.tasks.types import type_name_of

    with ctx.databases.fresh(label) as db:
        measured = measure_pickup(ctx, db, submit=lambda i: stamp.enqueue().id,
                                  type_name=type_name_of(stamp.module_path))
    return measured.latencies, measured.idle_cpu


def tasks(ctx: Context) -> list[Metric]:
    n, t = ctx.sizes.tasks, ctx.threads
    rate, steady, task_cpu, procedure_cpu, cpu_ratio = [], [], [], [], []
    p50, p99, idle = [], [], []
    theirs: dict[str, list[Any]] = {PEER_THROUGHPUT: [], PEER_PICKUP: []}
    for run in range(ctx.runs):
        # The one-step procedure and the tasks alternate which goes first, so neither gets the warmer machine.
        pair = [("procedure", None), ("tasks", enqueue_noops)]
        drains = {}
        for name, fill in pair if run % 2 == 0 else pair[::-1]:
            drains[name] = drain_noops(ctx, f"tasks_{name}_{run}", n, 2, fill=fill)
        ours, one_step = drains["tasks"], drains["procedure"]
        rate.append(ours.rate)
        steady.append(ours.steady)
        task_cpu.append(ours.worker_cpu_ms)
        procedure_cpu.append(one_step.worker_cpu_ms)
        cpu_ratio.append(ours.worker_cpu_ms / one_step.worker_cpu_ms)
        latencies, idle_cpu = pickup_latencies(ctx, f"tasks_pickup_{run}")
        p50.append(percentile(latencies, 50))
        p99.append(percentile(latencies, 99))
        idle.append(idle_cpu)
        ctx.progress(f"  tasks run {run + 1}: {ours.rate:,.0f} tasks/s ({ours.steady:,.0f}/s from the first "
                     f"claim); worker CPU {ours.worker_cpu_ms:.2f} ms/task vs {one_step.worker_cpu_ms:.2f} "
                     f"ms/one-step procedure; pickup p50 {p50[-1]:.1f} ms, p99 {p99[-1]:.1f} ms")
        if ctx.peers:
            from benchmarks.peers import run_peer

            peer = run_peer(PEER, [PEER_THROUGHPUT, PEER_PICKUP], n, 1, host=ctx.server.host, user=ctx.server.user)
            for name in theirs:
                theirs[name] += peer["scenarios"][name]
            thr, lat = theirs[PEER_THROUGHPUT][-1], theirs[PEER_PICKUP][-1]
            ctx.progress(f"  django-tasks-db run {run + 1}: {thr['jobs_per_s_wall']:,.0f} tasks/s; pickup p50 "
                         f"{lat['p50_ms']:.1f} ms, p99 {lat['p99_ms']:.1f} ms")
    what = f"{n:,} no-op tasks, 2 workers"
    metrics = [
        Metric("9 tasks", f"{what} x {t} threads (worker start to last finish)", "tasks/s", rate),
        Metric("9 tasks", "same, from the first claim (start-up excluded)", "tasks/s", steady),
        Metric("9 tasks", f"pickup p50 (task start - enqueue commit), {ctx.sizes.pickup} enqueued at "
               f"{ctx.sizes.pickup_rate:g}/s to 2 idle workers", "ms", p50, "≤ 5", lambda v: v <= 5, digits=1),
        Metric("9 tasks", "pickup p99", "ms", p99, digits=1),
        Metric("9 tasks", "worker CPU per task (2 workers, start-up included)", "ms", task_cpu, digits=2),
        Metric("9 tasks", "worker CPU per one-step no-op procedure, same run", "ms", procedure_cpu, digits=2),
        Metric("9 tasks", "task / one-step procedure worker CPU (paired runs)", "ratio", cpu_ratio, "≤ 1.0",
               lambda v: v <= 1.0, digits=2),
        Metric("9 tasks", "idle worker CPU before the pickup run (busier of the two)", "% of a core", idle,
               digits=2),
    ]
    if ctx.peers:
        thr, lat = theirs[PEER_THROUGHPUT], theirs[PEER_PICKUP]
        metrics += [
            Metric("9 tasks", f"django-tasks-db db_worker: {what} (their harness, {PEER_THROUGHPUT})", "tasks/s",
                   [r["jobs_per_s_wall"] for r in thr]),
            Metric("9 tasks", "ours / django-tasks-db throughput (paired runs)", "ratio",
                   [ours / r["jobs_per_s_wall"] for ours, r in zip(rate, thr, strict=True)], "≥ 3",
                   lambda v: v >= 3, digits=1),
            Metric("9 tasks", f"django-tasks-db pickup p50 ({PEER_PICKUP}, default interval)", "ms",
                   [r["p50_ms"] for r in lat], digits=1),
            Metric("9 tasks", "django-tasks-db pickup p99", "ms", [r["p99_ms"] for r in lat], digits=1),
            Metric("9 tasks", "django-tasks-db worker CPU per task (their harness, both workers)", "ms",
                   [sum(r["cpu"]["worker_cpu_s"]) / r["succeeded"] * 1000 for r in thr], digits=2),
        ]
    return metrics
