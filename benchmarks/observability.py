"""Benchmark 8, observability: progress reports, worker metrics and OpenTelemetry spans added in turn.

Each variant adds to the one before and drains the same ten-step work with 2 burst workers. Two kinds
of figure come out:

- throughput as a ratio to the baseline of the same run (a busy machine moves both sides, but a drain
  of a few seconds still varies by ±10 % from run to run);
- CPU per step, of the worker processes and of their PostgreSQL backends, read from ``/proc``. The CPU
  a worker spends starting up (importing Django and, with ``--metrics-port``, prometheus-client, and
  starting the metrics server) is measured by a burst over an empty queue with the same options and
  subtracted from the workers', so what is left is what each step costs. CPU time does not depend on what else the
  machine runs, as throughput does: it is the figure to read when the ratios spread.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from importlib.util import find_spec
from typing import Any

#: The variants, each adding to the one before: (name, reporting progress, worker args, tracing).
METRICS_ARGS = ("--metrics-port", "0", "--metrics-host", "127.0.0.1")
VARIANTS = [("baseline", False, (), False), ("+progress", True, (), False),
            ("+metrics", True, METRICS_ARGS, False), ("+otel", True, METRICS_ARGS, True)]
WHAT = {"baseline": "progress, metrics and tracing off", "+progress": "one ctx.progress() per step",
        "+metrics": "and --metrics-port on", "+otel": "and OpenTelemetry spans (SDK, batched, dropped)"}
STEPS = 10


@dataclass
class Cpu:
    """CPU seconds of the worker processes and of their PostgreSQL backends (nan: not measurable here)."""

    worker: float
    database: float

    @classmethod
    def of(cls, pool: Any) -> Cpu:
        database = pool.database_cpu()
        return cls(pool.worker_cpu(), float("nan") if database is None else database)


@dataclass
class StepDrain:
    rate: float  # steps/s from the first claim to the last finish
    commits: float  # commits per step over the workers' whole life
    cpu: Cpu  # CPU of the whole drain, start-up included


def drain_steps(ctx: Any, label: str, cls: Any, n: int, args: Sequence[str],
                env: dict[str, str] | None = None, traced: bool = False) -> StepDrain:
    """``n`` ten-step procedures of ``cls`` drained by 2 burst workers started with ``args`` (and ``env``).

    ``traced``: submitted inside a span, so each row carries the submitter's trace context.
    """
    from benchmarks.common import checkpoint, now, run_burst, submit

    with ctx.databases.fresh(label) as db:
        since = now()
        with _submitter_span(traced):
            submit(cls, [{}] * n)
        checkpoint()  # the copied template and the submits: their checkpoint must not land in one drain only
        run = run_burst(ctx, db, since, n, 2, args=args, env=env)
    return StepDrain(n * STEPS / (run.last - run.first), run.commits / (n * STEPS), Cpu.of(run.pool))


def start_up_cpu(ctx: Any, label: str, args: Sequence[str], env: dict[str, str] | None = None) -> Cpu:
    """The CPU of 2 burst workers started with ``args`` over an empty queue: their start-up and shut-down."""
    from benchmarks.harness import close_connection

    with ctx.databases.fresh(label) as db:
        close_connection()
        ctx.server.wait_disconnected(db)
        with ctx.workers(db) as pool:
            started = pool.start(2, concurrency=ctx.threads, burst=True, args=args, env=env)
            pool.wait_exit(started, ctx.sizes.timeout)
        ctx.server.wait_disconnected(db)
        return Cpu.of(pool)


def _submitter_span(traced: bool) -> Any:
    """A span current while the benchmark submits (from a tracer provider of its own), or nothing."""
    if not traced:
        return contextlib.nullcontext()
    from opentelemetry.sdk.trace import TracerProvider

    return TracerProvider().get_tracer("benchmarks").start_as_current_span("submit")


def tracing_available() -> bool:
    return find_spec("opentelemetry") is not None and find_spec("opentelemetry.sdk") is not None


def _resolved(cpu_us: float) -> bool:
    """Whether a CPU reading per step can divide: not nan, and above zero. The CPU clock ticks every 10 ms, so a
    quick run's few steps, less the start-up subtracted, can read 0 or below (it did on a loaded machine)."""
    return cpu_us == cpu_us and cpu_us > 0


