"""How a task's runs are named, and which ``Task`` this process registered for each function.

The bottom of the tasks package: the backend, the worker side (:mod:`.runs`),
the results and the admin read these names without importing each other.
"""

from __future__ import annotations

from typing import Any

#: Type names of task runs start with this; what follows is the task function's module path.
TYPE_PREFIX = "task:"

#: The procedure type made for each task function in this process, by module path (filled by ``runs``).
classes: dict[str, Any] = {}


def type_name_of(module_path: str) -> str:
    return f"{TYPE_PREFIX}{module_path}"


def is_task_type(type_name: str) -> bool:
    return type_name.startswith(TYPE_PREFIX)


def registered_task(module_path: str) -> Any:
    """The ``Task`` registered in this process for ``module_path``, or None."""
    cls = classes.get(module_path)
    return None if cls is None else cls.task
