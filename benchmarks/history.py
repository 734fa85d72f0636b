"""Benchmarks of a long history: how fast retention prunes it, and what keeping ten million runs costs.

``retention`` seeds finished procedures (each with its Step and Lease row), times
the prune as ``procedures_prune`` runs it (and its CPU, again on a copy with the
foreign keys to a procedure put back as they were before migration 0013, to show what their checks cost),
and drains no-op procedures with and without the workers' retention pass going on.
``history`` seeds the admin's realistic rows (``benchmarks.admin_plans``) at
``Sizes.history_procedures`` and measures claims, pickup and the admin's pages
beside an empty table; it runs only when named (``--only history``) or in
``--quick`` form. Its workers run with ``RETENTION`` off (``KEEP_HISTORY``): most
of the seeded history is older than the default 30 days, and pruning it during
the drain would measure retention, which the ``retention`` benchmark measures on
its own.
"""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

from benchmarks.harness import BenchmarkError

#: Benchmarks a plain ``python -m benchmarks.run`` leaves out: they run when named with ``--only`` (or ``--quick``).
ON_PURPOSE = {"history"}


# --------------------------------------------------------------------------- 9. retention


def _backend_cpu() -> float | None:
    """CPU seconds this connection's PostgreSQL backend has used (None: the server is not on this host)."""
    from django.db import connection

    from benchmarks.workers import cpu_seconds

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        pid = cursor.fetchone()[0]
    try:
        return cpu_seconds(pid)
    except (OSError, ValueError):
        return None


def _prune_all(cutoff: Any) -> tuple[int, float, float, float | None, list[int]]:
    """Prune every tree finished before ``cutoff`` as ``procedures_prune`` does (batches paced by their time).

    Returns (procedures deleted, seconds, longest batch in seconds, PostgreSQL CPU seconds or None, the trees
    each batch asked for).
    """
    from django_procedures.runtime.retention import Pace

    pace = Pace()
    total, longest, asked = 0, 0.0, []
    cpu0 = _backend_cpu()
    started = time.perf_counter()
    while True:
        t = time.perf_counter()
        asked.append(pace.trees)
        batch, full = pace.prune_batch(cutoff)
        longest = max(longest, time.perf_counter() - t)
        total += batch.procedures if batch else 0
        if not full:
            seconds = time.perf_counter() - started
            cpu1 = _backend_cpu()
            return total, seconds, longest, (cpu1 - cpu0) if cpu0 is not None and cpu1 is not None else None, asked


def _foreign_key_share(cutoff: Any, trees: int) -> float:
    """Percent of one batch's time spent checking the foreign keys of the deleted procedures.

    ``EXPLAIN (ANALYZE)`` of the batch's statement, the constraints made immediate so their checks (one per
    deleted procedure and referencing foreign key, run at commit otherwise) show as "Trigger for constraint"
    lines; a first batch warms the caches and is not counted; both are rolled back.
    """
    import re

    from django.db import connection, transaction

    from django_procedures.models import Event, KeyRequest, Lease, ProcedureRun, Step
    from django_procedures.policy.status import FINAL
    from django_procedures.store import retention as store

    sql = store._PRUNE_SQL.format(run=store._table(ProcedureRun), step=store._table(Step), lease=store._table(Lease),
                                  key=store._table(KeyRequest), event=store._table(Event))
    params = {"cutoff": cutoff, "statuses": sorted(FINAL), "final": sorted(FINAL), "limit": trees}
    for _ in range(2):
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
            cursor.execute("EXPLAIN (ANALYZE) " + sql, params)
            plan = "\n".join(row[0] for row in cursor.fetchall())
            transaction.set_rollback(True)
    checks = sum(float(m) for m in re.findall(r"^Trigger for constraint .*time=([0-9.]+)", plan, re.M))
    total = float(re.search(r"^Execution Time: ([0-9.]+)", plan, re.M).group(1))  # type: ignore[union-attr]
    return checks / total * 100


def _add_foreign_keys_to_procedures() -> None:
    """Put back the six foreign keys to a procedure that migration 0013 stopped PostgreSQL enforcing, as they
    were (deferred to commit), on this (throwaway) database: what their checks cost."""
    from django.db import connection

    from django_procedures.models import KeyRequest, Lease, ProcedureRun, Step

    run = ProcedureRun._meta.db_table
    keys = [(Step, "procedure_id"), (Lease, "procedure_id"), (KeyRequest, "procedure_id"), (KeyRequest, "root_id"),
            (ProcedureRun, "parent_id"), (ProcedureRun, "root_id")]
    with connection.cursor() as cursor:
        for i, (model, column) in enumerate(keys):
            cursor.execute(f"ALTER TABLE {model._meta.db_table} ADD CONSTRAINT bench_fk_{i} FOREIGN KEY ({column}) "
                           f"REFERENCES {run} (id) DEFERRABLE INITIALLY DEFERRED")


