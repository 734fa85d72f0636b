"""Procedure classes by type name; workers resolve type names only through here."""

from __future__ import annotations

from collections.abc import Sequence

from django_procedures.exceptions import ProceduresConfigError, UnknownProcedureType
from django_procedures.policy.procedure_class import ProcedureClass

_types: dict[str, ProcedureClass] = {}


def register(cls: ProcedureClass) -> None:
    """Add ``cls``; a second class with the same type name is a configuration error."""
    if not cls.steps:
        raise ProceduresConfigError(
            f"{_origin(cls)} has no @step methods and does not override execute(); "
            "add steps, or set abstract = True if it is a base class"
        )
    existing = _types.get(cls.type_name)
    if existing is not None and _origin(existing) != _origin(cls):
        raise ProceduresConfigError(
            f"two procedure classes share the type name {cls.type_name!r}: {_origin(existing)} and "
            f"{_origin(cls)}; set a distinct type_name on one of them"
        )
    _types[cls.type_name] = cls


def _origin(cls: object) -> str:
    return f"{cls.__module__}.{getattr(cls, '__qualname__', cls)}"


def get(type_name: str) -> ProcedureClass:
    """The class registered as ``type_name``; ``procedure.registered()`` gives it as a ``Procedure`` class."""
    try:
        return _types[type_name]
    except KeyError:
        raise UnknownProcedureType(
            f"no procedure class is registered as {type_name!r}; define it in a 'procedures' module of an "
            "installed app (or import it there)"
        ) from None


def type_names() -> list[str]:
    return sorted(_types)


def versions(type_names: Sequence[str]) -> list[int]:
    """The registered class's ``version`` of each of ``type_names`` (1 for a name no class has)."""
    return [_types[name].version if name in _types else 1 for name in type_names]


def declares_limits(type_names: Sequence[str]) -> bool:
    """Whether a registered class of ``type_names`` overrides ``limits()`` (its runs may carry limits)."""
    return any(getattr(_types[name], "declares_limits", False) for name in type_names if name in _types)


def autodiscover() -> None:
    """Import the ``procedures`` module of every installed app."""
    from django.utils.module_loading import autodiscover_modules

    autodiscover_modules("procedures")
