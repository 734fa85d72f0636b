"""The worker's event loop: claims of ``async def`` steps run there as Tasks, their database work on a few threads.

A claim on the loop is one ``asyncio`` Task that drives the executor's
generator (``runtime.executor.execution``): each stretch of synchronous work
between two awaits (reading the claim, the fenced checkpoint, the settle
point) runs on one of :class:`DatabaseThreads`, each with its own Django
connection, and the step's coroutine is awaited on the loop itself. A
thousand awaiting steps cost a thousand Tasks and a few connections, not a
thousand threads. The fencing, the settle point and the heartbeat's view of
the claim (``HeldClaims``) are those of a sync step's.

The step's coroutine is a Task of its own, so that a lost lease (the
heartbeat's ``Activity.lose``: cancelled, taken over, past ``max_run_time``)
cancels it at its next await, without cancelling the claim's Task, which
then settles the claim as a sync step's would be.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import queue
import threading
import time
from collections.abc import Callable, Generator
from typing import Any, Literal

from django.db import connection

from django_procedures.exceptions import NotActive
from django_procedures.procedure import registered
from django_procedures.runtime.awaiting import StepAwait
from django_procedures.runtime.executor import Outcome, RunningClaim, execution, record_crash
from django_procedures.runtime.loop_watch import LoopStall, LoopWatch
from django_procedures.runtime.progress import close_side_connection
from django_procedures.runtime.running import log_extra, trace_text

logger = logging.getLogger("django_procedures.worker")

_Step = tuple[Literal["yield", "return"], Any]


def _advance(gen: Generator[StepAwait, Any, Outcome], method: str, value: Any) -> _Step:
    """One stretch of the executor's generator, on a database thread (a future cannot carry ``StopIteration``)."""
    try:
        if method == "throw":
            return "yield", gen.throw(value)
        return "yield", gen.send(value)
    except StopIteration as finished:
        return "return", finished.value


class DatabaseThreads:
    """``size`` threads that run the loop's synchronous database work, each on its own Django connection."""

    def __init__(self, size: int) -> None:
        self._jobs: queue.SimpleQueue[tuple[concurrent.futures.Future[Any], Callable[..., Any], tuple[Any, ...]]
                                      | None] = queue.SimpleQueue()
        self._threads = [threading.Thread(target=self._serve, name=f"procedures-async-db-{i}", daemon=True)
                         for i in range(size)]

    def start(self) -> None:
        for t in self._threads:
            t.start()

    def _serve(self) -> None:
        try:
            while True:
                job = self._jobs.get()
                if job is None:
                    return
                future, fn, args = job
                if not future.set_running_or_notify_cancel():
                    continue
                try:
                    future.set_result(fn(*args))
                except BaseException as error:  # handed to the awaiting Task
                    future.set_exception(error)
        finally:
            close_side_connection()
            connection.close()

    async def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self._jobs.put((future, fn, args))
        return await asyncio.wrap_future(future)

    def stop(self, timeout: float) -> None:
        for _ in self._threads:
            self._jobs.put(None)
        deadline = time.monotonic() + timeout
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))


