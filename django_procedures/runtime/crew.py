"""The executor threads of a worker: which claim each works on, and a new thread for each that dies."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from django_procedures.runtime.running import RunningClaim

logger = logging.getLogger("django_procedures.worker")


class Crew:
    """``size`` executor threads running ``target``; records which claim each one is working on.

    A step cannot kill its thread (the executor contains whatever it raises),
    but a bug of the runtime, or foreign code that injects an exception
    asynchronously, still could. So a claim is in flight only while the thread
    that took it is alive and still on it (:meth:`working_on`): the heartbeat
    renews nothing else. :meth:`replace_dead` starts a new thread for each dead one.
    """

    def __init__(self, size: int, target: Callable[[], None]) -> None:
        self._target = target
        self._threads = [self._thread(i) for i in range(size)]
        self._on: dict[threading.Thread, RunningClaim] = {}

    def _thread(self, index: int) -> threading.Thread:
        return threading.Thread(target=self._target, name=f"procedures-exec-{index}", daemon=True)

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
