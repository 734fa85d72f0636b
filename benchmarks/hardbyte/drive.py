"""Run the adapter natively, without Docker: a small stand-in for the harness's orchestrator.

The harness itself needs ``docker compose`` (its PostgreSQL, its chaos hooks) and
Docker images for every Python adapter; here neither is available, so this driver
does the same things with the same contract: it sets the adapter's environment,
writes ``ENQUEUE <n>`` tokens on its stdin at the offered rate, records its JSONL
samples by phase, and drives the chaos phases itself:

- ``pg-backend-kill(rate=R)``: R times a second, ``pg_terminate_backend`` every
  active or idle-in-transaction backend of the bench database (never another database).
- ``kill-worker`` / ``start-worker``: SIGKILL the adapter (its workers die with it), start it again.
- ``repeated-kill(period=S)``: both, every S seconds.
- ``postgres-restart``: fast shutdown of the server, started again half-way through the phase.
  Only with ``--pg throwaway`` (a server this driver initdb's in a temporary directory):
  the shared server on 5432 is never restarted.

After the last phase the adapter is stopped (SIGTERM), a ``procedures_worker --burst``
runs what it left, and the bench database is audited: every stored job finished once (one ``done`` step row), none lost.

    python -m benchmarks.hardbyte.drive --pg throwaway --scenario chaos_pg_backend_kill --out /tmp/hb
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from benchmarks.hardbyte.adapter import ROOT

SCENARIOS = {  # the harness's named scenarios (bench_harness/phases.py), durations as there
    "throughput": ["warmup=warmup:30s", "clean=clean:180s"],
    "chaos_pg_backend_kill": ["warmup=warmup:30s", "baseline=clean:60s", "kills=pg-backend-kill(rate=2):60s",
                              "recovery=clean:60s"],
    "chaos_postgres_restart": ["warmup=warmup:30s", "baseline=clean:60s", "restart=postgres-restart:60s",
                               "recovery=clean:60s"],
    "chaos_crash_recovery": ["warmup=warmup:30s", "baseline=clean:60s", "kill=kill-worker:60s",
                             "restart=start-worker:60s", "recovery=clean:60s"],
    "chaos_repeated_kills": ["warmup=warmup:30s", "baseline=clean:60s", "repeated=repeated-kill(period=20):120s",
                             "recovery=clean:60s"],
}
CHAOS = {"pg-backend-kill", "postgres-restart", "kill-worker", "start-worker", "repeated-kill"}


@dataclass
class Phase:
    label: str
    kind: str
    seconds: float
    params: dict[str, str] = field(default_factory=dict)

    @classmethod
    def parse(cls, spec: str) -> Phase:
        try:
            label, rest = spec.split("=", 1)
            kind, duration = rest.rsplit(":", 1)
            params: dict[str, str] = {}
            if "(" in kind:
                kind, raw = kind[:-1].split("(", 1)
                params = dict(kv.split("=", 1) for kv in raw.split(",") if kv)
            seconds = float(duration.rstrip("s"))
        except ValueError:
            raise SystemExit(f"bad --phase {spec!r}: write label=type[(k=v)]:SECONDSs, e.g. kills=pg-backend-kill"
                             "(rate=2):60s") from None
        if kind not in CHAOS | {"warmup", "clean"}:
            raise SystemExit(f"phase type {kind!r} is not driven here; use one of warmup, clean, {', '.join(CHAOS)}")
        return cls(label, kind, seconds, {k: v.rstrip("s") for k, v in params.items()})


class ThrowawayPostgres:
    """A PostgreSQL server of our own (initdb as the postgres user), so it can be restarted safely."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.dir = Path(tempfile.mkdtemp(prefix="hardbyte-pg-"))
        shutil.chown(self.dir, "postgres")
        self.data = self.dir / "data"

    def _as_postgres(self, *argv: str) -> None:
        subprocess.run(["runuser", "-u", "postgres", "--", *argv], check=True, capture_output=True, timeout=120)

    def init(self) -> None:
        self._as_postgres("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8")
        self.start()

    def start(self) -> None:
        self._as_postgres("pg_ctl", "-D", str(self.data), "-w", "-l", str(self.dir / "log"), "-o",
                          f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c max_connections=200", "start")

    def stop(self) -> None:
        self._as_postgres("pg_ctl", "-D", str(self.data), "-w", "-m", "fast", "stop")

    def destroy(self) -> None:
        try:
            self.stop()
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)

    def url(self, db: str) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{db}"


