"""The worker: claims due procedures, runs them on threads, keeps leases alive, stops gracefully."""

from __future__ import annotations

import functools
import logging
import os
import queue
import socket
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from django.db import close_old_connections, connection
from django.db.backends.signals import connection_created

from django_procedures import clock, registry
from django_procedures.conf import conf
from django_procedures.exceptions import LeaseLost
from django_procedures.policy.prefetch import GIVE_BACK_SECONDS, Prefetch, stale, to_claim
from django_procedures.policy.retry import FailDecision
from django_procedures.runtime.executor import Outcome, RunningClaim, execute
from django_procedures.runtime.heartbeat import Heartbeat
from django_procedures.runtime.outage import watch
from django_procedures.runtime.running import log_extra
from django_procedures.runtime.shutdown import graceful_signals
from django_procedures.runtime.wakeup import Waker
from django_procedures.store import fence
from django_procedures.store.claim import claim, next_due, unknown_types
from django_procedures.store.db import is_conflict, is_disconnect
from django_procedures.store.maintenance import maintain
from django_procedures.store.schedules import sync_declared
from django_procedures.store.ticks import next_tick_due, tick

logger = logging.getLogger("django_procedures.worker")


@dataclass(frozen=True)
class WorkerOptions:
    queues: Sequence[str] | None = None
    concurrency: int = 1
    burst: bool = False
    lease_seconds: float = 30.0
    shutdown_timeout: float = 30.0
    worker_id: str = ""
    with_scheduler: bool = False


def new_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


