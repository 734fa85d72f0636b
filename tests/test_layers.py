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