class Adapter:
    """The adapter process; its stdout records go to ``sink`` stamped with the current phase."""

    def __init__(self, argv: list[str], env: dict[str, str], sink: Recorder) -> None:
        self.argv, self.env, self.sink = argv, env, sink
        self.proc: subprocess.Popen[str] | None = None
        self.lock = threading.Lock()

    def start(self) -> None:
        proc = subprocess.Popen(self.argv, cwd=ROOT, env=self.env, text=True, stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=self.sink.log, start_new_session=True)
        with self.lock:
            self.proc = proc
        threading.Thread(target=self.sink.tail, args=(proc,), daemon=True).start()

    def write(self, line: str) -> None:
        with self.lock:
            proc = self.proc
        if proc is None or proc.poll() is not None or proc.stdin is None:
            return  # killed: tokens offered while it is down are lost, as in the harness
        try:
            proc.stdin.write(line)
            proc.stdin.flush()
        except (BrokenPipeError, ValueError, OSError):
            pass

    def kill(self) -> None:
        with self.lock:
            proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()

    def stop(self, grace: float = 10.0) -> int | None:
        with self.lock:
            proc, self.proc = self.proc, None
        if proc is None:
            return None
        proc.send_signal(signal.SIGTERM)
        try:
            return proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            return None