class Worker:
    """One worker process: a claiming main thread, ``concurrency`` executor threads and a heartbeat."""

    def __init__(self, options: WorkerOptions) -> None:
        self.options = options
        self.id = options.worker_id or new_worker_id()
        self.types = registry.type_names()
        self.stats: Counter[str] = Counter()
        # Held claims by fencing token: a timed-out step's thread may still be busy with an old token
        # of a procedure this worker claimed again.
        self.running: dict[tuple[uuid.UUID, int], RunningClaim] = {}
        # Claims held: running, or waiting for a thread (prefetched). An abandoned step still counts until
        # its thread returns.
        self.busy = 0
        self.prefetch = Prefetch(limit=int(conf.PREFETCH))
        self._lock = threading.Lock()
        self._work: queue.SimpleQueue[RunningClaim | None] = queue.SimpleQueue()
        self._stopping = threading.Event()
        self.waker = Waker(listen=connection.vendor == "postgresql" and bool(conf.LISTEN_NOTIFY),
                           queues=options.queues, poll_seconds=float(conf.POLL_SECONDS),
                           application_name=application_name(self.id, "listen"))
        self.heartbeat = Heartbeat(self.snapshot, lease_seconds=options.lease_seconds,
                                   renewal_timeout=min(conf.renewal_timeout, options.lease_seconds * 2 / 3))

    # -- lifecycle ------------------------------------------------------------------------

    def run(self) -> int:
        idle_timeout = conf.IDLE_IN_TRANSACTION_TIMEOUT_SECONDS or 2 * self.options.lease_seconds
        configure = functools.partial(_configure_connection, idle_timeout=float(idle_timeout))
        connection_created.connect(configure, weak=False, dispatch_uid=f"procedures-worker-{self.id}")
        name = functools.partial(_name_connection, worker_id=self.id)
        connection_created.connect(name, weak=False, dispatch_uid=f"procedures-worker-name-{self.id}")
        threads = [threading.Thread(target=self._executor_loop, name=f"procedures-exec-{i}", daemon=True)
                   for i in range(self.options.concurrency)]
        logger.info("worker %s started: queues=%s concurrency=%d database=%s types=%d lease=%gs", self.id,
                    ",".join(self.options.queues) if self.options.queues else "*", self.options.concurrency,
                    connection.vendor, len(self.types), self.options.lease_seconds)
        self._report_unknown_types()
        created = sync_declared()
        if created:
            logger.info("worker %s: created schedules declared in code: %s", self.id, ", ".join(created))
        for t in threads:
            t.start()
        self.heartbeat.start()
        try:
            with graceful_signals(self.stop):
                self._main_loop()
                self._shut_down(threads)
        finally:
            self.heartbeat.stop()
            self.waker.close()
            connection_created.disconnect(dispatch_uid=f"procedures-worker-{self.id}")
            connection_created.disconnect(dispatch_uid=f"procedures-worker-name-{self.id}")
            self._log_stats("stopped")
        return 0

    def stop(self, reason: str = "stop requested") -> None:
        """Stop claiming; running steps see ``ensure_active()`` raise at their next check."""
        if not self._stopping.is_set():
            logger.info("worker %s: %s; shutting down (a second signal exits at once)", self.id, reason)
        self._stopping.set()
        for r in self.snapshot():
            r.activity.stopping.set()
        self.waker.wake()

    def snapshot(self) -> list[RunningClaim]:
        with self._lock:
            return list(self.running.values())

    # -- main thread ----------------------------------------------------------------------

    def _chores(self) -> list[_Chore]:
        chores = [_Chore("maintenance", float(conf.SWEEP_SECONDS), maintain),
                  _Chore("stats", float(conf.STATS_SECONDS), lambda: self._log_stats("stats"), first_run=False)]
        if self.options.with_scheduler:
            chores.append(_Chore("scheduler", float(conf.TICK_SECONDS), tick))
        return chores

    def _main_loop(self) -> None:
        chores = self._chores()
        backoff = 0.0
        while not self._stopping.is_set():
            try:
                close_old_connections()
                for chore in chores:
                    chore.run_if_due()
                self._give_back_stale()
                with self._lock:
                    wanted = self._wanted()
                    next_chore = min(self._next_give_back(), *(chore.next_at for chore in chores))
                if wanted <= 0:  # enough in hand: sleep until a procedure finishes (it wakes us)
                    self.waker.wait(max(0.0, next_chore - time.monotonic()))
                    continue
                if self._claim(wanted):
                    backoff = 0.0
                    continue
                due = next_due(type_names=self.types, queues=self.options.queues)
                if self.options.with_scheduler:  # a tick due soon starts work too
                    due = min((at for at in (due, next_tick_due()) if at is not None), default=None)
                if self.options.burst and not self.busy and not self._due_soon(due):
                    logger.info("worker %s: nothing due within %gs; --burst exits", self.id,
                                float(conf.BURST_WAIT_SECONDS))
                    return
                backoff = 0.0
                self.waker.wait(self._idle_timeout(due, next_chore))
            except Exception as error:  # database gone: reconnect with backoff, log once per outage
                if is_disconnect(error):
                    watch.lost(error, "worker loop")
                elif is_conflict(error):  # a deadlock victim: nothing is wrong with the database
                    logger.info("worker %s: %s; trying again", self.id, error)
                elif not backoff:
                    logger.warning("worker %s: database error, retrying with backoff: %s", self.id, error)
                connection.close()
                self.waker.close_connection()
                backoff = min(max(backoff * 2, 0.2), 10.0)
                self._stopping.wait(backoff)

    def _claim(self, wanted: int) -> int:
        claims = claim(self.id, type_names=self.types, queues=self.options.queues, limit=wanted,
                       lease_seconds=self.options.lease_seconds)
        watch.restored()
        for c in claims:
            running = RunningClaim(c)
            with self._lock:
                self.running[(c.id, c.lease_token)] = running
                self.busy += 1
            self.stats["claimed"] += 1
            self._work.put(running)
        return len(claims)

    # -- claiming ahead (policy.prefetch) ---------------------------------------------------

    def _wanted(self) -> int:
        """How many to claim now (under ``self._lock``)."""
        now = time.monotonic()
        running_for = max((now - r.taken_at for r in self.running.values() if r.taken_at is not None),
                          default=0.0)
        threads = self.options.concurrency
        return to_claim(self.busy, threads, self.prefetch.ahead(threads, running_for))

    def _next_give_back(self) -> float:
        """When the oldest prefetched claim goes stale (under ``self._lock``); infinity if none waits."""
        return min((r.claimed_at + GIVE_BACK_SECONDS for r in self.running.values() if r.taken_at is None),
                   default=float("inf"))

    def _give_back_stale(self) -> None:
        """Release prefetched claims that waited too long for a thread, so any worker can take them."""
        now = time.monotonic()
        with self._lock:
            stale_claims = [r for r in self.running.values() if r.taken_at is None and stale(now - r.claimed_at)]
            for r in stale_claims:
                r.given_back = True  # the thread that dequeues it skips it
                del self.running[(r.claim.id, r.claim.lease_token)]
                self.busy -= 1
        for r in stale_claims:
            try:
                fence.release(r.claim)
            except LeaseLost:  # cancelled or taken over while it waited: a claim that ended lost
                self.stats["lost"] += 1
                logger.info("procedure %s: stopped: lease token %s was taken over or cancelled before a thread took "
                            "it up", r.claim.id, r.claim.lease_token, extra=log_extra(r.claim))
                continue
            self.stats["given_back"] += 1
            logger.debug("procedure %s: waited %.2fs for a thread; given back", r.claim.id, now - r.claimed_at)

    def _due_soon(self, due: Any) -> bool:
        if due is None:
            return False
        return (due - clock.now()).total_seconds() <= float(conf.BURST_WAIT_SECONDS)

    def _idle_timeout(self, due: Any, next_chore: float) -> float:
        timeout = next_chore - time.monotonic()
        if due is not None:
            timeout = min(timeout, (due - clock.now()).total_seconds())
        if self.options.burst:
            timeout = min(timeout, float(conf.POLL_SECONDS))
        return max(0.0, timeout)

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
                try:
                    outcome = execute(running)
                except Exception:
                    logger.exception("procedure %s: the worker could not record its outcome; its lease will "
                                     "expire and another worker will resume it", running.claim.id)
                    connection.close()
                    outcome = Outcome.LOST
                self.stats[_STAT[outcome]] += 1
                with self._lock:
                    self.running.pop((running.claim.id, running.claim.lease_token), None)
                    self.busy -= 1
                    self.prefetch.observe(time.monotonic() - started)
                    wanted = self._wanted()
                if wanted:  # the main thread claims only then: waking it for less is wasted work
                    self.waker.wake()
        finally:
            connection.close()

    # -- shutdown -------------------------------------------------------------------------

    def _shut_down(self, threads: list[threading.Thread]) -> None:
        self.stop("finishing")
        for _ in threads:
            self._work.put(None)
        deadline = time.monotonic() + self.options.shutdown_timeout
        for t in threads:
            t.join(max(0.0, deadline - time.monotonic()))
        for running in self.snapshot():
            self._abandon(running)

    def _abandon(self, running: RunningClaim) -> None:
        """Past the shutdown timeout: release the procedure (or park it inside a non-idempotent step)."""
        spec = running.current
        try:
            if running.in_step and spec is not None and not spec.idempotent:
                fence.fail_attempt(running.claim, None, f"interrupted during non-idempotent step {spec.name}", "",
                                   FailDecision("interrupted", manual_retry=True))
                self.stats["failed"] += 1
            else:
                fence.release(running.claim)
                self.stats["released"] += 1
            logger.info("procedure %s: still running at the shutdown timeout; %s", running.claim.id,
                        "parked" if spec is not None and not spec.idempotent else "released")
        except LeaseLost:
            pass  # it finished (or moved) in the meantime

    # -- reporting ------------------------------------------------------------------------

    def _log_stats(self, label: str) -> None:
        s = self.stats
        unknown = ""
        try:
            waiting = unknown_types(self.types)
            if waiting:
                unknown = " unknown-types=" + ",".join(f"{k}:{v}" for k, v in waiting.items())
        except Exception:  # stats must never stop the worker
            pass
        logger.info("worker %s %s: claimed=%d succeeded=%d suspended=%d retried=%d failed=%d rolled_back=%d "
                    "released=%d given_back=%d lost=%d%s", self.id, label, s["claimed"], s["succeeded"], s["suspended"],
                    s["retried"], s["failed"], s["rolled_back"], s["released"], s["given_back"], s["lost"], unknown)

    def _report_unknown_types(self) -> None:
        try:
            waiting = unknown_types(self.types)
        except Exception as error:  # the database may be down at start-up: the main loop waits for it
            if is_disconnect(error):
                watch.lost(error, "start-up")
            else:
                logger.warning("worker %s: could not look for unknown types: %s", self.id, error)
            connection.close()
            return
        for type_name, count in waiting.items():
            logger.warning("%d ready procedures have the type %r, which this worker does not know; "
                           "they are left for a worker that does", count, type_name)


