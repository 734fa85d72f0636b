"""Real ``manage.py procedures_worker`` subprocesses for the benchmarks, sampled for memory and CPU while they run.

Workers are configured through ``PROCEDURES_JSON`` like the test suite's.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.harness import CLK_TCK, MANAGE, ROOT, WORKER_SETTINGS, BenchmarkError, Server


@dataclass
class Sample:
    rss_kb: int = 0
    hwm_kb: int = 0
    cpu: float = 0.0  # CPU seconds (user + system) so far


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time of process ``pid`` so far (``/proc/<pid>/stat`` utime + stime)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


@dataclass
class Worker:
    """One ``procedures_worker`` subprocess."""

    name: str
    popen: subprocess.Popen[bytes]
    log_path: Path
    started: float  # time.time() just before it was spawned
    last: Sample = field(default_factory=Sample)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def sample(self) -> Sample:
        """Resident and peak resident memory and CPU time, from ``/proc`` (the last good read is kept)."""
        try:
            text = Path(f"/proc/{self.pid}/status").read_text()
            cpu = cpu_seconds(self.pid)
        except (OSError, ValueError):
            return self.last
        values = {}
        for line in text.splitlines():
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                values[key] = int(rest.split()[0])
        if "VmRSS" in values:
            self.last = Sample(values["VmRSS"], values.get("VmHWM", values["VmRSS"]), cpu)
        return self.last

    def cpu_seconds(self) -> float:
        return cpu_seconds(self.pid)

    def stop(self, timeout: float = 30.0) -> int:
        if self.alive():
            self.popen.send_signal(signal.SIGTERM)
        try:
            return self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            return self.popen.wait()

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""


class Workers:
    """Worker subprocesses on one database, sampled for memory and CPU while they run; all stopped on exit.

    With ``server`` and ``dbname`` the CPU time of the PostgreSQL backends
    serving that database is sampled too (``/proc`` of the server processes,
    so only when PostgreSQL runs on this host and its processes are readable).
    """

    def __init__(self, url: str, log_dir: Path, *, profile: Path | None = None, server: Server | None = None,
                 dbname: str | None = None) -> None:
        self.url = url
        self.server = server
        self.dbname = dbname
        #: CPU seconds per PostgreSQL backend pid of ``dbname``, as last sampled.
        self.backend_cpu: dict[int, float] = {}
        self.log_dir = log_dir
        self.profile = profile
        self.started: list[Worker] = []
        self._profilers: list[subprocess.Popen[bytes]] = []
        self._stop = threading.Event()
        self._sampler = threading.Thread(target=self._sample_loop, daemon=True)

    def __enter__(self) -> Workers:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def start(self, count: int, *, concurrency: int, burst: bool, settings: dict[str, Any] | None = None,
              label: str = "w", args: Sequence[str] = (), env: dict[str, str] | None = None) -> list[Worker]:
        workers = [self._start_one(f"{label}{len(self.started) + 1}", concurrency, burst, settings, args, env)
                   for _ in range(count)]
        if not self._sampler.is_alive():
            self._sampler.start()
        return workers

    def _start_one(self, name: str, concurrency: int, burst: bool, settings: dict[str, Any] | None,
                   args: Sequence[str] = (), extra_env: dict[str, str] | None = None) -> Worker:
        env = dict(os.environ)
        env.update({
            "DATABASE_URL": self.url,
            "DJANGO_SETTINGS_MODULE": "benchmarks.settings",
            "PYTHONUNBUFFERED": "1",
            "PROCEDURES_JSON": json.dumps({**WORKER_SETTINGS, **(settings or {})}),
            "PROCEDURES_LOG": "INFO",
        })
        env.update(extra_env or {})  # last: the comparison with the peers names its own DJANGO_SETTINGS_MODULE
        command = [sys.executable, str(MANAGE), "procedures_worker", "--worker-id", name,
                   "--concurrency", str(concurrency)]
        if burst:
            command.append("--burst")
        command += list(args)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log_path = self.log_dir / f"worker-{name}-{int(time.time() * 1000)}.log"
        with open(log_path, "wb") as log:
            started = time.time()
            popen = subprocess.Popen(command, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=log,
                                     stderr=subprocess.STDOUT)
        worker = Worker(name, popen, log_path, started)
        self.started.append(worker)
        if self.profile is not None:
            self._attach_profiler(worker)
        return worker

    def _attach_profiler(self, worker: Worker) -> None:
        """py-spy samples the worker until it exits (all threads, including idle ones)."""
        self.profile.mkdir(parents=True, exist_ok=True)
        base = self.profile / f"{worker.name}-{worker.pid}"
        command = ["py-spy", "record", "--pid", str(worker.pid), "--rate", "250", "--threads", "--idle",
                   "--format", "raw", "--output", f"{base}.txt", "--nonblocking"]
        spy = Path(sys.executable).with_name("py-spy")
        if spy.exists():
            command[0] = str(spy)
        time.sleep(0.3)  # let it exec the interpreter before attaching
        self._profilers.append(subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))

    def _sample_loop(self) -> None:
        tick = 0
        while not self._stop.wait(0.1):
            for w in self.started:
                if w.alive():
                    w.sample()
            tick += 1
            if self.server is not None and tick % 3 == 0:
                self._sample_backends()

    def _sample_backends(self) -> None:
        try:
            pids = [row[0] for row in self.server.execute(
                "SELECT pid FROM pg_stat_activity WHERE datname = %s", [self.dbname])]
        except Exception:  # the database may be going away
            return
        for pid in pids:
            try:
                self.backend_cpu[pid] = cpu_seconds(pid)
            except (OSError, ValueError):
                pass

    def worker_cpu(self) -> float:
        """CPU seconds the workers used (as last sampled, at most 0.1 s before each exited)."""
        return sum(w.last.cpu for w in self.started)

    def database_cpu(self) -> float | None:
        """CPU seconds the PostgreSQL backends of the workers' database used (None: not measurable here)."""
        return sum(self.backend_cpu.values()) if self.backend_cpu else None

    def wait_exit(self, workers: Sequence[Worker], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        for w in workers:
            try:
                w.popen.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                raise BenchmarkError(f"worker {w.name} still running after {timeout:.0f}s\n{self.logs()}") from None
            if w.popen.returncode != 0:
                raise BenchmarkError(f"worker {w.name} exited with {w.popen.returncode}\n{w.log()[-3000:]}")

    def wait_idle(self, server: Server, dbname: str, count: int, timeout: float = 60.0) -> None:
        """Wait until ``count`` workers sit in LISTEN (started, nothing to do)."""
        deadline = time.monotonic() + timeout
        while server.listeners(dbname) < count:
            if time.monotonic() > deadline:
                raise BenchmarkError(f"workers did not become idle within {timeout:.0f}s\n{self.logs()}")
            for w in self.started:
                if not w.alive():
                    raise BenchmarkError(f"worker {w.name} exited early\n{w.log()[-3000:]}")
            time.sleep(0.05)

    def stop_all(self) -> None:
        for w in self.started:
            if w.alive():
                w.popen.send_signal(signal.SIGTERM)
        for w in self.started:
            w.stop()

    def logs(self) -> str:
        return "\n".join(f"--- {w.name} (pid {w.pid})\n{w.log()[-2000:]}" for w in self.started)

    def close(self) -> None:
        self.stop_all()
        self._stop.set()
        for p in self._profilers:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