class AsyncLane:
    """The event loop thread of one worker process, running up to ``capacity`` claims' async steps at once.

    ``finished(running, outcome, seconds)`` is called on the loop thread as each claim ends.
    """

    def __init__(self, finished: Callable[[RunningClaim, Outcome, float], None], *, db_threads: int) -> None:
        self._finished = finished
        self.loop: asyncio.AbstractEventLoop = None  # type: ignore[assignment]  # made by start()
        self.db = DatabaseThreads(db_threads)
        self._thread = threading.Thread(target=self._run_loop, name="procedures-async-loop", daemon=True)
        self._claims: dict[asyncio.Task[Any], RunningClaim] = {}  # claim Tasks, touched on the loop thread only
        # Each claim's step Task while it awaits one, by ``id()`` of the claim (a RunningClaim is not hashable).
        self._steps: dict[int, tuple[RunningClaim, asyncio.Task[Any]]] = {}
        self._idle = threading.Event()
        self._idle.set()
        self.watch: LoopWatch | None = None

    def stall(self) -> LoopStall | None:
        """The loop's stall now (``LoopWatch.stall``), or None."""
        return self.watch.stall() if self.watch is not None else None

    # -- from the worker's threads ----------------------------------------------------------

    def start(self) -> None:
        """Make the loop (only now: a worker built and never run leaves no loop unclosed) and start the threads."""
        self.loop = asyncio.new_event_loop()
        self.watch = LoopWatch(self.loop, self._running_step)
        self.db.start()
        self._thread.start()
        self.watch.start()

    def submit(self, running: RunningClaim) -> None:
        """Run ``running`` on the loop (thread-safe)."""
        self._idle.clear()
        self.loop.call_soon_threadsafe(self._start, running)

    def wait_idle(self, timeout: float) -> bool:
        """Wait until no claim runs on the loop, at most ``timeout`` seconds; whether it is idle."""
        return self._idle.wait(max(0.0, timeout))

    def stop(self, timeout: float = 5.0) -> None:
        """Cancel what still runs (the worker settled it already), stop the loop and close the connections."""
        if self.watch is not None:
            self.watch.stop()
        if self._thread.is_alive():
            asyncio.run_coroutine_threadsafe(self._cancel_all(), self.loop)
            self._thread.join(timeout)
        self.db.stop(timeout)

    # -- on the loop thread -------------------------------------------------------------------

    def _run_loop(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_forever()
        finally:
            self.loop.run_until_complete(self.loop.shutdown_asyncgens())
            self.loop.close()

    async def _cancel_all(self) -> None:
        tasks = list(self._claims)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self.loop.stop()

    def _start(self, running: RunningClaim) -> None:
        task = self.loop.create_task(self._run(running), name=f"procedure {running.claim.id}")
        self._claims[task] = running
        running.activity.on_lost(lambda reason: self._cancel_soon(running))

    def _cancel_soon(self, running: RunningClaim) -> None:
        """On whichever thread found the lease gone: cancel the claim's step at its next await."""
        try:
            self.loop.call_soon_threadsafe(self._cancel_step, running)
        except RuntimeError:  # the loop closed: nothing runs any more
            pass

    def _cancel_step(self, running: RunningClaim) -> None:
        found = self._steps.get(id(running))
        if found is not None:
            found[1].cancel()

    def _running_step(self) -> str | None:
        """What runs on the loop now (the watchdog asks, from its thread, while the loop is stalled)."""
        task = asyncio.current_task(self.loop)
        for running, step in list(self._steps.values()):
            if step is task:
                spec = running.current
                return f"step {spec.name if spec else '?'} of {running.claim.type_name} (procedure {running.claim.id})"
        held = self._claims.get(task) if task is not None else None
        return f"{held.claim.type_name} (procedure {held.claim.id})" if held else None

    async def _run(self, running: RunningClaim) -> None:
        started = time.monotonic()
        outcome = Outcome.LOST
        try:
            outcome = await self._drive(running)
        except asyncio.CancelledError:
            raise  # the worker stops: it settled (released) the claim already
        except BaseException as error:  # a bug, or foreign code the executor did not contain
            logger.exception("procedure %s: the worker could not record its outcome; recording a failed attempt",
                             running.claim.id, extra=log_extra(running.claim))
            outcome = await self.db.run(record_crash, running, error, trace_text())
        finally:
            task = asyncio.current_task()
            self._claims.pop(task, None)  # type: ignore[arg-type]
            if not self._claims:
                self._idle.set()
            if not (task is not None and task.cancelling()):
                self._finished(running, outcome, time.monotonic() - started)

    async def _drive(self, running: RunningClaim) -> Outcome:
        gen = execution(running)
        kind, value = await self.db.run(_advance, gen, "send", None)
        while kind == "yield":
            try:
                result = await self._await_step(value, running)
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if task is not None and task.cancelling():
                    gen.close()
                    raise  # the claim's Task: the worker stops
                # The step's Task alone: its lease is gone (the heartbeat), so its result could not commit.
                error: BaseException = NotActive(running.activity.lost_reason or "the step was cancelled")
                kind, value = await self.db.run(_advance, gen, "throw", error)
            except BaseException as raised:
                kind, value = await self.db.run(_advance, gen, "throw", raised)
            else:
                kind, value = await self.db.run(_advance, gen, "send", result)
        return value

    async def _await_step(self, pending: StepAwait, running: RunningClaim) -> Any:
        if running.activity.lost_reason is not None:
            pending.close()
            raise NotActive(running.activity.lost_reason)
        step = self.loop.create_task(pending.run(), name=f"step {pending.spec.name} of {running.claim.id}")
        self._steps[id(running)] = (running, step)
        try:
            return await step
        finally:
            self._steps.pop(id(running), None)


#: Threads doing the event loop's database work (each holds a connection): at least this many,
ASYNC_DB_THREADS = 4
#: and one more per this many slots of ``--async-concurrency``,
SLOTS_PER_DB_THREAD = 64
#: up to this many. A thousand steps ending within a second are a thousand checkpoints, each its own commit:
#: on four threads they queued for two seconds behind each other (the 2-core reference machine, loaded), on
#: sixteen the commits overlap (PostgreSQL flushes them together) and the queue drains about half again faster.
ASYNC_DB_THREADS_MAX = 16


def database_threads(async_concurrency: int) -> int:
    """How many database threads a loop of ``async_concurrency`` slots gets (4 up to 16; see above)."""
    return max(ASYNC_DB_THREADS, min(ASYNC_DB_THREADS_MAX, async_concurrency // SLOTS_PER_DB_THREAD))


def is_async_type(type_name: str) -> bool:
    """Whether procedures of ``type_name`` run on the event loop: one of its steps (or ``execute``) is async."""
    return any(s.is_async for s in registered(type_name).steps)
