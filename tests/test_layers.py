"""Imports flow one way: policy -> models -> store -> runtime; nothing in the core imports Celery."""

import ast
import re
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "django_procedures"
STDLIB = sys.stdlib_module_names


def imports_of(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)  # a submodule imported by name
    return found


def files(*parts):
    base = PACKAGE.joinpath(*parts)
    return [base] if base.is_file() else sorted(base.rglob("*.py"))


@pytest.mark.parametrize("path", files("policy"), ids=lambda p: p.name)
def test_policy_is_standard_library_only(path):
    outside = {name for name in imports_of(path) if name.split(".")[0] not in STDLIB
               and not name.startswith("django_procedures.policy")}
    assert outside == set()


FORBIDDEN = {
    # Models know nothing of the registry or the user-facing classes, not even inside a function.
    "models": ("django_procedures.store", "django_procedures.runtime", "django_procedures.admin",
               "django_procedures.registry", "django_procedures.procedure", "django_procedures.handle"),
    "store": ("django_procedures.runtime", "django_procedures.admin"),
    "runtime": ("django_procedures.admin", "django.contrib.admin"),
    # The operator CLI calls the store and reads models: the admin's logic it shares lives below both.
    "cli": ("django_procedures.admin", "django.contrib.admin", "django_procedures.runtime"),
}


@pytest.mark.parametrize(("layer", "path"), [(layer, p) for layer in FORBIDDEN for p in files(layer)],
                         ids=lambda v: v.name if isinstance(v, Path) else v)
def test_layers_import_downwards(layer, path):
    bad = {name for name in imports_of(path) if name.startswith(FORBIDDEN[layer])}
    assert bad == set()


@pytest.mark.parametrize("path", [p for p in PACKAGE.rglob("*.py") if "contrib" not in p.parts],
                         ids=lambda p: str(p.relative_to(PACKAGE)))
def test_core_never_imports_celery(path):
    assert not {n for n in imports_of(path) if n.split(".")[0] in ("celery", "django_celery_beat")}


@pytest.mark.parametrize("path", [p for p in PACKAGE.rglob("*.py") if "contrib" not in p.parts
                                  and p.name != "metrics.py"], ids=lambda p: str(p.relative_to(PACKAGE)))
def test_core_never_imports_prometheus_client(path):
    """Only runtime/metrics.py (loaded for --metrics-port) and contrib/prometheus import it."""
    assert not {n for n in imports_of(path) if n.split(".")[0] == "prometheus_client"}


