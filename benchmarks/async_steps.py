"""The async steps benchmark (docs/async.md, issue 29), measured, never asserted in tests:

- I/O: ``sizes.async_io`` procedures (1,000) whose one ``async def`` step awaits
  1 s of simulated I/O, drained by one worker process started with
  ``--concurrency 1 --async-concurrency <that many>``: the time from the first
  claim to the last finish (target ≤ 3 s), and the worker's peak RSS above a
  worker that drained one such procedure (target ≤ 100 MB);
- no-op: ``sizes.async_noops`` no-op async steps against as many no-op sync
  steps (non-atomic, the same writes; and the atomic one-step ``Noop``) on one
  worker with the same options: async / sync throughput (target ≥ 0.8).
"""

from __future__ import annotations

from benchmarks.common import Context, Metric, checkpoint, now, run_burst, submit

#: Seconds of simulated I/O each procedure of the I/O half awaits.
IO_SECONDS = 1.0
#: ``--async-concurrency`` of the no-op half (the default).
NOOP_ASYNC_CONCURRENCY = 100


def _drain(ctx: Context, label: str, cls: type, states: list[dict], args: list[str]) -> tuple[float, float, float]:
    """(procedures/s from the first claim, seconds from the first claim to the last finish, peak RSS MB) of one
    burst worker draining ``states`` of ``cls`` in a fresh database."""
    with ctx.databases.fresh(label) as db:
        since = now()
        submit(cls, states)
        checkpoint()
        run = run_burst(ctx, db, since, len(states), 1, args=args)
        span = run.last - run.first
        return len(states) / span if span > 0 else float("nan"), span, max(w.last.hwm_kb for w in run.started) / 1024


def async_steps(ctx: Context) -> list[Metric]:
    from benchmarks.procedures import AsyncNoop, AwaitsIO, Noop, SyncNoopNonAtomic

    n_io, n = ctx.sizes.async_io, ctx.sizes.async_noops
    io_args = ["--async-concurrency", str(max(n_io, 1))]
    noop_args = ["--async-concurrency", str(NOOP_ASYNC_CONCURRENCY)]
    spans, growth, ratio, ratio_atomic, async_rate, sync_rate = [], [], [], [], [], []
    for run in range(ctx.runs):
        # --concurrency 1 for the I/O half: run_burst starts workers with ctx.threads, so it is given here.
        _, _, base_mb = _drain(ctx, f"async_io_base_{run}", AwaitsIO, [{"seconds": IO_SECONDS}],
                               [*io_args, "--concurrency", "1"])
        _, span, peak_mb = _drain(ctx, f"async_io_{run}", AwaitsIO, [{"seconds": IO_SECONDS}] * n_io,
                                  [*io_args, "--concurrency", "1"])
        spans.append(span)
        growth.append(peak_mb - base_mb)
        rates = {}
        pair = [("async", AsyncNoop), ("sync", SyncNoopNonAtomic), ("atomic", Noop)]
        for name, cls in pair if run % 2 == 0 else pair[::-1]:  # alternate who gets the warmer machine
            rates[name], _, _ = _drain(ctx, f"async_noop_{name}_{run}", cls, [{}] * n, noop_args)
        async_rate.append(rates["async"])
        sync_rate.append(rates["sync"])
        ratio.append(rates["async"] / rates["sync"])
        ratio_atomic.append(rates["async"] / rates["atomic"])
        ctx.progress(f"  async run {run + 1}: {n_io:,} x {IO_SECONDS:g}s of awaited I/O in {span:.2f}s "
                     f"(peak RSS {peak_mb:.0f} MB, {peak_mb - base_mb:+.0f} MB over one); no-op "
                     f"{rates['async']:,.0f}/s async vs {rates['sync']:,.0f}/s sync non-atomic, "
                     f"{rates['atomic']:,.0f}/s sync atomic")
    t = ctx.threads
    return [
        Metric("13 async", f"{n_io:,} procedures each awaiting {IO_SECONDS:g}s, 1 worker --concurrency 1 "
               f"--async-concurrency {n_io} (first claim to last finish)", "s", spans, "≤ 3", lambda v: v <= 3,
               digits=2),
        Metric("13 async", "same, worker peak RSS over a worker that drained one", "MB", growth, "≤ 100",
               lambda v: v <= 100),
        Metric("13 async", f"{n:,} no-op async steps, 1 worker x {t} threads, --async-concurrency "
               f"{NOOP_ASYNC_CONCURRENCY} (from the first claim)", "procedures/s", async_rate),
        Metric("13 async", f"{n:,} no-op sync steps (atomic=False), same worker options", "procedures/s",
               sync_rate),
        Metric("13 async", "async / sync no-op throughput (non-atomic, paired runs)", "ratio", ratio, "≥ 0.8",
               lambda v: v >= 0.8, digits=2),
        Metric("13 async", "async / sync no-op throughput (against the atomic one-step Noop)", "ratio",
               ratio_atomic, digits=2),
    ]
