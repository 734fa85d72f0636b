"""What the admin masks in a state or output, failing closed when it cannot know.

The keys masked for a procedure type are its class's ``redact`` plus the
``REDACT`` setting. A type this process has not registered (renamed or removed
by a deploy, or served by other workers) has a ``redact`` list nobody here can
read, so every value of its state and output is masked: keys and structure
stay visible, values do not. A schedule's state is masked as its procedure
type's, since it becomes each run's state.

The admin never lets the query string filter on a JSON column either: a
filter such as ``?state__password__startswith=a`` would reveal a masked value
by counting rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.core.exceptions import FieldDoesNotExist
from django.db import models
from django.http import HttpRequest
from django.utils.translation import gettext

from django_procedures.admin.display import MASK, redact
from django_procedures.admin.reads import procedure_class
from django_procedures.conf import conf


@dataclass(frozen=True)
class Redaction:
    """The keys to mask at any depth (case-insensitive); with ``everything``, every value is masked."""

    keys: tuple[str, ...]
    everything: bool = False

    def apply(self, value: Any) -> Any:
        """A copy of ``value`` to show: the secret keys' values (or, with ``everything``, all values) masked."""
        if not self.everything:
            return redact(value, self.keys)

        def walk(item: Any) -> Any:
            if isinstance(item, dict):
                return {k: walk(v) for k, v in item.items()}
            if isinstance(item, list | tuple):
                return [walk(v) for v in item]
            return MASK

        return walk(value)

    def restore(self, edited: Any, stored: Any) -> Any:
        """``edited`` (a form's copy of what :meth:`apply` showed) with each value left masked put back.

        A value that still reads as the mask where ``stored`` had a masked value
        takes the stored value, so saving a form does not overwrite a secret
        with the mask; everything the operator changed is kept.
        """
        wanted = {k.lower() for k in self.keys}

        def walk(new: Any, old: Any, masked: bool) -> Any:
            if new == MASK and masked:
                return old
            if isinstance(new, dict) and isinstance(old, dict):
                return {k: walk(v, old[k], self.everything or (isinstance(k, str) and k.lower() in wanted))
                        if k in old else v for k, v in new.items()}
            if isinstance(new, list) and isinstance(old, list | tuple):
                return [walk(v, old[i], self.everything) if i < len(old) else v for i, v in enumerate(new)]
            return new

        return walk(edited, stored, self.everything)

    @property
    def note(self) -> str:
        """What the page says about the masking."""
        if self.everything:
            return gettext("Every value is masked: this procedure type is not registered in this process, so the "
                           "keys its class masks are unknown here.")
        return gettext("Masked keys: %(keys)s") % {"keys": ", ".join(self.keys)} if self.keys else ""


def redaction_for(type_name: str) -> Redaction:
    """The masking of a ``type_name``'s state and output: its class's ``redact`` and ``REDACT``; all if unknown."""
    setting = tuple(conf.REDACT or ())
    cls = procedure_class(type_name)
    if cls is None:
        return Redaction(tuple(sorted(set(setting))), everything=True)
    return Redaction(tuple(sorted({*(getattr(cls, "redact", ()) or ()), *setting})))


class NoJsonLookups:
    """Mixin for a ``ModelAdmin``: the query string may not filter on a JSON column, here or across a relation."""

    model: Any

    def lookup_allowed(self, lookup: str, value: Any, request: HttpRequest | None = None) -> bool:
        model = self.model
        for part in lookup.split("__"):
            try:
                field = model._meta.get_field(part)
            except FieldDoesNotExist:
                break
            if isinstance(field, models.JSONField):
                return False  # the list answers 400, as for any lookup it does not allow
            if not field.is_relation or field.related_model is None:
                break
            model = field.related_model
        return super().lookup_allowed(lookup, value, request)  # type: ignore[misc]
