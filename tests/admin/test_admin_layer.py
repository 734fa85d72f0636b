"""The admin displays and calls the store; it never writes a column itself."""

import ast
import sys
from pathlib import Path

import pytest

ADMIN = Path(__file__).resolve().parents[2] / "django_procedures" / "admin"
WRITES = {"update", "save", "delete", "bulk_create", "bulk_update", "create", "get_or_create", "update_or_create",
          "select_for_update", "raw"}


def calls(path: Path) -> set[str]:
    return {node.func.attr for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)}


@pytest.mark.parametrize("path", sorted(ADMIN.glob("*.py")), ids=lambda p: p.name)
def test_the_admin_never_writes_procedure_state(path):
    assert calls(path) & WRITES == set()


@pytest.mark.parametrize("path", sorted(ADMIN.glob("*.py")), ids=lambda p: p.name)
def test_raw_sql_in_the_admin_only_reads(path):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and "SELECT" in node.value:
            assert not {"INSERT", "UPDATE", "DELETE"} & set(node.value.upper().split())


def test_the_explanation_is_pure():
    tree = ast.parse((ADMIN / "why.py").read_text())
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)} | {
        a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert {name for name in imported if name.split(".")[0] not in sys.stdlib_module_names} == set()