@dataclass
class _Chore:
    """Periodic work of the main thread (maintenance, stats, scheduling), run when due."""

    name: str
    interval: float
    run: Callable[[], object]
    first_run: bool = True
    next_at: float = 0.0

    def __post_init__(self) -> None:
        self.next_at = time.monotonic() if self.first_run else time.monotonic() + self.interval

    def run_if_due(self) -> None:
        if time.monotonic() >= self.next_at:
            self.run()
            # From the chore's end: a slow maintenance pass must not starve the claims.
            self.next_at = time.monotonic() + self.interval


_STAT = {Outcome.COMPLETED: "succeeded", Outcome.SUSPENDED: "suspended", Outcome.RETRIED: "retried",
         Outcome.FAILED: "failed", Outcome.ROLLED_BACK: "rolled_back", Outcome.RELEASED: "released",
         Outcome.LOST: "lost"}


def _configure_connection(sender: Any = None, *, connection: Any, idle_timeout: float, **kwargs: Any) -> None:
    """Worker connections cut a transaction left idle too long, so a frozen worker cannot hold rows for ever.

    They are also kept open: Django's default ``CONN_MAX_AGE = 0`` means "one
    connection per request", and a worker has no requests, so its main loop
    would otherwise reconnect on every pass (``close_old_connections``). A
    broken connection is still closed and replaced; a positive ``CONN_MAX_AGE``
    is still obeyed.
    """
    if connection.settings_dict.get("CONN_MAX_AGE") == 0:
        connection.close_at = None
    if connection.vendor != "postgresql":
        return
    timeout_ms = int(idle_timeout * 1000)
    with connection.cursor() as cursor:
        cursor.execute(f"SET idle_in_transaction_session_timeout = {timeout_ms}")


def _name_connection(sender: Any = None, *, connection: Any, worker_id: str, **kwargs: Any) -> None:
    """Worker connections are named (see :func:`application_name`) so ``pg_stat_activity`` tells them apart."""
    if connection.vendor != "postgresql":
        return
    with connection.cursor() as cursor:
        cursor.execute("SELECT set_config('application_name', %s, false)",
                       [application_name(worker_id, _thread_role())])


#: ``application_name`` of worker connections starts with this (then ``/<role>/<worker id>``).
APPLICATION_NAME_PREFIX = "procedures-worker"


def application_name(worker_id: str, role: str) -> str:
    """What ``pg_stat_activity`` shows for a worker's connection: role first, as PostgreSQL keeps 63 bytes."""
    return f"{APPLICATION_NAME_PREFIX}/{role}/{worker_id}"[:63]


def _thread_role() -> str:
    name = threading.current_thread().name
    if name == "MainThread":
        return "main"
    return name.removeprefix("procedures-")
