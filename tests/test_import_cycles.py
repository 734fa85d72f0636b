"""No import cycles among the package's modules at import time.

Imports inside functions (``procedure.py`` reaching the store only when
called) and under ``if TYPE_CHECKING:`` are not import-time dependencies. A
submodule imported from its package (``from pkg import sub``) depends on that
submodule, not on ``pkg/__init__.py``.
"""

import ast
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "django_procedures"


def module_files() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        if "migrations" in path.parts:
            continue
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def import_time_imports(name: str, path: Path, modules: set[str], *, in_functions: bool = False) -> set[str]:
    """What ``name`` imports when it is imported; with ``in_functions``, also what its functions import."""
    is_package = path.name == "__init__.py"
    out: set[str] = set()
    for node in ast.parse(path.read_text()).body:  # top level only: function bodies run when called
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            continue
        nested = (ast.If, ast.Try, ast.With, *((ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
                                               if in_functions else ()))
        for sub in ast.walk(node) if isinstance(node, nested) else [node]:
            if isinstance(sub, ast.Import):
                out.update(alias.name for alias in sub.names)
            elif isinstance(sub, ast.ImportFrom):
                base = sub.module or ""
                if sub.level:
                    parts = name.split(".") if is_package else name.split(".")[:-1]
                    parts = parts[: len(parts) - (sub.level - 1)]
                    base = ".".join([*parts, *([base] if base else [])])
                for alias in sub.names:
                    out.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base)
    return {m for m in out if m in modules and m != name}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10000))
    for v in graph:
        if v not in index:
            visit(v)
    return found


def test_cycles_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_the_package_has_no_import_cycle():
    files = module_files()
    graph = {name: import_time_imports(name, path, set(files)) for name, path in files.items()}
    assert cycles(graph) == [], "break the cycle: import inside the function that needs it, or move the code down"


def test_no_module_needs_another_that_needs_it_back_even_inside_functions():
    """Function-level imports break a cycle at import time, not in the design: a module whose functions
    reach back to a module that imports it is one module in two files. ``procedure.py`` reaching the store
    and the runtime only when called is the one-way kind, which this allows."""
    files = module_files()
    graph = {name: import_time_imports(name, path, set(files), in_functions=True) for name, path in files.items()}
    assert cycles(graph) == [], "move what both sides need into a module below both"