def test_the_core_and_the_worker_command_import_without_prometheus_client():
    import subprocess

    code = (
        "import sys, pkgutil, importlib; sys.modules['prometheus_client'] = None\n"
        "import django; django.setup()\n"
        "import django_procedures\n"
        "skip = ('django_procedures.contrib', 'django_procedures.migrations')\n"
        "for m in pkgutil.walk_packages(django_procedures.__path__, 'django_procedures.'):\n"
        "    if not m.name.startswith(skip) and m.name != 'django_procedures.runtime.metrics':\n"
        "        importlib.import_module(m.name)\n"
        "from django_procedures.runtime import metrics\n"
        "try:\n"
        "    metrics.require_client()\n"
        "except metrics.MetricsUnavailable as e:\n"
        "    print(e)\n"
    )
    env = {**__import__("os").environ, "DJANGO_SETTINGS_MODULE": "testproject.settings"}
    done = subprocess.run([sys.executable, "-c", code], cwd=PACKAGE.parent, env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "pip install 'django-procedures[prometheus]'" in done.stdout


@pytest.mark.parametrize("path", list(PACKAGE.rglob("*.py")), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_opentelemetry_is_imported_only_inside_functions(path):
    """Importing any module of the package never imports OpenTelemetry (runtime/tracing.py, trace_context.py)."""
    tree = ast.parse(path.read_text())
    in_functions = {id(inner) for outer in ast.walk(tree) if isinstance(outer, ast.FunctionDef | ast.AsyncFunctionDef)
                    for inner in ast.walk(outer)}
    at_import = [node for node in ast.walk(tree)
                 if isinstance(node, ast.Import | ast.ImportFrom) and id(node) not in in_functions]
    assert not {n for node in at_import for n in imports_of_node(node) if n.split(".")[0] == "opentelemetry"}


def imports_of_node(node: ast.Import | ast.ImportFrom) -> set[str]:
    if isinstance(node, ast.Import):
        return {alias.name for alias in node.names}
    return {node.module} if node.module and node.level == 0 else set()


def test_handles_leave_database_connections_to_the_store():
    """Issue 32: ``handle.py`` waits through ``store.awaiting``; opening and LISTENing on a connection is the
    store's (psycopg, the LISTEN statement and the channel names live there)."""
    text = (PACKAGE / "handle.py").read_text()
    assert not {n for n in imports_of(PACKAGE / "handle.py") if n.split(".")[0] == "psycopg"}
    assert "LISTEN" not in text.replace("LISTEN_NOTIFY", "").replace("LISTEN_DATABASE", "")
    assert "django_procedures.store.awaiting" in imports_of(PACKAGE / "handle.py")


#: Class names that may repeat: Django's name for a management command, and a tree's member as the timeline
#: draws it and as a retry plans it (one thing seen from two layers).
SHARED_CLASS_NAMES = {"Command", "Member"}


def test_a_class_name_means_one_thing_across_the_package():
    """Issue 32: the admin's bulk-action result was an ``Outcome`` beside the claim's ``runtime.running.Outcome``."""
    where: dict[str, list[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        if "migrations" in path.parts:
            continue
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ClassDef):
                where.setdefault(node.name, []).append(str(path.relative_to(PACKAGE)))
    assert {name: paths for name, paths in where.items() if len(paths) > 1 and name not in SHARED_CLASS_NAMES} == {}


def test_the_worker_leaves_the_bookkeeping_of_its_claims_to_runtime_held():
    """Issue 32: the worker loop delegates the claims it holds (counts, prefetch, give-back) to ``HeldClaims``."""
    found = imports_of(PACKAGE / "runtime" / "worker.py")
    assert "django_procedures.runtime.held.HeldClaims" in found
    assert not {n for n in found if n.startswith("django_procedures.policy.prefetch")}


# -- the writer rule: django_procedures.store is the only writer of the procedures models -------------

MODELS = {"ProcedureRun", "Step", "Lease", "Schedule", "KeyRequest", "Worker"}
WRITES = {"save", "update", "delete", "create", "get_or_create", "update_or_create", "bulk_create", "bulk_update",
          "asave", "aupdate", "adelete", "acreate", "aget_or_create", "aupdate_or_create", "abulk_create",
          "abulk_update"}
STORE_DOORS = {"_writer", "write_instance", "_base_manager"}
SQL_WRITE = re.compile(r"\b(INSERT\s+INTO|UPDATE\s+\S+\s+SET|DELETE\s+FROM|TRUNCATE\s+\w|MERGE\s+INTO)\b",
                       re.IGNORECASE)


def root_name(node: ast.AST) -> str | None:
    """The name a chain such as ``ProcedureRun.objects.filter(...).update`` starts from."""
    while isinstance(node, (ast.Attribute, ast.Call, ast.Subscript)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


def writes_outside_store(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        where = f"{path.name}:{getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.Attribute) and node.attr in STORE_DOORS:
            found.append(f"{where} uses the store's private writer {node.attr}")
        elif isinstance(node, ast.Name) and node.id in STORE_DOORS and isinstance(node.ctx, ast.Load):
            found.append(f"{where} uses the store's private writer {node.id}")
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in WRITES
              and root_name(node.func.value) in MODELS):
            found.append(f"{where} writes {root_name(node.func.value)} with .{node.func.attr}()")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and SQL_WRITE.search(node.value):
            found.append(f"{where} holds a writing SQL statement")
    return found


OUTSIDE_STORE = [p for p in PACKAGE.rglob("*.py")
                 if not {"store", "migrations"} & set(p.relative_to(PACKAGE).parts)
                 and p.relative_to(PACKAGE).parts != ("models", "readonly.py")]


@pytest.mark.parametrize("path", OUTSIDE_STORE, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_only_the_store_writes(path):
    assert writes_outside_store(path) == []


def test_the_writer_check_finds_writes(tmp_path):
    """The check above sees each kind of write, so its passing means something."""
    sample = tmp_path / "sample.py"
    sample.write_text(
        "ProcedureRun.objects.filter(id=1).update(status='done')\n"
        "Schedule.objects.all().delete()\n"
        "Step.objects.bulk_create([])\n"
        "ProcedureRun._writer.filter(id=1)\n"
        "write_instance(run)\n"
        "cursor.execute('UPDATE django_procedures_procedurerun SET status = %s', ['done'])\n"
    )
    assert len(writes_outside_store(sample)) == 6


# -- one submit door: the store writes the row data the procedure side made ----------------------------

#: The procedure side: user classes, what turns them into row data, and ``using()``.
PROCEDURE_SIDE = ("django_procedures.procedure", "django_procedures.submitting", "django_procedures.submit_options")


@pytest.mark.parametrize("path", [*files("store"), *files("registry.py")], ids=lambda p: str(p.relative_to(PACKAGE)))
def test_the_store_and_the_registry_never_import_the_procedure_side(path):
    """Not even for a type hint: they see a class as ``policy.procedure_class.ProcedureClass``, and the store gets
    ``NewRun`` values whose state, options and lock keys were checked (and ``lock_keys()`` asked) before."""
    assert {name for name in imports_of(path) if name.startswith(PROCEDURE_SIDE)} == set()
