"""Procedures that misbehave the way foreign code can: BaseExceptions, unstorable outcomes, other databases.

Imported by ``testapp/procedures.py`` so workers register them.
"""

import asyncio
import ctypes
import os
import threading
import time
from pathlib import Path

from django.db import connections

from django_procedures import NonRetryable, Procedure, RetryPolicy, Status, step
from django_procedures.signals import procedure_started
from testproject.testapp.models import Effect

TWICE = RetryPolicy(max_attempts=2, initial_delay=0.0, backoff=1.0, jitter=0.0)

BASE_EXCEPTIONS = {
    "SystemExit": lambda: SystemExit(3),
    "KeyboardInterrupt": lambda: KeyboardInterrupt("pressed"),
    "GeneratorExit": lambda: GeneratorExit("closed"),
    "CancelledError": lambda: asyncio.CancelledError("cancelled"),
}


def _ran(ctx, name: str) -> None:
    """One Effect row per execution, committed at once (the steps below are not atomic)."""
    Effect.objects.create(procedure_id=ctx.procedure_id, step=name, attempt=ctx.attempt, worker_pid=os.getpid())


class RaisesBaseException(Procedure):
    """Raises ``BASE_EXCEPTIONS[state['raise']]`` on every attempt."""

    type_name = "testapp.RaisesBaseException"
    retry = TWICE

    @step(atomic=False)
    def panic(self, ctx):
        _ran(ctx, "panic")
        raise BASE_EXCEPTIONS[self.state["raise"]]()


class _Unprintable(Exception):
    def __str__(self):
        raise RuntimeError("__str__ itself fails")


def _deep(levels: int) -> dict:
    value: dict = {}
    for _ in range(levels):
        value = {"a": value}
    return value


class Unstorable(Procedure):
    """Leaves an outcome the database cannot take as it is, chosen by ``state['kind']``."""

    type_name = "testapp.Unstorable"
    retry = TWICE

    @step(atomic=False)
    def misbehave(self, ctx):
        _ran(ctx, "misbehave")
        kind = self.state["kind"]
        if kind == "nul_error":
            raise ValueError("bad\x00text")
        if kind == "surrogate_error":
            raise ValueError("half a pair: \ud800")
        if kind == "str_raises":
            raise _Unprintable()
        if kind == "deep_state":
            self.state["deep"] = _deep(5000)
        elif kind == "big_int":
            self.state["n"] = 10**5000
        elif kind == "surrogate_state":
            self.state["s"] = "\udc80"
        elif kind == "deep_output":
            return Status.done(output=_deep(5000))
        elif kind == "float":
            self.state["f"] = 1e300
            return Status.done(output={"f": 1.5e17, "small": 1e-7})
        return None


class SpawnsUnstorableChild(Procedure):
    type_name = "testapp.SpawnsUnstorableChild"
    retry = TWICE

    @step
    def spawn(self, ctx):
        return Status.suspended([Unstorable(state={"kind": "float", "n": 10**5000})])


def _kill_thread(target: threading.Thread) -> None:
    """Raise SystemExit in ``target`` asynchronously, again and again, until it is dead.

    No ``except`` can hold it: the next one arrives inside the handler. This is
    how a C extension or a library bug can kill the thread a step runs on.
    """
    while target.is_alive():
        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(target.ident), ctypes.py_object(SystemExit))
        time.sleep(0.0005)


class KillsItsThread(Procedure):
    """Kills the executor thread running it, once (``state['marker']`` records that it did)."""

    type_name = "testapp.KillsItsThread"
    retry = RetryPolicy(max_attempts=3, max_lost=3, initial_delay=0.0)

    @step(atomic=False)
    def once(self, ctx):
        marker = Path(self.state["marker"])
        if marker.exists():
            return Status.done(output={"thread": threading.current_thread().name})
        marker.write_text(str(os.getpid()))
        threading.Thread(target=_kill_thread, args=(threading.current_thread(),), daemon=True).start()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # pure Python, so the asynchronous exception lands here
            sum(range(100))
        raise NonRetryable("the thread survived")


class UsesOtherDatabase(Procedure):
    """Queries the ``other`` database alias (``OTHER_DATABASE_URL``), which fails as ``state['mode']`` says."""

    type_name = "testapp.UsesOtherDatabase"
    retry = RetryPolicy(max_attempts=3, initial_delay=0.2, backoff=2.0, jitter=0.0)

    @step(atomic=False)
    def report(self, ctx):
        _ran(ctx, "report")
        with connections["other"].cursor() as cursor:
            if self.state["mode"] == "terminate":  # the other database drops this connection
                cursor.execute("SELECT pg_terminate_backend(pg_backend_pid())")
            cursor.execute("SELECT 1")
        connections["other"].close()


class BlocksTheLoop(Procedure):
    """With ``TESTAPP_BLOCK_THE_LOOP`` set, its ``procedure_started`` receiver (below) blocks the worker's main
    loop until the file ``state['release']`` exists.

    The signal is sent after the claim commits, on the thread that claimed: the worker's main loop.
    A slow receiver there is how foreign code freezes the loop while the other threads (the heartbeat,
    the HTTP server) go on, which is what ``/healthz`` must notice.
    """

    type_name = "testapp.BlocksTheLoop"

    @step(atomic=False)
    def only(self, ctx):
        pass


def _block_the_loop(sender, procedure_id, type_name, **kwargs):
    if type_name != BlocksTheLoop.type_name:
        return
    from django_procedures.models import ProcedureRun

    release = Path(ProcedureRun.objects.get(id=procedure_id).state["release"])
    deadline = time.monotonic() + 300  # a test that forgot to release it still ends
    while not release.exists() and time.monotonic() < deadline:
        time.sleep(0.05)


# Only in the worker processes of the health test: elsewhere procedure_started keeps having no receiver (the
# claim path then schedules nothing after commit).
if os.environ.get("TESTAPP_BLOCK_THE_LOOP"):
    procedure_started.connect(_block_the_loop, dispatch_uid="testapp-block-the-loop")