class Recorder:
    def __init__(self, out: Path) -> None:
        out.mkdir(parents=True, exist_ok=True)
        self.raw = (out / "raw.jsonl").open("a")
        self.log = (out / "adapter.log").open("a")
        self.phase = "-"
        self.records: list[dict[str, Any]] = []
        self.lock = threading.Lock()

    def tail(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            try:
                record = json.loads(line)
            except ValueError:
                continue
            record["phase"], record["recv"] = self.phase, time.time()
            with self.lock:
                self.records.append(record)
                self.raw.write(json.dumps(record) + "\n")
                self.raw.flush()


def pace(adapter: Adapter, rate: float, batch_max: int, batch_ms: int, stop: threading.Event) -> None:
    """``ENQUEUE <n>`` tokens: credit accrues on real elapsed time, paid out in tokens of at most batch_max."""
    credit, last = 0.0, time.monotonic()
    while not stop.wait(max(0.0, batch_ms / 1000.0 - (time.monotonic() - last))):
        now = time.monotonic()
        credit, last = credit + rate * (now - last), now
        while credit >= 1:
            n = min(int(credit), batch_max)
            adapter.write(f"ENQUEUE {n}\n")
            credit -= n


def kill_backends(admin_url: str, db: str, rate: float, stop: threading.Event, tally: dict[str, int]) -> None:
    sql = ("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()"
           " AND state IN ('active', 'idle in transaction')")
    while not stop.is_set():
        try:
            with psycopg.connect(admin_url, autocommit=True) as conn:
                while not stop.wait(1.0 / rate):
                    tally["kills"] = tally.get("kills", 0) + len(conn.execute(sql, [db]).fetchall())
        except psycopg.Error:
            stop.wait(0.5)


def run_phase(phase: Phase, adapter: Adapter, pg: ThrowawayPostgres | None, admin_url: str, db: str,
              events: list[dict[str, Any]]) -> None:
    stop = threading.Event()
    tally: dict[str, int] = {}
    begin = time.time()
    event: dict[str, Any] = {"phase": phase.label, "kind": phase.kind, "start": begin}
    if phase.kind == "pg-backend-kill":
        threading.Thread(target=kill_backends, args=(admin_url, db, float(phase.params.get("rate", 2)), stop, tally),
                         daemon=True).start()
        stop.wait(phase.seconds)
    elif phase.kind == "postgres-restart":
        if pg is None:
            raise SystemExit("postgres-restart needs --pg throwaway: the shared server is never restarted")
        pg.stop()
        stop.wait(max(1.0, phase.seconds / 2 - (time.time() - begin)))
        pg.start()
        event["disruption_end"] = time.time()
        stop.wait(max(0.0, phase.seconds - (time.time() - begin)))
    elif phase.kind == "kill-worker":
        adapter.kill()
        stop.wait(phase.seconds)
    elif phase.kind == "start-worker":
        adapter.start()
        event["disruption_end"] = time.time()
        stop.wait(phase.seconds)
    elif phase.kind == "repeated-kill":
        period = float(phase.params.get("period", 20))
        while time.time() - begin + period <= phase.seconds:
            stop.wait(period - 1.0)
            adapter.kill()
            stop.wait(1.0)
            adapter.start()
            tally["cycles"] = tally.get("cycles", 0) + 1
        stop.wait(max(0.0, phase.seconds - (time.time() - begin)))
    else:
        stop.wait(phase.seconds)
    stop.set()
    event.update(tally, end=time.time())
    event.setdefault("disruption_end", event["end"])
    events.append(event)


def drain(url: str, workers: int, timeout: float) -> bool:
    """After the adapter has stopped: ``procedures_worker --burst`` runs what it left, again after the
    leases of claims a killed or stopped worker still held have expired, so the audit sees every stored job
    finished (or not, which is then a finding)."""
    env = {**os.environ, "DATABASE_URL": url, "DJANGO_SETTINGS_MODULE": "benchmarks.hardbyte.settings"}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            subprocess.run([sys.executable, str(ROOT / "manage.py"), "procedures_worker", "--burst", "--queues",
                            "hardbyte", "--concurrency", str(workers)], cwd=ROOT, env=env, capture_output=True,
                           timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            return False
        with psycopg.connect(url, autocommit=True) as conn:
            left, wait = conn.execute(
                "SELECT count(*), extract(epoch FROM max(lease_expires_at) - clock_timestamp())"
                " FROM django_procedures_procedurerun WHERE type_name = 'hardbyte.Job' AND finished_at IS NULL"
            ).fetchone()
        if not left:
            return True
        time.sleep(min(max(1.0, float(wait or 0) + 1.0), max(0.0, deadline - time.monotonic())))
    return False


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def main(argv: list[str] | None = None) -> int:
    from benchmarks.hardbyte.report import audit, summarize

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenario", choices=sorted(SCENARIOS), help="a named scenario (the harness's phases)")
    parser.add_argument("--phase", action="append", default=[], help="label=type[(k=v)]:SECONDSs, repeatable")
    parser.add_argument("--pg", choices=["local", "throwaway"], default="local",
                        help="local: the server of --admin-url; throwaway: initdb one on --port (needed to restart)")
    parser.add_argument("--admin-url", default="postgres://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--port", type=int, default=15555)
    parser.add_argument("--db", default="django_procedures_bench", help="dropped and created again at start")
    parser.add_argument("--rate", type=float, default=600.0, help="offered jobs/s (fixed mode)")
    parser.add_argument("--depth-target", type=int, default=0, help="depth-target mode with this depth (throughput)")
    parser.add_argument("--workers", type=int, default=8, help="WORKER_COUNT (split over the worker processes)")
    parser.add_argument("--processes", type=int, default=2, help="HARDBYTE_WORKER_PROCESSES")
    parser.add_argument("--batch-max", type=int, default=128)
    parser.add_argument("--batch-ms", type=int, default=25)
    parser.add_argument("--sample-every", type=int, default=1)
    parser.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "hardbyte-runs")
    args = parser.parse_args(argv)
    specs = args.phase or SCENARIOS.get(args.scenario or "", [])
    if not specs:
        parser.error("give --scenario or at least one --phase")
    phases = [Phase.parse(s) for s in specs]
    out = args.out / f"{time.strftime('%Y%m%dT%H%M%S')}-{args.scenario or 'custom'}"

    pg = ThrowawayPostgres(args.port) if args.pg == "throwaway" else None
    if pg is not None:
        pg.init()
    admin_url = pg.url("postgres") if pg is not None else args.admin_url
    base = admin_url.rsplit("/", 1)[0]
    db_url = f"{base}/{args.db}"
    try:
        with psycopg.connect(admin_url, autocommit=True) as conn:  # the harness's preflight: a fresh database
            conn.execute(f'DROP DATABASE IF EXISTS "{args.db}" WITH (FORCE)')
            conn.execute(f'CREATE DATABASE "{args.db}"')
        recorder = Recorder(out)
        env = {**os.environ, "DATABASE_URL": db_url, "SCENARIO": "long_horizon",
               "PRODUCER_MODE": "depth-target" if args.depth_target else "fixed",
               "PRODUCER_PACING": "harness", "PRODUCER_RATE": str(int(args.rate)),
               "TARGET_DEPTH": str(args.depth_target or 1000), "PRODUCER_BATCH_MAX": str(args.batch_max),
               "PRODUCER_BATCH_MS": str(args.batch_ms), "WORKER_COUNT": str(args.workers),
               "HARDBYTE_WORKER_PROCESSES": str(args.processes), "JOB_PAYLOAD_BYTES": "256", "JOB_WORK_MS": "1",
               "SAMPLE_EVERY_S": str(args.sample_every), "BENCH_INSTANCE_ID": "0"}
        env.pop("DJANGO_SETTINGS_MODULE", None)
        adapter = Adapter([sys.executable, "-m", "benchmarks.hardbyte"], env, recorder)
        adapter.start()
        stop_pacer = threading.Event()
        if not args.depth_target:
            threading.Thread(target=pace, args=(adapter, args.rate, args.batch_max, args.batch_ms, stop_pacer),
                             daemon=True).start()
        events: list[dict[str, Any]] = []
        load_before = load_average()
        for phase in phases:
            recorder.phase = phase.label
            print(f"[drive] {phase.label} ({phase.kind}, {phase.seconds:g}s)", file=sys.stderr, flush=True)
            run_phase(phase, adapter, pg, admin_url, args.db, events)
        stop_pacer.set()
        recorder.phase = "stop"
        rc = adapter.stop()
        drained = drain(db_url, args.workers, 600.0)
        result = {"scenario": args.scenario, "phases": [p.__dict__ for p in phases], "rate": args.rate,
                  "depth_target": args.depth_target, "workers": args.workers, "processes": args.processes,
                  "pg": args.pg, "load_before": load_before, "load_after": load_average(), "cpus": os.cpu_count(),
                  "summary": summarize(recorder.records, events), "drained": drained,
                  "adapter_exit": rc, "audit": audit(db_url)}
        (out / "summary.json").write_text(json.dumps(result, indent=2, default=str))
        print(json.dumps(result, indent=2, default=str))
        print(f"[drive] wrote {out}", file=sys.stderr)
        return 0
    finally:
        if pg is not None:
            pg.destroy()


if __name__ == "__main__":
    raise SystemExit(main())
