"""``manage.py procedures_demo``: submit the demo procedures, run a real worker, show what happened.

``make demo`` runs it on a fresh SQLite database. It submits the three
procedures of ``testproject/demo/procedures.py``, starts
``manage.py procedures_worker --burst`` as a subprocess (its log goes to a file,
not to the screen), waits for it to exit, and prints every procedure with the
``Step`` rows it left behind. It exits non-zero when a procedure did not end as
the demo expects, so ``make demo`` doubles as a smoke test.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import django
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db import connection, transaction

from django_procedures.models import Lease, ProcedureRun, Step
from testproject.demo.procedures import ChargeInvoice, ProvisionTenant, SyncToCRM


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

        with transaction.atomic():  # submit() writes in the caller's transaction; commit before the worker
            submitted = [
                (ProvisionTenant.submit({"tenant": "acme"}), Expected("done", 1)),
                (ChargeInvoice.submit({"invoice": "INV-1001", "amount_cents": 4900}), Expected("done", 2)),
                (SyncToCRM.submit({"segment": "newsletter"}), Expected("failed", 3)),
            ]
        log_path = Path(options["log"])
        self.stdout.write(f"Submitted {len(submitted)} procedures, then ran a real worker until they finished:")
        elapsed, returncode = self._run_worker(log_path, float(options["timeout"]))
        self.stdout.write(f"  $ python manage.py procedures_worker --burst   "
                          f"→ exit {returncode} after {elapsed:.1f} s, log in {self._relative(log_path)}")

        problems = [] if returncode == 0 else [f"the worker exited with status {returncode}"]
        for handle, expected in submitted:
            problems += self._show(ProcedureRun.objects.get(id=handle.id), expected)

        self.stdout.write("")
        if problems:
            tail = log_path.read_text(errors="replace").splitlines()[-15:] if log_path.exists() else []
            self.stderr.write("\n".join(["Last lines of the worker log:", *tail]))
            raise CommandError("the demo did not go as expected: " + "; ".join(problems))
        self.stdout.write(
            "Read back from the database: ProcedureRun (a row per procedure, with its state and output), Step\n"
            "(a row per step attempt, written in the transaction that ended it) and Lease (a row per claim: the\n"
            "attempts). 'at' counts from the first claim: the gaps before each retry are the RetryPolicy's delays.")

    # -- running the worker ---------------------------------------------------------------

    def _run_worker(self, log_path: Path, timeout: float) -> tuple[float, int]:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "DJANGO_SETTINGS_MODULE": settings.SETTINGS_MODULE, "PYTHONUNBUFFERED": "1"}
        command = [sys.executable, str(Path(settings.BASE_DIR) / "manage.py"), "procedures_worker", "--burst"]
        started = time.monotonic()
        with log_path.open("w") as log:
            worker = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env,
                                      cwd=settings.BASE_DIR)
            try:
                returncode = worker.wait(timeout)
            except subprocess.TimeoutExpired:
                worker.terminate()  # SIGTERM: the worker releases what it holds and exits
                try:
                    worker.wait(10)
                except subprocess.TimeoutExpired:
                    worker.kill()
                    worker.wait()
                raise CommandError(f"the worker was still running after {timeout:g} s; see {log_path}") from None
        return time.monotonic() - started, returncode

    # -- printing -------------------------------------------------------------------------

    def _show(self, run: ProcedureRun, expected: Expected) -> list[str]:
        attempts = Lease.objects.filter(procedure=run).count()
        steps = list(Step.objects.filter(procedure=run).order_by("index", "attempt", "finished_at"))
        duration = _seconds(run.started_at, run.finished_at)
        style = {"done": self.style.SUCCESS, "failed": self.style.ERROR}.get(run.status, self.style.WARNING)

        self.stdout.write("")
        self.stdout.write(
            f"{self.style.MIGRATE_LABEL(f'{run.type_name:<20}')}  {str(run.id)[:8]}  {style(f'{run.status:<7}')}  "
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
