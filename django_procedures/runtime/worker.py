"""The worker: claims due procedures, runs them on threads, keeps leases alive, stops gracefully."""

from __future__ import annotations

import functools
import logging
import queue
import threading
import time
from collections import Counter
from typing import Any

from django.db import close_old_connections, connection
from django.db.backends.signals import connection_created

from django_procedures import clock, registry
from django_procedures.exceptions import ProceduresNotMigrated
from django_procedures.policy.health import longest_sleep
from django_procedures.policy.loop_wake import LIMITED_POLL_SECONDS
from django_procedures.policy.worker_config import WorkerConfig
from django_procedures.policy.workers import StopReason, stop_reason
from django_procedures.runtime import observe, reporting, retention, tracing
from django_procedures.runtime.chores import Chore
from django_procedures.runtime.config import new_worker_id, resolve_config
from django_procedures.runtime.connections import (
    APPLICATION_NAME_PREFIX,
    application_name,
    configure_connection,
    name_connection,
)
from django_procedures.runtime.crew import Crew
from django_procedures.runtime.endings import Interrupted
from django_procedures.runtime.executor import Outcome, RunningClaim, execute, record_crash
from django_procedures.runtime.heartbeat import Duty, Heartbeat
from django_procedures.runtime.held import STAT, HeldClaims
from django_procedures.runtime.lane import AsyncLane, database_threads, is_async_type
from django_procedures.runtime.loop_claims import LoopClaims
from django_procedures.runtime.loop_watch import LoopStall
from django_procedures.runtime.outage import report_loop_error, watch
from django_procedures.runtime.progress import ProgressRecorder, close_side_connection
from django_procedures.runtime.running import error_text, log_extra, trace_text
from django_procedures.runtime.settle import settle
from django_procedures.runtime.shutdown import graceful_signals, join_until
from django_procedures.runtime.wakeup import Waker
from django_procedures.runtime.worker_health import worker_health
from django_procedures.runtime.worker_row import WorkerRow
from django_procedures.store import timers
from django_procedures.store.claim import claim
from django_procedures.store.due import due_times
from django_procedures.store.listening import listens
from django_procedures.store.maintenance import maintain
from django_procedures.store.schedules import sync_declared
from django_procedures.store.schema import is_missing_table
from django_procedures.store.ticks import next_tick_due, run_pass

logger = logging.getLogger("django_procedures.worker")

__all__ = ["APPLICATION_NAME_PREFIX", "WorkerConfig", "WorkerRuntime", "application_name", "new_worker_id",
           "resolve_config"]


