"""Installing SIGTERM/SIGINT handlers for the length of a worker's run."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Iterator
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
