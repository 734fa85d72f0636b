"""The executor threads of a worker: the claims handed to them, which claim each works on, a new thread for each
that dies."""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable

from django.db import connection

from django_procedures.runtime import observe
from django_procedures.runtime.executor import Outcome, execute, record_crash
from django_procedures.runtime.progress import close_side_connection
from django_procedures.runtime.running import RunningClaim, log_extra, trace_text

logger = logging.getLogger("django_procedures.worker")


class Crew:
    r"""``size`` executor threads running the claims :meth:`hand`\ ed to them; records which claim each one is
    working on, and reports each claim's end to ``finished(running, outcome, started)``, on its thread.

    A step cannot kill its thread (the executor contains whatever it raises),
    but a bug of the runtime, or foreign code that injects an exception
    asynchronously, still could. So a claim is in flight only while the thread
    that took it is alive and still on it (:meth:`working_on`): the heartbeat
    renews nothing else. :meth:`replace_dead` starts a new thread for each dead one.
    """

    def __init__(self, size: int, lock: threading.RLock,
                 finished: Callable[[RunningClaim, Outcome, float], None]) -> None:
        self._lock = lock  # the worker's: a claim given back and a thread taking it are decided under it
        self._finished = finished
        self._work: queue.SimpleQueue[RunningClaim | None] = queue.SimpleQueue()
        self._threads = [self._thread(i) for i in range(size)]
        self._on: dict[threading.Thread, RunningClaim] = {}

    def _thread(self, index: int) -> threading.Thread:
        return threading.Thread(target=self._run, name=f"procedures-exec-{index}", daemon=True)

    def hand(self, running: RunningClaim) -> None:
        """For the next free thread (a claim given back meanwhile is passed by)."""
        self._work.put(running)

    def finish(self) -> None:
        """Each thread returns once the claims handed before this are taken."""
        for _ in self._threads:
            self._work.put(None)

    def _run(self) -> None:
        try:
            while True:
                running = self._work.get()
                if running is None:
                    return
                with self._lock:
                    if running.given_back:
                        continue
                    running.taken_at = started = time.monotonic()
                    self.take(running)
                observe.claim_started(running)
                try:
                    outcome = execute(running)
                except BaseException as error:  # a bug, or foreign code the executor did not contain
                    logger.exception("procedure %s: the worker could not record its outcome; recording a failed "
                                     "attempt", running.claim.id, extra=log_extra(running.claim))
                    outcome = record_crash(running, error, trace_text())
                self._finished(running, outcome, started)
        finally:
            close_side_connection()
            connection.close()

    @property
    def threads(self) -> list[threading.Thread]:
        return list(self._threads)

    def start(self) -> None:
        for t in self._threads:
            t.start()

    def take(self, running: RunningClaim) -> None:
        """The calling thread starts on ``running`` (call under the worker's lock)."""
        me = threading.current_thread()
        running.owner = me
        self._on[me] = running

    def done(self) -> None:
        """The calling thread is done with its claim (call under the worker's lock)."""
        self._on.pop(threading.current_thread(), None)

    def working_on(self, running: RunningClaim) -> bool:
        """Whether ``running`` is in flight: unowned (waiting for a thread), or its thread is alive and on it."""
        owner = running.owner
        return owner is None or (owner.is_alive() and self._on.get(owner) is running)

    def any_dead(self) -> bool:
        return any(t.ident is not None and not t.is_alive() for t in self._threads)

    def replace_dead(self) -> list[str]:
        """Start a new thread in place of each started thread that died; returns the names replaced."""
        replaced = []
        for i, t in enumerate(self._threads):
            if t.ident is not None and not t.is_alive():
                self._on.pop(t, None)
                self._threads[i] = self._thread(i)
                self._threads[i].start()
                replaced.append(t.name)
        return replaced
