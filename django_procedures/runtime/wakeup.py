"""Waiting while idle: PostgreSQL LISTEN on its own connection, plus a self-pipe for local events."""

from __future__ import annotations

import logging
import os
import select
from collections.abc import Sequence
from typing import Any

from django_procedures.runtime.outage import watch
from django_procedures.store.listening import listen_params
from django_procedures.store.notify import CHANNEL

logger = logging.getLogger("django_procedures.worker")


class Waker:
    """``wait(timeout)`` returns early on a NOTIFY for one of ``queues``, or on ``wake()`` from any thread.

    Without LISTEN (SQLite, ``LISTEN_NOTIFY`` off, or a transaction pooler
    without ``LISTEN_DATABASE``) it waits at most ``poll_seconds``. After the
    listening connection breaks it reconnects on the next wait and the caller
    polls once (``wait`` returns ``True``).
    """

    def __init__(self, *, listen: bool, queues: Sequence[str] | None, poll_seconds: float,
                 application_name: str = "") -> None:
        self.listen = listen
        self.application_name = application_name
        self.queues = set(queues) if queues else None
        self.poll_seconds = poll_seconds
        self._read, self._write = os.pipe()
        os.set_blocking(self._read, False)
        os.set_blocking(self._write, False)
        self._conn: Any = None
        self._broken_logged = False
        # Woken by something from outside since take_news(): a notification for its queues, or the LISTEN
        # connection (re)opened or lost (anything may have been missed meanwhile). Not by wake().
        self._news = False

    def wake(self) -> None:
        try:
            os.write(self._write, b"x")
        except BlockingIOError:
            pass  # the pipe is full: a wake-up is already pending

    @property
    def wake_fd(self) -> int:
        return self._write

    def _connect(self) -> bool:
        """Open the LISTEN connection if needed; True when it was (re)opened."""
        if self._conn is not None:
            return False
        import psycopg

        # On LISTEN_DATABASE when the default alias goes through a transaction pooler (see store/listening.py).
        self._conn = psycopg.connect(**listen_params(self.application_name), autocommit=True)
        self._conn.execute(f"LISTEN {CHANNEL}")
        if self._broken_logged:
            watch.restored()
        self._broken_logged = False
        return True

    def wait(self, timeout: float) -> bool:
        """Sleep up to ``timeout`` seconds; True if woken by a notification, a reconnect, or ``wake()``."""
        fds = [self._read]
        if self.listen:
            try:
                if self._connect():
                    self._news = True
                    return True  # poll once after every (re)connect
            except Exception as error:
                self._lost(error)
                timeout = min(timeout, 1.0)
            else:
                fds.append(self._conn.pgconn.socket)
        else:
            timeout = min(timeout, self.poll_seconds)
        readable, _, _ = select.select(fds, [], [], max(0.0, timeout))
        woken = False
        if self._read in readable:
            self._drain_pipe()
            woken = True
        if self._conn is not None and len(fds) > 1 and fds[1] in readable and self._take_notifications():
            self._news = woken = True
        return woken

    def take_news(self) -> bool:
        """Whether a notification for its queues (or a reconnect of its LISTEN connection) came since the last
        call; never without LISTEN, where only polling finds new work."""
        news, self._news = self._news, False
        return news

    def sleep(self, timeout: float) -> None:
        """Sleep up to ``timeout`` seconds, or until ``wake()``; the database is not touched (it may be down)."""
        readable, _, _ = select.select([self._read], [], [], max(0.0, timeout))
        if readable:
            self._drain_pipe()

    def _take_notifications(self) -> bool:
        try:
            ours = False
            for note in self._conn.notifies(timeout=0):
                if self.queues is None or note.payload in self.queues:
                    ours = True
            if not ours:
                # Readable but nothing for us: a notification for other queues, or the server closing
                # the connection, which libpq only reports once the connection is used.
                self._conn.execute("SELECT 1")
            return ours
        except Exception as error:
            self._lost(error)
            return True

    def _lost(self, error: BaseException) -> None:
        watch.lost(error, "LISTEN connection")  # one warning per outage, with the worker's other connections
        self._broken_logged = True
        self._news = True
        self.close_connection()

    def _drain_pipe(self) -> None:
        try:
            while os.read(self._read, 512):
                pass
        except BlockingIOError:
            pass

    def close_connection(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except Exception:  # already broken
                pass
            self._conn = None

    def close(self) -> None:
        self.close_connection()
        os.close(self._read)
        os.close(self._write)
