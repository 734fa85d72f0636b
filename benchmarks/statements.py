"""Counting the statements a worker process sends, by kind (used by ``benchmarks.tree_profile``).

Installed in a worker when ``BENCH_STATEMENT_LOG`` names a directory: every
connection Django opens gets an execute wrapper, and the counts are written
to ``<dir>/<pid>.json`` when the process exits. The LISTEN and progress side
connections are psycopg connections of their own and are not counted; the
statements of ``store.db.bound_cursor`` (claim, checkpoint, completion) are, and
so are the ``(BEGIN)``/``(COMMIT)`` commands psycopg sends on any connection of
the process (a LISTEN connection's autocommit sends none).
"""

from __future__ import annotations

import atexit
import functools
import json
import os
import re
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

_counts: Counter[str] = Counter()
#: Seconds spent in each kind of statement (the round trip: the server's work and the wire), bound-cursor
#: statements and Django's alike; read in-process (``benchmarks.worker_profile``), not written to the dump.
_seconds: Counter[str] = Counter()
_lock = threading.Lock()

_IN_LIST = re.compile(r"IN \((?:%s(?:, )?)+\)")
_SPACE = re.compile(r"\s+")


@functools.lru_cache(maxsize=4096)
def fingerprint(sql: str) -> str:
    """The statement with its parameter lists folded, cut to a readable length (cached: a worker sends the same
    few statements over and over, and folding each again cost the profiled worker 3 % of its CPU)."""
    text = _SPACE.sub(" ", _IN_LIST.sub("IN (...)", sql)).strip()
    return text[:160]


def _wrapper(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
    started = time.perf_counter()
    try:
        return execute(sql, params, many, context)
    finally:
        _record(fingerprint(sql), time.perf_counter() - started)


def _record(kind: str, seconds: float) -> None:
    with _lock:
        _counts[kind] += 1
        _seconds[kind] += seconds


def install(directory: str) -> None:
    from django.db.backends.signals import connection_created

    def add(sender: Any, connection: Any, **kwargs: Any) -> None:
        if _wrapper not in connection.execute_wrappers:
            connection.execute_wrappers.append(_wrapper)

    connection_created.connect(add, weak=False, dispatch_uid="bench-statement-counter")

    # The hot statements (claim, checkpoint, completion) bind their parameters on a raw psycopg cursor.
    from django_procedures.store import db

    raw_execute = db._BoundCursor.execute

    def counted(self: Any, sql: str, params: Any) -> None:
        started = time.perf_counter()
        try:
            raw_execute(self, sql, params)
        finally:
            _record(fingerprint(sql), time.perf_counter() - started)

    db._BoundCursor.execute = counted  # type: ignore[method-assign]

    # psycopg sends BEGIN before a transaction's first statement and COMMIT/ROLLBACK at its end, each a round trip
    # of its own that no execute wrapper sees.
    import psycopg

    raw_command = psycopg.Connection._exec_command

    def command(self: Any, sql: Any, *args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return raw_command(self, sql, *args, **kwargs)
        finally:
            _record(f"({bytes(sql).decode().split()[0].upper()})", time.perf_counter() - started)

    psycopg.Connection._exec_command = command  # type: ignore[method-assign,assignment]

    def dump() -> None:
        Path(directory).mkdir(parents=True, exist_ok=True)
        with _lock:
            (Path(directory) / f"{os.getpid()}.json").write_text(json.dumps(dict(_counts)))

    atexit.register(dump)


def read(directory: Path) -> Counter[str]:
    """The counts of every worker that wrote into ``directory``, summed."""
    total: Counter[str] = Counter()
    for path in directory.glob("*.json"):
        total.update(json.loads(path.read_text()))
    return total
