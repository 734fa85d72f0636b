"""Importing the ``tasks`` module of every installed app, so that workers can claim the tasks defined there."""

from __future__ import annotations

from django_procedures.tasks.bridge import backend_alias


def autodiscover() -> None:
    """Import each installed app's ``tasks`` module when ``TASKS`` uses ``ProceduresBackend`` (else nothing).

    A task's procedure type is registered when its ``@task`` decorator runs;
    a worker claims only the types it has registered.
    """
    if backend_alias() is None:
        return
    from django.utils.module_loading import autodiscover_modules

    autodiscover_modules("tasks")