def retention(ctx: Any) -> list[Any]:
    from benchmarks.common import KEEP_HISTORY, Metric, drain_noops, now, seed_backlog
    from django_procedures.models import ProcedureRun, Step
    from django_procedures.runtime.retention import BATCH_SECONDS, BATCH_TREES

    s = ctx.sizes
    n = s.retention_procedures
    ctx.progress(f"  seeding {n:,} finished procedures (1 to 61 days old, in the order they finished, each with a "
                 "step and a lease; once)")
    seeded = ctx.databases.template("retention", lambda: seed_backlog(n, 0, in_order=True))
    rates, longest, off, on, ratio, pruned, cpu_ms, fk_share, sizes, keyed_ms = [], [], [], [], [], [], [], [], [], []
    pruning = {"RETENTION": "1d"}  # every seeded procedure is older; the drained ones are not
    for run in range(ctx.runs):
        with ctx.databases.fresh(f"retention_prune_{run}", seeded):
            steps = Step.objects.count()
            deleted, seconds, worst, cpu, asked = _prune_all(now() - timedelta(days=1))
            if deleted != n or Step.objects.exists():
                raise BenchmarkError(f"pruned {deleted} of {n} procedures; {Step.objects.count()} steps left")
        rates.append(deleted / seconds)
        longest.append(worst * 1000)
        sizes.append(sorted(asked)[len(asked) // 2])
        if cpu is not None:
            cpu_ms.append(cpu / deleted * 1000)
        ctx.progress(f"  retention run {run + 1}: pruned {deleted:,} procedures, {steps:,} steps and as many leases "
                     f"in {seconds:.2f}s: {rates[-1]:,.0f} procedures/s; {len(asked)} batches of {min(asked)} to "
                     f"{max(asked)} trees, the longest {longest[-1]:.0f} ms; PostgreSQL CPU "
                     f"{cpu_ms[-1] if cpu_ms else float('nan'):.3f} ms per procedure")
        with ctx.databases.fresh(f"retention_keys_{run}", seeded):
            _add_foreign_keys_to_procedures()
            fk_share.append(_foreign_key_share(now() - timedelta(days=1), BATCH_TREES))
            deleted, _, _, cpu, _ = _prune_all(now() - timedelta(days=1))
        if cpu is not None:
            keyed_ms.append(cpu / deleted * 1000)
            ctx.progress(f"  retention run {run + 1}: the same on a copy with the six foreign keys to a procedure "
                         f"enforced (before migration 0013): PostgreSQL CPU {keyed_ms[-1]:.3f} ms per procedure, "
                         f"{fk_share[-1]:.0f}% of a batch checking them")
        results = {}
        order = [("off", KEEP_HISTORY), ("on", pruning)]
        for name, settings in (order if run % 2 == 0 else order[::-1]):  # neither side always goes first
            with ctx.databases.fresh(f"retention_{name}_{run}", seeded) as db:
                results[name] = drain_noops(ctx, "", s.throughput, 2, settings=settings, db=db).rate
                if name == "on":
                    cutoff = now() - timedelta(days=1)
                    pruned.append(n - ProcedureRun.objects.filter(finished_at__lt=cutoff).count())
        off.append(results["off"])
        on.append(results["on"])
        ratio.append(results["on"] / results["off"] * 100)
        ctx.progress(f"  retention run {run + 1}: drain without pruning {off[-1]:,.0f}/s, with the workers pruning "
                     f"{on[-1]:,.0f}/s ({ratio[-1]:.0f}%); they pruned {pruned[-1]:,} old procedures meanwhile")
    what = f"{s.throughput:,} no-op procedures, 2 workers x {ctx.threads} threads, beside {n:,} old finished"
    return [
        Metric("11 retention", f"prune {n:,} finished procedures (+ a step and a lease each), batches paced "
               f"to about {BATCH_SECONDS * 1000:.0f} ms", "procedures/s", rates, "≥ 50,000", lambda v: v >= 50_000),
        Metric("11 retention", "trees per batch (the median batch's)", "trees", sizes),
        Metric("11 retention", "longest batch (its locks and its transaction)", "ms", longest),
        Metric("11 retention", "PostgreSQL CPU per pruned procedure (its backend, from /proc)", "ms", cpu_ms,
               digits=3),
        Metric("11 retention", "capacity of one idle core at that CPU cost: 1000 / ms", "procedures/s",
               [1000 / v for v in cpu_ms if v > 0], "≥ 50,000", lambda v: v >= 50_000),
        Metric("11 retention", "same CPU on a copy with the six foreign keys to a procedure enforced (the schema "
               "before migration 0013; what their checks cost)", "ms", keyed_ms, digits=3),
        Metric("11 retention", f"share of a batch of {BATCH_TREES} checking them on that copy (EXPLAIN ANALYZE)", "%",
               fk_share),
        Metric("11 retention", f"{what}, retention off", "procedures/s", off),
        Metric("11 retention", "same, the workers pruning (RETENTION=1d)", "procedures/s", on),
        Metric("11 retention", "pruning / not pruning (paired runs)", "%", ratio, "≥ 90", lambda v: v >= 90),
        Metric("11 retention", "old procedures the workers pruned during that drain", "procedures", pruned),
    ]


# --------------------------------------------------------------------------- 10. history


def _time_admin(ctx: Any, repeat: int) -> dict[str, float]:
    from django.contrib.auth.models import User
    from django.test import Client

    from benchmarks.admin_plans import admin_pages, time_pages

    user, _ = User.objects.get_or_create(username="history", defaults={"is_staff": True, "is_superuser": True})
    client = Client()
    client.force_login(user)
    return time_pages(client, admin_pages(), repeat)


def history(ctx: Any) -> list[Any]:
    from benchmarks.admin_seed import seed
    from benchmarks.common import KEEP_HISTORY, Metric, drain_noops, measure_pickup
    from benchmarks.harness import percentile

    s = ctx.sizes
    sides: dict[str, dict[str, Any]] = {}
    for side, rows in (("empty", 0), ("history", s.history_procedures)):
        with ctx.databases.fresh(f"history_{side}") as db:
            if rows:
                ctx.progress(f"  seeding {rows:,} procedures with their leases and steps")
                t = time.monotonic()
                seed(rows, say=ctx.progress)
                ctx.progress(f"  seeded in {time.monotonic() - t:.0f}s")
            drain = drain_noops(ctx, "", s.history_drain, 2, settings=KEEP_HISTORY, db=db)
            picked = measure_pickup(ctx, db, settings=KEEP_HISTORY)
            if not rows:  # the admin beside an empty table: a small history, so every page has rows to show
                seed(s.history_baseline, say=lambda line: None)
            pages = _time_admin(ctx, s.history_requests)
        sides[side] = {"rate": drain.rate, "p50": percentile(picked.latencies, 50),
                       "p99": percentile(picked.latencies, 99), "pages": pages,
                       "worker_cpu": drain.worker_cpu_ms, "db_cpu": drain.db_cpu_ms, "wal": drain.wal_bytes,
                       "reads": drain.reads}
        ctx.progress(f"  history, {side}: drain {drain.rate:,.0f}/s, CPU per procedure: worker "
                     f"{drain.worker_cpu_ms:.2f} ms + PostgreSQL {drain.db_cpu_ms:.2f} ms, WAL "
                     f"{drain.wal_bytes:,.0f} bytes/procedure, {drain.reads:.1f} blocks read/procedure; pickup p50 "
                     f"{sides[side]['p50']:.1f} ms, p99 {sides[side]['p99']:.1f} ms; slowest page "
                     f"{max(pages.values()):.0f} ms ({max(pages, key=pages.get)})")
    empty, full = sides["empty"], sides["history"]
    size = f"{s.history_procedures:,}"
    metrics = [
        Metric("12 history", f"{s.history_drain:,} no-op procedures, 2 workers x {ctx.threads} threads, empty table",
               "procedures/s", [empty["rate"]]),
        Metric("12 history", f"same, beside {size} finished procedures", "procedures/s", [full["rate"]]),
        Metric("12 history", "history / empty", "%", [full["rate"] / empty["rate"] * 100], "≥ 90",
               lambda v: v >= 90),
        # CPU per procedure does not depend on what else the machine runs, as the rates above do.
        Metric("12 history", "CPU per procedure of that drain, workers + PostgreSQL backends, empty table", "ms",
               [empty["worker_cpu"] + empty["db_cpu"]], digits=2),
        Metric("12 history", f"same, beside {size} (PostgreSQL alone: {full['db_cpu']:.2f} ms; "
               f"empty: {empty['db_cpu']:.2f} ms)", "ms", [full["worker_cpu"] + full["db_cpu"]], digits=2),
        # WAL counts the pages a drain dirtied (each page's first change after a checkpoint is written whole): it does
        # not depend on the machine's speed or load either, and it is where random ids and scattered rows showed.
        Metric("12 history", "WAL per procedure of that drain, empty table", "bytes", [empty["wal"]]),
        Metric("12 history", f"same, beside {size}", "bytes", [full["wal"]]),
        # Blocks read from outside shared buffers: pages the drain touched that were not cached. Beside a history larger
        # than the buffers, new rows spread over its pages (docs/scaling.md) are read back for each write.
        Metric("12 history", "blocks read from outside shared buffers per procedure of that drain, empty table",
               "blocks", [empty["reads"]], digits=2),
        Metric("12 history", f"same, beside {size}", "blocks", [full["reads"]], digits=2),
        Metric("12 history", "pickup p50, empty table", "ms", [empty["p50"]], digits=1),
        Metric("12 history", f"pickup p50, beside {size}", "ms", [full["p50"]], digits=1),
        Metric("12 history", f"pickup p99, beside {size} (empty: {empty['p99']:.1f} ms)", "ms", [full["p99"]],
               digits=1),
    ]
    for title, ms in full["pages"].items():
        limit = 500 if title.startswith("dashboard") else 200
        metrics.append(Metric("12 history", f"admin: {title}, median of {s.history_requests}, at {size} "
                              f"(at {s.history_baseline:,}: {empty['pages'][title]:.0f} ms)", "ms", [ms],
                              f"< {limit}", lambda v, limit=limit: v < limit))
    return metrics