def observability(ctx: Any) -> list[Any]:
    """The variants in turn, rotated from run to run; throughput ratios and CPU per step per variant.

    "+otel" workers have an SDK tracer provider that batches spans and drops them (benchmarks/settings.py),
    and the procedures were submitted inside a span.
    """
    from benchmarks.common import Metric
    from benchmarks.procedures import TenSteps, TenStepsReporting

    n, t = ctx.sizes.steps_procedures, ctx.threads
    variants = [v for v in VARIANTS if not v[3] or tracing_available()]
    if len(variants) < len(VARIANTS):
        ctx.progress("  observability: opentelemetry-sdk is not installed; +otel is left out")
    names = [v[0] for v in variants]
    rates: dict[str, list[float]] = {name: [] for name in names}
    commits: dict[str, list[float]] = {name: [] for name in names}
    worker_us: dict[str, list[float]] = {name: [] for name in names}
    database_us: dict[str, list[float]] = {name: [] for name in names}
    start_up_ms: dict[str, list[float]] = {name: [] for name in names}
    for run in range(ctx.runs):
        # Rotate which goes first, so a warming cache or a busy neighbour does not favour one side.
        shift = run % len(variants)
        for name, reporting, args, traced in variants[shift:] + variants[:shift]:
            env = {"BENCH_TRACING": "1"} if traced else None
            label = f"observability_{name.strip('+')}_{run}"
            idle = start_up_cpu(ctx, f"{label}_idle", args, env)
            drain = drain_steps(ctx, label, TenStepsReporting if reporting else TenSteps, n, args, env, traced)
            steps = n * STEPS
            rates[name].append(drain.rate)
            commits[name].append(drain.commits)
            worker_us[name].append((drain.cpu.worker - idle.worker) / steps * 1e6)
            # The backends' start-up is not subtracted: a connection and a few queries, against 50,000 steps (and
            # an idle burst's backends live too briefly for the pool's sampler to be sure to see them).
            database_us[name].append(drain.cpu.database / steps * 1e6)
            start_up_ms[name].append(idle.worker / 2 * 1000)
        ctx.progress(f"  observability run {run + 1}: " + "; ".join(
            f"{name} {rates[name][-1]:,.0f} steps/s" + ratio_text(rates, name)
            + f", {commits[name][-1]:.3f} commits/step, CPU/step worker {worker_us[name][-1]:.0f} µs + "
            f"PostgreSQL {database_us[name][-1]:.0f} µs (start-up {start_up_ms[name][-1]:.0f} ms a worker)"
            for name in names))
    metrics = [Metric("8 observability", f"baseline: {n:,} procedures x {STEPS} steps, 2 workers x {t} threads, "
                      f"{WHAT['baseline']}", "steps/s", rates["baseline"])]
    for name in names[1:]:
        ratios = [a / b for a, b in zip(rates[name], rates["baseline"], strict=True)]
        target, meets = ("≥ 0.95", lambda v: v >= 0.95) if name in ("+progress", "+metrics") else ("", None)
        metrics.append(Metric("8 observability", f"{name}: {WHAT[name]}", "steps/s", rates[name]))
        metrics.append(Metric("8 observability", f"{name} / baseline throughput", "ratio", ratios, target, meets,
                              digits=3))
    for name in names:
        metrics.append(Metric("8 observability", f"CPU per step, worker processes, {name} (start-up subtracted)",
                              "µs", worker_us[name]))
        metrics.append(Metric("8 observability", f"CPU per step, PostgreSQL backends, {name}", "µs",
                              [v for v in database_us[name] if v == v]))
    for name in names[1:]:
        base = [w + d for w, d in zip(worker_us["baseline"], database_us["baseline"], strict=True)]
        mine = [w + d for w, d in zip(worker_us[name], database_us[name], strict=True)]
        metrics.append(Metric("8 observability", f"CPU per step, workers + PostgreSQL, baseline / {name} (paired "
                              "runs; what the ratio above would be on a machine that only ran this)", "ratio",
                              [b / m for b, m in zip(base, mine, strict=True) if _resolved(b) and _resolved(m)],
                              digits=3))
    costs = observer_costs()
    ctx.progress("  observability, in-process cost per step of a ten-step procedure: " + ", ".join(
        f"{name} {us:.1f} µs" for name, us in costs.items()))
    base = sorted(worker_us["baseline"])[len(worker_us["baseline"]) // 2]
    for name, us in costs.items():
        metrics.append(Metric("8 observability", f"{name}: what it adds to the baseline, timed alone in-process",
                              "µs per step", [us], digits=1))
        target, meets = ("≤ 5", lambda v: v <= 5) if name in ("+progress", "+metrics") else ("", None)
        metrics.append(Metric("8 observability", f"{name}: that, as a share of the baseline's worker CPU per step "
                              f"in this run ({base:.0f} µs)", "%", [us / base * 100] if _resolved(base) else [],
                              target, meets, digits=1))
    for name in names:
        metrics.append(Metric("8 observability", f"worker start-up CPU, {name} (a burst over an empty queue)",
                              "ms", start_up_ms[name]))
        metrics.append(Metric("8 observability", f"commits per step, {name} (whole worker life)", "commits",
                              commits[name], digits=3))
    return metrics


def observer_costs() -> dict[str, float]:
    """Microseconds per step of a ten-step procedure that each variant adds to the baseline in-process, timed alone.

    The calls a worker makes, on objects built as it builds them: ``+progress`` is one ``ctx.progress()``
    held back within its interval (what nine of a procedure's ten reports are; the one carried by the
    completion costs no statement), ``+metrics`` the ``WorkerMetrics`` observer's per-step call plus a
    tenth of its per-procedure calls, ``+otel`` the ``Tracing`` observer's likewise (spans to an SDK
    provider whose processor drops them). A drain's ratio varies by ±10 % with the machine; these do not
    depend on what else it runs, and beside the baseline's CPU per step they say what each addition costs.
    Cumulative, as the variants are: "+metrics" is progress and metrics.
    """
    import datetime as dt
    import logging
    import timeit
    import uuid
    from types import SimpleNamespace

    from django_procedures.runtime import metrics
    from django_procedures.runtime.progress import ProgressRecorder

    now = dt.datetime.now(dt.UTC)
    claim = SimpleNamespace(id=uuid.uuid4(), type_name="bench.TenSteps", run_at=now, queue="default", lease_token=1,
                            trace_context=None, step_name="s0", attempt=1)
    record = SimpleNamespace(name="s0", attempt=1, started_at=now, finished_at=now + dt.timedelta(milliseconds=2))
    running = SimpleNamespace(claim=claim)
    log = logging.LoggerAdapter(logging.getLogger("benchmarks"), {})
    recorder = ProgressRecorder(claim)
    recorder._written_at += 3600  # within its interval for the whole timing: held back, as between writes

    def timed(call: Any, number: int = 20_000) -> float:
        return min(timeit.repeat(call, number=number, repeat=5)) / number * 1e6

    worker_metrics = metrics.WorkerMetrics(lambda: 0)
    costs = {"+progress": timed(lambda: recorder.report(3, 10, "s3", log)),
             "+metrics": timed(lambda: worker_metrics.step_ended(claim, record, "done", None))
             + timed(lambda: (worker_metrics.claimed([claim]), worker_metrics.outcome(running, "completed"))) / STEPS}
    if tracing_available():
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

        from django_procedures.runtime.tracing import Tracing

        class Dropped(SpanExporter):
            def export(self, spans: Any) -> SpanExportResult:
                return SpanExportResult.SUCCESS

        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(Dropped()))
        tracing = Tracing(provider)

        def one_procedure() -> None:
            tracing.claim_started(running)
            for _ in range(STEPS):
                tracing.step_ended(claim, record, "done", None)
            tracing.outcome(running, "completed")

        costs["+otel"] = timed(one_procedure, 2_000) / STEPS
    total, cumulative = 0.0, {}
    for name, us in costs.items():  # each variant adds to the one before
        total += us
        cumulative[name] = total
    return cumulative


def ratio_text(rates: dict[str, list[float]], name: str) -> str:
    return "" if name == "baseline" else f" ({rates[name][-1] / rates['baseline'][-1]:.3f})"
