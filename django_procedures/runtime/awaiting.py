"""Awaiting an ``async def`` step: what the executor yields, and how it is awaited on the calling thread.

The executor (``runtime.executor.execution``) is a generator: it runs
everything synchronously (the claim's reads, the fenced checkpoint, the
settle point) and yields a :class:`StepAwait` where an ``async def`` step's
coroutine must be awaited, then is sent the step's return value or thrown
its exception. :func:`run_here` drives it on one thread (``execute()``,
``drain()``, an executor thread); a worker's event loop drives it with its
database work on a few threads instead (``runtime.lane``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Generator
from dataclasses import dataclass
from typing import Any, TypeVar

from asgiref.sync import async_to_sync

from django_procedures.procedure import StepSpec
from django_procedures.runtime.running import Outcome, RunningClaim

_T = TypeVar("_T")


@dataclass
class StepAwait:
    """An ``async def`` step's coroutine, to be awaited within the step's ``timeout``."""

    coroutine: Coroutine[Any, Any, Any]
    spec: StepSpec
    running: RunningClaim

    async def run(self) -> Any:
        """Await the step; past its timeout it is cancelled and a ``TimeoutError`` naming it raised instead."""
        if not asyncio.iscoroutine(self.coroutine):
            raise TypeError(f"step {self.spec.name} is an async def but returned {type(self.coroutine).__name__}")
        if self.spec.timeout is None:
            return await self.coroutine
        try:
            async with asyncio.timeout(self.spec.timeout) as within:
                return await self.coroutine
        except TimeoutError:
            if not within.expired():
                raise  # the step's own TimeoutError
            raise TimeoutError(f"step {self.spec.name} ran past its timeout of {self.spec.timeout}s; the "
                               "coroutine was cancelled") from None

    def close(self) -> None:
        self.coroutine.close()


#: What ``runtime.executor.execution`` returns: a generator of the steps to await, ending with the outcome.
Execution = Generator[StepAwait, Any, Outcome]


def run_here(execution: Generator[StepAwait, Any, _T]) -> _T:
    """Drive ``execution`` on this thread, awaiting each step with ``async_to_sync``.

    Django's async ORM inside the step runs its queries back on this thread
    (``sync_to_async`` is thread-sensitive), on this thread's connection: the
    transaction of a ``TestCase`` that calls ``drain()`` included.
    """
    try:
        pending = next(execution)
        while True:
            try:
                value = async_to_sync(pending.run)()
            except BaseException as error:
                pending = execution.throw(error)
            else:
                pending = execution.send(value)
    except StopIteration as finished:
        return finished.value


def no_await(execution: Generator[StepAwait, Any, _T]) -> _T:
    """Run a generator that yields nothing (an atomic group: never async)."""
    try:
        pending = next(execution)
    except StopIteration as finished:
        return finished.value
    pending.close()
    execution.close()
    raise AssertionError(f"step {pending.spec.name} is async inside an atomic group")  # class checks refuse it
