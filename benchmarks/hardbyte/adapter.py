"""The long-running adapter process: producer, workers and sampler, as the harness's guide describes.

- Producer: ``BenchJob.submit_many`` (one INSERT per batch) of the rows the harness asks for, either
  ``ENQUEUE <n>`` tokens on stdin (``PRODUCER_PACING=harness``, the harness's default) or its own
  fixed-rate loop credited on real elapsed time (``PRODUCER_PACING=adapter``).
- Workers: ``manage.py procedures_worker`` subprocesses serving the adapter's queue, exactly what a
  deployment runs. They die with the adapter (``PR_SET_PDEATHSIG``), so a SIGKILL of the adapter by
  a chaos phase is a crash of the whole node; one that exits on its own is started again, counted in
  the ``worker_restarts`` sample (a process supervisor's job in a deployment).
- Sampler: every ``SAMPLE_EVERY_S`` on the wall-clock boundary, one database read (telemetry.py).

SIGTERM: stop producing, flush, stop the workers (SIGTERM, then SIGKILL), exit 0 within 5 s.
"""

from __future__ import annotations

import ctypes
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO
from urllib.parse import urlparse

ROOT = Path(__file__).resolve().parents[2]
SETTINGS = "benchmarks.hardbyte.settings"


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name, "")
    try:
        return int(float(raw)) if raw.strip() else default
    except ValueError:
        raise SystemExit(f"{name} must be a number; got {raw!r}") from None


@dataclass
class Config:
    """The harness's environment (CONTRIBUTING_ADAPTERS.md, "Env in"); defaults are the harness's."""

    database_url: str
    scenario: str = "long_horizon"
    producer_mode: str = "fixed"
    pacing: str = "adapter"
    rate: int = 800
    batch_max: int = 128
    batch_ms: int = 25
    target_depth: int = 1000
    worker_count: int = 32
    processes: int = 2
    payload_bytes: int = 256
    work_ms: int = 1
    sample_every_s: int = 5

    @classmethod
    def from_env(cls) -> Config:
        url = os.environ.get("DATABASE_URL", "")
        if not url.startswith(("postgres://", "postgresql://")):
            raise SystemExit(f"DATABASE_URL must be a postgres:// URL of the bench database; got {url!r}")
        return cls(
            database_url=url, scenario=os.environ.get("SCENARIO", "long_horizon"),
            producer_mode=os.environ.get("PRODUCER_MODE", "fixed"),
            pacing=os.environ.get("PRODUCER_PACING", "adapter"),
            rate=_env_int("PRODUCER_RATE", 800), batch_max=max(1, _env_int("PRODUCER_BATCH_MAX", 128)),
            batch_ms=max(1, _env_int("PRODUCER_BATCH_MS", 25)), target_depth=_env_int("TARGET_DEPTH", 1000),
            worker_count=max(1, _env_int("WORKER_COUNT", 32)),
            processes=max(1, _env_int("HARDBYTE_WORKER_PROCESSES", 2)),
            payload_bytes=max(0, _env_int("JOB_PAYLOAD_BYTES", 256)), work_ms=max(0, _env_int("JOB_WORK_MS", 1)),
            sample_every_s=max(1, _env_int("SAMPLE_EVERY_S", 5)))

    @property
    def db_name(self) -> str:
        return (urlparse(self.database_url).path or "/").lstrip("/") or "django_procedures_bench"


def log(message: str) -> None:
    print(f"[django-procedures] {message}", file=sys.stderr, flush=True)


@dataclass
class Counters:
    enqueued: int = 0
    enqueue_errors: int = 0
    worker_restarts: int = 0
    target_rate: float = 0.0
    depth: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


def enqueue(count: int, *, seq: int, work_ms: int, payload_bytes: int) -> int:
    """Submit ``count`` jobs in one INSERT (``submit_many``); returns how many were submitted."""
    from benchmarks.hardbyte.procedures import BenchJob

    pad = "x" * payload_bytes
    BenchJob.submit_many([{"seq": seq + i, "work_ms": work_ms, "pad": pad} for i in range(count)])
    return count


