"""Running ``manage.py procedures`` in-process (``call_command``) or as a real subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from io import StringIO
from typing import Any

from django.core.management import call_command
from django.core.management.base import CommandError

from tests.runtime.processes import MANAGE, ROOT, worker_database_env


@dataclass
class Result:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)


def cli(*args: str) -> Result:
    """``call_command("procedures", *args)``: a refusal is exit 1; a usage error (``Error: ...``) stands for 2,
    which only a real command line can show (see :func:`shell`)."""
    out, err = StringIO(), StringIO()
    try:
        call_command("procedures", *args, stdout=out, stderr=err)
    except CommandError as error:
        code = 2 if str(error).startswith("Error: ") else error.returncode
        err.write(str(error) + "\n")
        return Result(code, out.getvalue(), err.getvalue())
    return Result(0, out.getvalue(), err.getvalue())


def shell(*args: str, stdin: Any = subprocess.DEVNULL, env: dict[str, str] | None = None) -> Result:
    """``python manage.py procedures *args`` in a subprocess on the test database."""
    database_env, settings = worker_database_env()
    environ = {**os.environ, **database_env, "DJANGO_SETTINGS_MODULE": "testproject.settings",
               "PROCEDURES_JSON": json.dumps(settings), **(env or {})}
    done = subprocess.run([sys.executable, str(MANAGE), "procedures", *args], cwd=ROOT, env=environ, stdin=stdin,
                          capture_output=True, text=True, timeout=120)
    return Result(done.returncode, done.stdout, done.stderr)
