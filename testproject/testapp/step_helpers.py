"""What the test app's procedures share: the Effect row a step writes, and the pause a test steers by state."""

import os
import time
from pathlib import Path

from django_procedures import RetryPolicy
from testproject.testapp.models import Effect

#: How long a step waits for a file a test is to create, at most: a safety net against a hung test, far longer
#: than any test waits on a loaded machine before creating it.
GATE_TIMEOUT = 600.0

FAST_RETRY = RetryPolicy(max_attempts=3, initial_delay=0.0, backoff=1.0, jitter=0.0)


def _effect(ctx, name: str) -> None:
    Effect.objects.create(procedure_id=ctx.procedure_id, step=name, attempt=ctx.attempt, worker_pid=os.getpid())


def _pause(proc, ctx, name: str) -> None:
    marker = proc.state.get("marker")
    if marker:
        Path(f"{marker}.{name}").write_text(str(os.getpid()))
    seconds = proc.state.get("sleep", {}).get(name, 0)
    deadline = time.monotonic() + seconds
    gate = proc.state.get("until", {}).get(name)
    while time.monotonic() < deadline or (gate and not Path(gate).exists()):
        if proc.state.get("poll"):
            ctx.ensure_active()
        if gate and time.monotonic() > deadline + GATE_TIMEOUT:
            raise RuntimeError(f"{gate} never appeared")
        time.sleep(0.05)
