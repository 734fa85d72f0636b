"""Imports flow one way: policy -> models -> store -> runtime; nothing in the core imports Celery."""

import ast
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
    "models": ("django_procedures.store", "django_procedures.runtime", "django_procedures.admin"),
    "store": ("django_procedures.runtime", "django_procedures.admin"),
    "runtime": ("django_procedures.admin", "django.contrib.admin"),
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