class WorkerRuntime:
    """One worker process: a claiming main thread, ``concurrency`` executor threads and a heartbeat."""

    def __init__(self, config: WorkerConfig) -> None:
        self.config = config  # everything it reads of the settings and its options, resolved once
        self.id = config.worker_id or new_worker_id()
        self.types = registry.type_names()
        # A type with an async def step runs on the event loop (its sync steps too, on the loop's database
        # threads): the claim must know before it claims whether a thread or a slot of the loop is free.
        self.async_types = [t for t in self.types if is_async_type(t)]
        self.thread_types = [t for t in self.types if t not in self.async_types]
        self.stats: Counter[str] = Counter()
        # Reentrant: stop() takes it, and embedding code may call stop() from a thread that holds it.
        self._lock = threading.RLock()
        self._work: queue.SimpleQueue[RunningClaim | None] = queue.SimpleQueue()
        self._stopping = threading.Event()
        self.waker = Waker(listen=config.listen_notify and listens(),
                           queues=config.queues, poll_seconds=config.poll_seconds,
                           application_name=application_name(self.id, "listen"))
        self.row = WorkerRow(worker_id=self.id, queues=config.queues, concurrency=config.concurrency,
                             lease_seconds=config.lease_seconds, with_scheduler=config.with_scheduler)
        self._stop_reason: str | None = None  # the first reason given to stop(), or "burst"
        self._signalled: str | None = None  # the first SIGTERM/SIGINT, not yet acted on by the main loop
        self._wake_at: Any = None  # the first sleeper's wake time, read when idle
        self.loop_claims = LoopClaims(self.waker, config.poll_seconds)
        self.crew = Crew(config.concurrency, self._executor_loop)
        # The claims held, guarded by the same lock as the crew's threads.
        self.held = HeldClaims(self._lock, self.crew, self.stats, concurrency=config.concurrency,
                               prefetch=config.prefetch)
        self.heartbeat = self._heartbeat()
        # SQLite allows one writer: one database thread for the loop.
        self.lane = AsyncLane(self._loop_finished, db_threads=1 if connection.vendor == "sqlite" else
                              database_threads(config.async_concurrency)) if self.async_types else None
        # A heartbeat not started yet counts as alive (its age still counts); a dead one is replaced.
        self.health = worker_health(config.lease_seconds,
                                    heartbeat_alive=lambda: self.heartbeat.ident is None or self.heartbeat.is_alive(),
                                    loop_stall=self.loop_stall if self.lane is not None else None)

    @property
    def busy(self) -> int:
        """Claims held: running, or waiting for a thread (an abandoned step counts until its thread returns),
        and those on the event loop."""
        return self.held.total

    def loop_stall(self) -> LoopStall | None:
        """The event loop's stall now (an async step blocking it for over a second), or None (``/healthz``)."""
        return self.lane.stall() if self.lane is not None else None

    def _heartbeat(self) -> Heartbeat:
        """A heartbeat (again, should the last one die) that also renews the worker's row and writes progress."""
        return Heartbeat(self._in_flight, lease_seconds=self.config.lease_seconds,
                         renewal_timeout=self.config.renewal_timeout,
                         duties=[Duty("renew the worker's row", self._renew_row),
                                 Duty("write held-back progress", self._flush_progress)],
                         report=self._report)

    def _report(self, check: str) -> None:
        """For the heartbeat thread, which is built before the health object (and again when replaced)."""
        health = getattr(self, "health", None)
        if health is not None:
            health.report(check)

    def _renew_row(self) -> None:
        self.row.renew()
        if self.row.renewed_at:  # a round trip that succeeded, at most lease / 3 ago while the database answers
            self.health.report("database", at=self.row.renewed_at)

    # -- lifecycle ------------------------------------------------------------------------

    def run(self) -> int:
        configure = functools.partial(configure_connection, idle_timeout=self.config.idle_in_transaction_timeout,
                                      own_idle_timeout=self.config.own_idle_timeout)
        connection_created.connect(configure, weak=False, dispatch_uid=f"procedures-worker-{self.id}")
        name = functools.partial(name_connection, worker_id=self.id)
        connection_created.connect(name, weak=False, dispatch_uid=f"procedures-worker-name-{self.id}")
        logger.info("worker %s started: queues=%s concurrency=%d async=%s database=%s types=%d lease=%gs", self.id,
                    ",".join(self.config.queues) if self.config.queues else "*", self.config.concurrency,
                    self.config.async_concurrency if self.lane else "-", connection.vendor, len(self.types),
                    self.config.lease_seconds)
        self._tables_checked = reporting.tables_ready(self.id)
        reporting.report_unknown_types(self.id, self.types)
        reporting.report_schedules(self.id, sync_declared(), ticks=self.config.with_scheduler)
        # The handlers come before the registry row: a worker that shows as registered stops gracefully.
        with graceful_signals(self._on_signal):
            self.row.register()
            return self._run_registered()

    def _run_registered(self) -> int:
        traced = tracing.start()  # None unless the process uses OpenTelemetry
        self.crew.start()
        if self.lane is not None:
            self.lane.start()
        self.heartbeat.start()
        error = ""
        try:
            self._main_loop()
            self._shut_down()
        except BaseException as raised:
            error = error_text(raised)
            raise
        finally:
            tracing.stop(traced)
            if self.lane is not None:
                self.lane.stop()
            self.heartbeat.stop()
            self.row.stop(StopReason.ERROR if error else stop_reason(self._stop_reason or ""), error)
            self.waker.close()
            connection_created.disconnect(dispatch_uid=f"procedures-worker-{self.id}")
            connection_created.disconnect(dispatch_uid=f"procedures-worker-name-{self.id}")
            self._log_stats("stopped")
        return 0

    def _on_signal(self, name: str) -> None:
        """In the signal handler: note the signal and wake the main loop, which calls :meth:`stop`.

        A handler runs between two bytecodes of the main thread, which may hold any lock at that moment
        (an ``Event``'s is not reentrant: setting one here could wait for ever), so it takes none.
        """
        self._signalled = name
        self.waker.wake()

    def _should_stop(self) -> bool:
        """On the main thread: act on a signal noted by :meth:`_on_signal`; True once stopping."""
        if self._signalled is not None and not self._stopping.is_set():
            self.stop(self._signalled)
        return self._stopping.is_set()

    def stop(self, reason: str = "stop requested") -> None:
        """Stop claiming; running steps see ``ensure_active()`` raise at their next check."""
        if not self._stopping.is_set():
            self._stop_reason = self._stop_reason or reason
            logger.info("worker %s: %s; shutting down (a second signal exits at once)", self.id, reason)
        self._stopping.set()
        self.health.stopping()
        for r in self.snapshot():
            r.activity.stopping.set()
        self.waker.wake()

    def _flush_progress(self) -> None:
        """On the heartbeat thread: progress reports held back past their interval become visible."""
        for running in self.snapshot():
            running.progress.from_heartbeat()

    def busy_threads(self) -> int:
        """Executor threads running a procedure now (prefetched claims not counted)."""
        return self.held.busy_threads()

    def snapshot(self) -> list[RunningClaim]:
        """The claims held now."""
        return self.held.snapshot()

    def _in_flight(self) -> list[RunningClaim]:
        """The claims the heartbeat renews (``HeldClaims.in_flight``); wakes the main loop when a thread died."""
        held, replace = self.held.in_flight()
        if replace and not self._stopping.is_set():
            self.waker.wake()  # the main loop starts new threads
        return held

    def _replace_dead_threads(self) -> None:
        with self._lock:
            names = self.crew.replace_dead()
        for name in names:
            logger.error("worker %s: executor thread %s died; started a new one", self.id, name)
        if self.heartbeat.ident is not None and not self.heartbeat.is_alive():
            logger.error("worker %s: the heartbeat thread died; started a new one", self.id)
            self.heartbeat = self._heartbeat()
            self.heartbeat.start()

    # -- main thread ----------------------------------------------------------------------

    def _chores(self) -> list[Chore]:
        chores = [Chore("maintenance", self.config.sweep_seconds, maintain),
                  Chore("stats", self.config.stats_seconds, lambda: self._log_stats("stats"), first_run=False),
                  Chore("retention", retention.IDLE_SECONDS, retention.prune_pass),
                  Chore("activity", retention.COUNT_SECONDS, retention.count_finished)]
        if self.config.with_scheduler:
            chores.append(Chore("scheduler", self.config.tick_seconds, run_pass))
        return chores

    def _main_loop(self) -> None:
        chores = self._chores()
        backoff = 0.0
        longest = longest_sleep(self.config.lease_seconds)  # an idle loop still turns, and reports it
        while not self._should_stop():
            self.health.report("loop")
            self.health.running()
            try:
                self._replace_dead_threads()
                close_old_connections()
                if not self._tables_checked:  # the database was down at start-up
                    self._tables_checked = reporting.tables_ready(self.id)
                # SQLite: while our own step holds the write lock, a chore would only wait for it.
                for chore in () if self.held.hold_write_lock() else chores:
                    chore.run_if_due()
                self.held.give_back_stale()  # prefetched claims that waited too long for a thread
                self._wake_timers()
                with self._lock:
                    wanted = self.held.wanted() if self.thread_types else 0
                    slots = self._loop_slots()
                    awaiting = slots if slots > 0 and self.loop_claims.worth_claiming() else 0
                    next_chore = min(self.held.next_give_back(), *(chore.next_at for chore in chores))
                if slots > 0 and not awaiting:  # room on the loop, nothing new for it: claimed for again later
                    next_chore = min(next_chore, self.loop_claims.recheck_at)
                if wanted <= 0 and awaiting <= 0:  # enough in hand: sleep until a procedure finishes (it wakes us)
                    self.waker.wait(min(longest, max(0.0, next_chore - time.monotonic())))
                    continue
                backoff = 0.0
                # Fewer than wanted: no claim again at once (it would find nothing and compete with the step
                # just handed over); a NOTIFY or next_due wakes the loop.
                threads_short = wanted > 0 and self._claim(wanted) < wanted
                loop_short = awaiting > 0 and self._claim(awaiting, on_loop=True) < awaiting
                if not threads_short:
                    if loop_short:  # the threads' work is in hand: only the loop's next due time is wanted
                        times = due_times(type_names=self.async_types, queues=self.config.queues)
                        self._wake_at = times.wake_at
                        self.loop_claims.recheck(times.earliest)
                    continue
                times = due_times(type_names=self.types, queues=self.config.queues)
                self.health.report("database")
                self._wake_at, due = times.wake_at, times.earliest
                if loop_short:
                    self.loop_claims.recheck(due)
                if self.config.with_scheduler:  # a tick due soon starts work too
                    due = min((at for at in (due, next_tick_due()) if at is not None), default=None)
                if self.config.burst and not self.held.total and not self._due_soon(due) and not times.limited_ready:
                    logger.info("worker %s: nothing due within %gs; --burst exits", self.id,
                                self.config.burst_wait_seconds)
                    self._stop_reason = "burst"
                    return
                backoff = 0.0
                idle = self._idle_timeout(due, next_chore)
                self.waker.wait(min(longest, idle, LIMITED_POLL_SECONDS if times.limited_ready else idle))
            except ProceduresNotMigrated:
                raise  # no tables: nothing to wait for; the command says to migrate
            except Exception as error:  # database gone: reconnect with backoff, log once per outage
                if is_missing_table(error):
                    self._tables_checked = False  # ours dropped (or migrated backwards)? checked on the next pass
                report_loop_error(self.id, error, first=not backoff)
                connection.close()
                self.waker.close_connection()
                backoff = min(max(backoff * 2, 0.2), 10.0)
                self.waker.sleep(backoff)  # a signal (or stop()) cuts it short

    def _wake_timers(self) -> None:
        """Once the first sleeper's wake time read when idle has come, wake a batch of the sleepers due, then claim.

        A full batch leaves the wake time due, so the loop's next turn, after this one's claim, wakes the next:
        the threads of a burst of timers due at once start on its first batch, not after the whole of it.
        """
        if self._wake_at is not None and self._wake_at <= clock.now():
            if timers.wake_batch(batch=timers.BATCH) < timers.BATCH:
                self._wake_at = None

    def _claim(self, wanted: int, *, on_loop: bool = False) -> int:
        """Claim up to ``wanted`` procedures for the threads, or (``on_loop``) for the event loop."""
        claims = claim(self.id, type_names=self.async_types if on_loop else self.thread_types,
                       queues=self.config.queues, limit=wanted, lease_seconds=self.config.lease_seconds)
        watch.restored()
        self.health.report("database")
        observe.claimed(claims)
        if on_loop:
            self.loop_claims.claimed(len(claims), wanted)
        for c in claims:
            running = RunningClaim(c, progress=ProgressRecorder(c, side_connection=connection.vendor == "postgresql"),
                                   lease_seconds=self.config.lease_seconds, on_loop=on_loop)
            self.held.add(running)
            self.stats["claimed"] += 1
            if self.lane is not None and on_loop:
                observe.claim_started(running)
                self.lane.submit(running)
            else:
                self._work.put(running)
        return len(claims)

    def _loop_slots(self) -> int:
        """How many more the event loop takes now (none once stopping)."""
        if self.lane is None:
            return 0
        return self.config.async_concurrency - self.held.on_loop

    def _loop_finished(self, running: RunningClaim, outcome: Outcome, seconds: float) -> None:
        """On the event loop's thread, as a claim there ends."""
        self.stats[STAT[outcome]] += 1
        observe.outcome(running, outcome.value)
        if not self.held.finished(running, seconds) or self._stopping.is_set():
            return
        self.loop_claims.ended(running.claim, outcome, still_on_loop=self.held.on_loop)

    def _due_soon(self, due: Any) -> bool:
        return due is not None and (due - clock.now()).total_seconds() <= self.config.burst_wait_seconds

    def _idle_timeout(self, due: Any, next_chore: float) -> float:
        # min() of one float raises: the next chore is always a bound, the due time and the burst poll only if any.
        bounds = [next_chore - time.monotonic()]
        if due is not None:
            bounds.append((due - clock.now()).total_seconds())
        if self.config.burst:
            bounds.append(self.config.poll_seconds)
        return max(0.0, min(bounds))

    # -- executor threads -----------------------------------------------------------------

    def _executor_loop(self) -> None:
        try:
            while True:
                running = self._work.get()
                if running is None:
                    return
                with self._lock:
                    if running.given_back:
                        continue
                    running.taken_at = started = time.monotonic()
                    self.crew.take(running)
                observe.claim_started(running)
                try:
                    outcome = execute(running)
                except BaseException as error:  # a bug, or foreign code the executor did not contain
                    logger.exception("procedure %s: the worker could not record its outcome; recording a failed "
                                     "attempt", running.claim.id, extra=log_extra(running.claim))
                    outcome = record_crash(running, error, trace_text())
                self.stats[STAT[outcome]] += 1
                observe.outcome(running, outcome.value)
                with self._lock:
                    self.crew.done()
                    wanted = self.held.finished(running, time.monotonic() - started)
                if wanted:  # the main thread claims only then: waking it for less is wasted work
                    self.waker.wake()
        finally:
            close_side_connection()
            connection.close()

    # -- shutdown -------------------------------------------------------------------------

    def _shut_down(self) -> None:
        self.stop("finishing")
        threads = self.crew.threads
        for _ in threads:
            self._work.put(None)
        deadline = time.monotonic() + self.config.shutdown_timeout
        # Draining is the loop's work now: /healthz stays 200 meanwhile.
        join_until(threads, deadline, lambda: self.health.report("loop"))
        if self.lane is not None:  # its steps see stopping set too: they settle between steps, or finish
            self.lane.wait_idle(deadline - time.monotonic())
        for running in self._in_flight():  # a claim whose thread died is left to expire, never released
            self._abandon(running)

    def _abandon(self, running: RunningClaim) -> None:
        """Past the shutdown timeout: release the procedure, or park it inside a non-idempotent step that began
        (``policy.interruption``; the settle point logs which)."""
        outcome = settle(running, Interrupted("still running at the shutdown timeout"))
        if outcome is not Outcome.LOST:  # lost: it finished (or moved) in the meantime
            self.stats[STAT[outcome]] += 1

    # -- reporting ------------------------------------------------------------------------

    def _log_stats(self, label: str) -> None:
        reporting.log_stats(self.id, label, self.stats, self.types)