def _die_with_parent() -> None:
    """In the worker child: SIGKILL when the adapter dies, however it dies (Linux's PR_SET_PDEATHSIG)."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)
    except OSError:
        pass


class Workers:
    """The ``procedures_worker`` subprocesses, started again when one exits on its own."""

    def __init__(self, config: Config, counters: Counters) -> None:
        self.config, self.counters = config, counters
        self.procs: list[subprocess.Popen[bytes] | None] = [None] * config.processes
        self.stopping = threading.Event()

    def command(self, index: int) -> list[str]:
        per_process = max(1, self.config.worker_count // self.config.processes)
        from benchmarks.hardbyte.procedures import QUEUE
        from benchmarks.hardbyte.telemetry import instance_id

        return [sys.executable, str(ROOT / "manage.py"), "procedures_worker", "--queues", QUEUE,
                "--concurrency", str(per_process), "--shutdown-timeout", "3",
                "--worker-id", f"hardbyte-{instance_id()}-{index}"]

    def start(self, index: int) -> None:
        env = {**os.environ, "DJANGO_SETTINGS_MODULE": SETTINGS, "DATABASE_URL": self.config.database_url}
        # The workers' stdout is not telemetry: send it to our stderr (the harness's log).
        self.procs[index] = subprocess.Popen(self.command(index), cwd=ROOT, env=env, stdin=subprocess.DEVNULL,
                                             stdout=sys.stderr, preexec_fn=_die_with_parent)

    def supervise(self) -> None:
        for i in range(len(self.procs)):
            self.start(i)
        while not self.stopping.wait(0.5):
            for i, proc in enumerate(self.procs):
                if proc is not None and proc.poll() is not None and not self.stopping.is_set():
                    log(f"worker {i} exited with {proc.returncode}; starting it again")
                    with self.counters.lock:
                        self.counters.worker_restarts += 1
                    self.start(i)

    def stop(self, grace: float) -> None:
        self.stopping.set()
        live = [p for p in self.procs if p is not None and p.poll() is None]
        for proc in live:
            proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + grace
        for proc in live:
            try:
                proc.wait(timeout=max(0.05, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def read_tokens(stream: IO[str], tokens: queue.Queue[int | None]) -> None:
    """``ENQUEUE <n>`` lines from the harness's pacer; other lines are ignored. ``None`` marks EOF."""
    for line in stream:
        parts = line.split()
        if len(parts) == 2 and parts[0] == "ENQUEUE" and parts[1].isdigit() and int(parts[1]) > 0:
            tokens.put(int(parts[1]))
    tokens.put(None)


def produce(config: Config, counters: Counters, stop: threading.Event, tokens: queue.Queue[int | None] | None) -> None:
    """Submit what is asked, in batches of at most ``batch_max``; a failed batch is logged and counted."""
    from django.db import connection

    seq = 0
    credit, last = 0.0, time.monotonic()
    while not stop.is_set():
        if config.producer_mode == "depth-target":
            counters.target_rate = 0.0
            want = min(config.batch_max, config.target_depth - counters.depth)
            if want <= 0:
                stop.wait(0.05)
                continue
        elif tokens is not None:
            counters.target_rate = float(config.rate)
            try:
                token = tokens.get(timeout=0.5)
            except queue.Empty:
                continue
            if token is None:  # the harness closed our stdin: it is going away
                return
            want = token
        else:
            counters.target_rate = float(config.rate)
            stop.wait(max(0.0, config.batch_ms / 1000.0 - (time.monotonic() - last)))
            now = time.monotonic()
            credit += config.rate * (now - last)  # real elapsed time, not the nominal period
            last = now
            want = int(credit)
            if want < 1:
                continue
            credit -= want
        while want > 0 and not stop.is_set():
            n = min(want, config.batch_max)
            want -= n
            try:
                enqueue(n, seq=seq, work_ms=config.work_ms, payload_bytes=config.payload_bytes)
            except Exception as exc:  # the database restarting or our backend killed: count it, reconnect
                with counters.lock:
                    counters.enqueue_errors += n
                log(f"producer: {n} jobs not submitted ({type(exc).__name__}: {str(exc).strip()[:200]})")
                connection.close()
                stop.wait(0.1)
                continue
            seq += n
            with counters.lock:
                counters.enqueued += n


