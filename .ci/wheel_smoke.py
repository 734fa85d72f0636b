"""Run from a clean virtualenv holding only the built wheel: a new project migrates and runs a procedure.

Writes a minimal project into a temporary directory (settings, one app with a
``procedures`` module), runs ``manage.py migrate`` and submits a procedure,
runs ``manage.py procedures_worker --burst`` as a real process, and checks
that the procedure ended ``done`` with its output. Exits non-zero otherwise.
"""

import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

SETTINGS = """
SECRET_KEY = "wheel-smoke"
USE_TZ = True
INSTALLED_APPS = ["django.contrib.contenttypes", "django.contrib.auth", "django_procedures", "smokeapp"]
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": "smoke.sqlite3"}}
"""

PROCEDURES = """
from django_procedures import Procedure, Status, step


class Greet(Procedure):
    type_name = "smoke.Greet"

    @step
    def compose(self, ctx):
        self.state["text"] = f"hello, {self.state['name']}"

    @step
    def finish(self, ctx):
        return Status.done(output={"text": self.state["text"], "attempt": ctx.attempt})
"""

MANAGE = """
import os
import sys

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "smoke_settings")
from django.core.management import execute_from_command_line

execute_from_command_line(sys.argv)
"""

SUBMIT = """
import django
django.setup()
from smokeapp.procedures import Greet
print(Greet.submit({"name": "wheel"}).id)
"""

CHECK = """
import sys
import django
django.setup()
import django_procedures
from django_procedures import get_handle
handle = get_handle(sys.argv[1])
assert handle.status == "done", (handle.status, handle.error)
assert handle.output == {"text": "hello, wheel", "attempt": 1}, handle.output
print(f"django-procedures {django_procedures.__version__} from {django_procedures.__file__}: {handle.id} done")
"""


def run(project: Path, *args: str) -> str:
    done = subprocess.run([sys.executable, *args], cwd=project, capture_output=True, text=True, timeout=300,
                          env={"DJANGO_SETTINGS_MODULE": "smoke_settings", "PATH": "/usr/bin:/bin"})
    if done.returncode:
        sys.exit(f"{' '.join(args)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}")
    return done.stdout.strip()


def main() -> None:
    import django_procedures

    source = Path(django_procedures.__file__).resolve()
    if "site-packages" not in source.parts:
        sys.exit(f"django_procedures comes from {source}, not from the installed wheel")
    with tempfile.TemporaryDirectory(prefix="wheel-smoke-") as tmp:
        project = Path(tmp)
        (project / "smokeapp").mkdir()
        (project / "smokeapp" / "__init__.py").write_text("")
        (project / "smokeapp" / "procedures.py").write_text(textwrap.dedent(PROCEDURES))
        (project / "smoke_settings.py").write_text(textwrap.dedent(SETTINGS))
        (project / "manage.py").write_text(textwrap.dedent(MANAGE))
        run(project, "manage.py", "migrate", "--verbosity", "0")
        procedure_id = run(project, "-c", SUBMIT)
        run(project, "manage.py", "procedures_worker", "--burst")
        print(run(project, "-c", CHECK, procedure_id))


if __name__ == "__main__":
    main()
