"""``manage.py procedures_demo``: submit the demo procedures, run a real worker, show what happened.

``make demo`` runs it on a fresh SQLite database. It starts
``manage.py procedures_worker --with-scheduler`` as a subprocess (its log goes to
a file, not to the screen), submits the three procedures of
``testproject/demo/procedures.py`` and registers a schedule that starts
``RefreshRates`` every second, which the worker ticks itself. Once the three
procedures have ended and the schedule has run three times, it pauses the
schedule, stops the worker with SIGTERM, and prints every procedure with the
``Step`` rows it left behind, then the schedule's runs and metrics. It exits
non-zero when something did not end as the demo expects, so ``make demo``
doubles as a smoke test.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import django
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db import connection, transaction

from django_procedures import RunStatus, pause_schedule, register_schedule
from django_procedures.models import Lease, ProcedureRun, Schedule, Step
from django_procedures.policy.ids import short_id  # what the admin shows: the random end of the id
from testproject.demo.procedures import ChargeInvoice, ProvisionTenant, RefreshRates, SyncToCRM

FINAL = [status for status in RunStatus if status.is_final]
SCHEDULE = "refresh-rates"
SCHEDULED_RUNS = 3
#: The demo worker's PROCEDURES['TICK_SECONDS'] (default 1 s): a pass four times a second, so runs start close to
#: their ticks.
TICK_SECONDS = 0.25


@dataclass(frozen=True)
class Expected:
    status: str
    attempts: int


class Command(BaseCommand):
    help = "Submit the demo procedures, run a worker until they finish, and print what happened."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--timeout", type=float, default=60.0,
                            help="Seconds to let the worker run before stopping it (default 60).")
        parser.add_argument("--log", default=str(Path(settings.BASE_DIR) / "var" / "demo-worker.log"),
                            help="Where the worker's log goes (default var/demo-worker.log).")

    def handle(self, *args: Any, **options: Any) -> None:
        # Long outputs and errors are clipped to the terminal (a narrow one wraps rather than hide the error).
        self.width = max(100, shutil.get_terminal_size().columns) if sys.stdout.isatty() else 120
        self.stdout.write(self.style.MIGRATE_HEADING(
            f"django-procedures demo · {self._database()} · Django {django.get_version()}"))

        log_path = Path(options["log"])
        started = time.monotonic()
        with self._worker(log_path, float(options["timeout"])) as worker:
            with transaction.atomic():  # submit() writes in the caller's transaction: the worker sees it at commit
                submitted = [
                    (ProvisionTenant.submit({"tenant": "acme"}), Expected("done", 1)),
                    (ChargeInvoice.submit({"invoice": "INV-1001", "amount_cents": 4900}), Expected("done", 2)),
                    (SyncToCRM.submit({"segment": "newsletter"}), Expected("failed", 3)),
                ]
            ids = [handle.id for handle, _ in submitted]
            worker.until(lambda: not ProcedureRun.objects.filter(id__in=ids).exclude(status__in=FINAL).exists(),
                         "the procedures to end")
            schedule, _ = register_schedule(SCHEDULE, RefreshRates, period=timedelta(seconds=1))  # due at once
            worker.until(lambda: ProcedureRun.objects.filter(schedule=schedule, status="done").count()
                         >= SCHEDULED_RUNS, f"the schedule to run {SCHEDULED_RUNS} times")
            pause_schedule(SCHEDULE, reason="the demo is over")
            worker.until(lambda: Schedule.objects.get(name=SCHEDULE).active_runs == 0, "the last scheduled run to end")
            returncode = worker.stop()
        self.stdout.write(f"Started a real worker and submitted {len(submitted)} procedures; once they had ended, "
                          "registered a schedule that")
        self.stdout.write(f"starts demo.RefreshRates every second, let it run {SCHEDULED_RUNS} times, paused it and "
                          "stopped the worker:")
        self.stdout.write(f"  $ python manage.py procedures_worker --with-scheduler   → SIGTERM after "
                          f"{time.monotonic() - started:.1f} s, exit {returncode}, log in {self._relative(log_path)}")

        problems = [] if returncode == 0 else [f"the worker exited with status {returncode}"]
        for handle, expected in submitted:
            problems += self._show(ProcedureRun.objects.get(id=handle.id), expected)
        problems += self._show_schedule(Schedule.objects.get(name=SCHEDULE))

        self.stdout.write("")
        if problems:
            tail = log_path.read_text(errors="replace").splitlines()[-15:] if log_path.exists() else []
            self.stderr.write("\n".join(["Last lines of the worker log:", *tail]))
            raise CommandError("the demo did not go as expected: " + "; ".join(problems))
        self.stdout.write(
            "Read back from the database: ProcedureRun (a row per procedure), Step (a row per step attempt, written\n"
            "in the transaction that ended it), Lease (a row per claim: the attempts) and Schedule (its metrics).\n"
            "'at' counts from the first claim: the gaps before each retry are the RetryPolicy's delays. A scheduled\n"
            "run's 'started' counts from its tick: the worker runs a scheduling pass every TICK_SECONDS (here "
            f"{TICK_SECONDS:g} s).")

    # -- running the worker ---------------------------------------------------------------

    def _worker(self, log_path: Path, timeout: float) -> _Worker:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        procedures = {**settings.PROCEDURES, "TICK_SECONDS": TICK_SECONDS}  # testproject/settings.py reads this
        env = {**os.environ, "DJANGO_SETTINGS_MODULE": settings.SETTINGS_MODULE, "PYTHONUNBUFFERED": "1",
               "PROCEDURES_JSON": json.dumps(procedures)}
        command = [sys.executable, str(Path(settings.BASE_DIR) / "manage.py"), "procedures_worker",
                   "--with-scheduler"]
        return _Worker(command, env, log_path, timeout)

    # -- printing -------------------------------------------------------------------------

    def _show(self, run: ProcedureRun, expected: Expected) -> list[str]:
        attempts = Lease.objects.filter(procedure=run).count()
        steps = list(Step.objects.filter(procedure=run).order_by("index", "attempt", "finished_at"))
        duration = _seconds(run.started_at, run.finished_at)
        style = {"done": self.style.SUCCESS, "failed": self.style.ERROR}.get(run.status, self.style.WARNING)

        self.stdout.write("")
        self.stdout.write(
            f"{self.style.MIGRATE_LABEL(f'{run.type_name:<20}')}  {short_id(run.id)}  {style(f'{run.status:<7}')}  "
            f"{attempts} attempt{'s' if attempts != 1 else ' '}  {'' if duration is None else f'{duration:.2f} s'}")
        if run.status == "done":
            self.stdout.write(self._clip(f"  output  {json.dumps(run.output)}"))
        elif run.error:
            retry = "an operator may retry it" if run.failure_can_retry else "not worth a manual retry"
            self.stdout.write(self._clip(f"  error   {run.error}"))
            self.stdout.write(f"          (failed in step {run.failed_step}; {retry})")

        rows = [("#", "step", "attempt", "status", "at", "took", "error")]
        for s in steps:
            rows.append((str(s.index), s.name, str(s.attempt), s.status,
                         _fmt_offset(_seconds(run.started_at, s.started_at)),
                         _fmt_duration(_seconds(s.started_at, s.finished_at)), s.error))
        widths = [max(len(r[i]) for r in rows) for i in range(6)]
        for n, row in enumerate(rows):
            cells = "  ".join(cell.ljust(widths[i]) if i in (1, 3) else cell.rjust(widths[i])
                              for i, cell in enumerate(row[:6]))
            line = self._clip(f"  {cells}  {row[6]}".rstrip())
            if n == 0:
                line = self.style.HTTP_INFO(line)
            elif row[3] == "failed":
                line = self.style.WARNING(line)
            self.stdout.write(line)

        problems = []
        if (run.status, attempts) != (expected.status, expected.attempts):
            problems.append(f"{run.type_name} ended {run.status} after {attempts} attempts; the demo expects "
                            f"{expected.status} after {expected.attempts}")
        return problems

    def _show_schedule(self, schedule: Schedule) -> list[str]:
        runs = list(ProcedureRun.objects.filter(schedule=schedule).order_by("tick_at"))
        cadence = f"{schedule.mode} every {schedule.period.total_seconds():g} s"
        self.stdout.write("")
        self.stdout.write(f"{self.style.MIGRATE_LABEL(f'{schedule.procedure:<20}')}  schedule {schedule.name!r}  "
                          f"{cadence}  ({'enabled' if schedule.enabled else 'paused: ' + schedule.disabled_reason})")
        snapshot = schedule.snapshot()
        keys = ("runs", "skips", "overlaps", "failures", "active_runs", "pending_runs", "last_drift_ms",
                "last_elapsed_ms", "max_elapsed_ms")
        self.stdout.write("  snapshot()  " + " ".join(f"{k}={snapshot[k]}" for k in keys[:6]))
        self.stdout.write("              " + " ".join(f"{k}={snapshot[k]}" for k in keys[6:]))
        rows = [("tick", "run", "status", "started", "took", "output")]
        first = runs[0].tick_at if runs else None
        for run in runs:
            rows.append((_fmt_offset(_seconds(first, run.tick_at)), short_id(run.id), run.status,
                         _fmt_offset(_seconds(run.tick_at, run.started_at)),
                         _fmt_duration(_seconds(run.started_at, run.finished_at)),
                         json.dumps(run.output) if run.output is not None else ""))
        widths = [max(len(r[i]) for r in rows) for i in range(5)]
        for n, row in enumerate(rows):
            cells = "  ".join(cell.ljust(widths[i]) if i in (1, 2) else cell.rjust(widths[i])
                              for i, cell in enumerate(row[:5]))
            line = self._clip(f"  {cells}  {row[5]}".rstrip())
            self.stdout.write(self.style.HTTP_INFO(line) if n == 0 else line)

        problems = []
        done = sum(run.status == "done" for run in runs)
        if done < SCHEDULED_RUNS or done != len(runs) or schedule.failures:
            problems.append(f"schedule {schedule.name!r} has {done} done runs of {len(runs)} and "
                            f"{schedule.failures} failures; the demo expects {SCHEDULED_RUNS} or more, all done")
        handled = (schedule.next_tick_at - first) // schedule.period if first and schedule.next_tick_at else 0
        if handled != len(runs) + len(schedule.pending_ticks) + schedule.skips:
            problems.append(f"schedule {schedule.name!r} handled {handled} ticks but has {len(runs)} runs, "
                            f"{len(schedule.pending_ticks)} pending and {schedule.skips} skips")
        return problems

    def _clip(self, text: str) -> str:
        return text if len(text) <= self.width else text[: self.width - 1] + "…"

    def _database(self) -> str:
        name = str(connection.settings_dict["NAME"])
        if connection.vendor == "sqlite":
            return f"SQLite {self._relative(Path(name))}"
        return f"{connection.display_name} {connection.settings_dict.get('HOST') or 'localhost'}/{name}"

    @staticmethod
    def _relative(path: Path) -> str:
        try:
            return str(path.resolve().relative_to(Path(settings.BASE_DIR).resolve()))
        except ValueError:
            return str(path)


def _seconds(start: datetime | None, end: datetime | None) -> float | None:
    if start is None or end is None:
        return None
    return (end - start).total_seconds()


def _fmt_offset(seconds: float | None) -> str:
    return "" if seconds is None else f"+{max(seconds, 0.0):.2f}s"


def _fmt_duration(seconds: float | None) -> str:
    return "" if seconds is None else f"{seconds:.2f}s"


class _Worker:
    """``procedures_worker`` as a subprocess with its log in a file; killed if the demo fails half-way."""

    def __init__(self, command: list[str], env: dict[str, str], log_path: Path, timeout: float) -> None:
        self.command, self.env, self.log_path = command, env, log_path
        self.deadline = time.monotonic() + timeout
        self.process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> _Worker:
        with self.log_path.open("w") as log:
            self.process = subprocess.Popen(self.command, stdout=log, stderr=subprocess.STDOUT, env=self.env,
                                            cwd=settings.BASE_DIR)
        self.until(lambda: " started: " in self.log_path.read_text(errors="replace"), "the worker to start")
        return self

    def until(self, done: Callable[[], bool], what: str) -> None:
        assert self.process is not None
        while not done():
            if self.process.poll() is not None:
                raise CommandError(f"the worker exited with status {self.process.returncode} while the demo waited "
                                   f"for {what}; see {self.log_path}")
            if time.monotonic() > self.deadline:
                raise CommandError(f"timed out waiting for {what}; see {self.log_path}")
            time.sleep(0.05)

    def stop(self) -> int:
        """SIGTERM: the worker stops claiming, lets running steps finish, and exits."""
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(30)
        except subprocess.TimeoutExpired:
            raise CommandError(f"the worker did not stop within 30 s of SIGTERM; see {self.log_path}") from None

    def __exit__(self, *exc_info: object) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()