def sample(config: Config, counters: Counters, stop: threading.Event) -> None:
    """One batch of samples per ``SAMPLE_EVERY_S``, on the wall-clock boundary."""
    from django.db import connection

    from benchmarks.hardbyte import telemetry

    every = config.sample_every_s
    watermark = None
    last_enq, last_tick = 0, time.monotonic()
    while not stop.is_set():
        if stop.wait(every - (time.time() % every)):
            return
        reading = None
        try:
            reading = telemetry.read(watermark)
        except Exception as exc:
            log(f"sampler: database unreachable ({type(exc).__name__}); samples without it this tick")
            connection.close()
        now = time.monotonic()
        dt_s, last_tick = max(0.001, now - last_tick), now
        with counters.lock:
            enq, restarts, errors = counters.enqueued, counters.worker_restarts, counters.enqueue_errors
        rate = 0.0
        if reading is not None:
            counters.depth = reading.depth
            if watermark is not None:
                # Over the span actually counted: after an unreachable tick it covers both.
                rate = reading.completed / max(0.001, (reading.watermark - watermark).total_seconds())
            watermark = reading.watermark
        records = telemetry.samples(reading, completion_rate=rate, enqueue_rate=(enq - last_enq) / dt_s,
                                    target_rate=counters.target_rate, every_s=float(every),
                                    totals={"worker_restarts": restarts, "enqueue_errors": errors})
        last_enq = enq
        for record in records:
            telemetry.emit(record)


def setup(config: Config) -> None:
    """Django, and the schema through our own install path (``migrate``), under a lock for replicas."""
    os.environ["DATABASE_URL"] = config.database_url
    os.environ["DJANGO_SETTINGS_MODULE"] = SETTINGS
    import django
    from django.core.management import call_command
    from django.db import connection

    django.setup()
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_lock(31031)")
        try:
            call_command("migrate", verbosity=0, interactive=False)
        finally:
            cursor.execute("SELECT pg_advisory_unlock(31031)")
    connection.close()


def version() -> str:
    import django_procedures

    try:
        sha = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                             timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        sha = ""
    return f"{django_procedures.__version__}+{sha}" if sha else django_procedures.__version__


def main() -> int:
    config = Config.from_env()
    if config.scenario != "long_horizon":
        log(f"SCENARIO={config.scenario!r} is not supported; this adapter implements long_horizon only")
        return 2
    setup(config)
    from benchmarks.hardbyte import telemetry

    telemetry.emit(telemetry.descriptor(config.db_name, version()))
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    counters = Counters()
    workers = Workers(config, counters)
    tokens: queue.Queue[int | None] | None = None
    threads = [threading.Thread(target=workers.supervise, name="workers", daemon=True),
               threading.Thread(target=sample, args=(config, counters, stop), name="sampler", daemon=True)]
    if config.pacing == "harness" and config.producer_mode == "fixed":
        tokens = queue.Queue()
        threads.append(threading.Thread(target=read_tokens, args=(sys.stdin, tokens), name="stdin", daemon=True))
    threads.append(threading.Thread(target=produce, args=(config, counters, stop, tokens), name="producer",
                                    daemon=True))
    for thread in threads:
        thread.start()
    log(f"long_horizon: {config.processes} worker processes x {max(1, config.worker_count // config.processes)}"
        f" threads, pacing={config.pacing}, rate={config.rate}/s")
    while not stop.wait(0.5):
        pass
    log("SIGTERM: stopping")
    workers.stop(grace=3.5)
    return 0
