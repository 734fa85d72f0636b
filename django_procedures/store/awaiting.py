"""LISTENing for one procedure's final transition: the connection ``ProcedureHandle.wait()`` waits on.

PostgreSQL only, with ``LISTEN_NOTIFY`` on (and a ``LISTEN_DATABASE`` behind a
transaction pooler, ``store.listening``). The connection is opened before the
waiter first reads the status, and the procedure is marked awaited only after
its LISTEN, so a final transition committed in between is heard. Where no
listener can be opened the waiter polls instead; a listener whose connection
breaks closes itself and says so, and the waiter polls from then on.
"""

from __future__ import annotations

import uuid
from typing import Any

from django_procedures.store.listening import listen_params, listens
from django_procedures.store.notify import finished_channel, mark_awaited


def finish_listen_params(procedure_id: uuid.UUID) -> tuple[dict[str, Any], str] | None:
    """Connection parameters and the LISTEN statement, or None where waiting must poll."""
    if not listens():  # also behind a transaction pooler without LISTEN_DATABASE: LISTEN cannot work there
        return None
    return listen_params(), f'LISTEN "{finished_channel(procedure_id)}"'


class FinishListener:
    """A connection of its own LISTENing for one procedure's final transition (see the module)."""

    def __init__(self, conn: Any) -> None:
        self._conn = conn

    @classmethod
    def open(cls, procedure_id: uuid.UUID) -> FinishListener | None:
        """LISTEN for ``procedure_id`` and mark it awaited; None when the caller must poll."""
        found = finish_listen_params(procedure_id)
        if found is None:
            return None
        import psycopg

        params, listen = found
        try:
            conn = psycopg.connect(**params, autocommit=True)
        except psycopg.Error:
            return None  # the waiting still works, by polling
        try:
            conn.execute(listen)
        except psycopg.Error:
            conn.close()
            return None
        mark_awaited(procedure_id)
        return cls(conn)

    def wait(self, timeout: float) -> bool:
        """Block until a notification or ``timeout`` seconds; False (and closed) when the connection broke."""
        try:
            for _ in self._conn.notifies(timeout=timeout, stop_after=1):
                pass
        except Exception:  # the connection broke: the caller polls from here on
            self.close()
            return False
        return True

    def close(self) -> None:
        try:
            self._conn.close()
        except Exception:  # already broken
            pass


class AsyncFinishListener:
    """``FinishListener`` on an async connection: waiting holds no thread."""

    def __init__(self, conn: Any) -> None:
        self._conn = conn

    @classmethod
    async def open(cls, procedure_id: uuid.UUID) -> AsyncFinishListener | None:
        found = finish_listen_params(procedure_id)  # reads settings and parameters only: no query
        if found is None:
            return None
        import psycopg
        from asgiref.sync import sync_to_async

        params, listen = found
        try:
            conn = await psycopg.AsyncConnection.connect(**params, autocommit=True)
        except psycopg.Error:
            return None
        try:
            await conn.execute(listen)
        except psycopg.Error:
            await conn.close()
            return None
        await sync_to_async(mark_awaited)(procedure_id)
        return cls(conn)

    async def wait(self, timeout: float) -> bool:
        try:
            async for _ in self._conn.notifies(timeout=timeout, stop_after=1):
                pass
        except Exception:  # the connection broke: the caller polls from here on
            await self.close()
            return False
        return True

    async def close(self) -> None:
        try:
            await self._conn.close()
        except Exception:  # already broken
            pass
