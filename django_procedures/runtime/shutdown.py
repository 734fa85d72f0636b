"""Installing SIGTERM/SIGINT handlers for the length of a worker's run."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from types import FrameType

SIGNALS = (signal.SIGTERM, signal.SIGINT)


@contextmanager
def graceful_signals(on_first: Callable[[str], None]) -> Iterator[None]:
    """Call ``on_first(name)`` on the first SIGTERM/SIGINT; exit at once on the second.

    The previous handlers come back when the block ends.
    """
    received: list[int] = []

    def handle(signum: int, frame: FrameType | None) -> None:
        received.append(signum)
        if len(received) > 1:
            os.write(2, b"django_procedures: second signal, exiting now; leases left to expire\n")
            os._exit(128 + signum)
        on_first(signal.Signals(signum).name)

    previous = {sig: signal.signal(sig, handle) for sig in SIGNALS}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def join_until(threads: Iterable[threading.Thread], deadline: float, each_second: Callable[[], None]) -> None:
    """Join ``threads`` until they end or ``time.monotonic()`` passes ``deadline``, calling ``each_second()``
    at least once a second meanwhile (the worker's health check of its main loop)."""
    for t in threads:
        while t.is_alive() and (left := deadline - time.monotonic()) > 0:
            t.join(min(left, 1.0))
            each_second()
