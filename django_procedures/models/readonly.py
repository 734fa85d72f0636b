"""Read-only models: ``django_procedures.store`` is their only writer.

A run's row is guarded by its lease token, its parent's counter, its lock keys
and its schedule's slots; a plain ORM write from elsewhere (``.update()`` in a
shell, ``delete_selected`` in an admin, ``.save()`` on a loaded row) would skip
all of them. So the default manager (``objects``) and instances refuse every
write with a message that says what to use instead; the store writes through
the private ``_writer`` manager and :func:`write_instance`.

Django's cascades and related lookups go through ``_base_manager``, a plain
manager, so deleting through the store still removes a run's steps and leases.
"""

from __future__ import annotations

from typing import Any, NoReturn

from django.db import models

ADVICE = ("django_procedures models are written only by django_procedures.store, which keeps leases, trees, "
          "lock keys and schedules consistent. Use the public API instead: Procedure.submit(), "
          "handle.cancel(), handle.retry(), register_schedule(update=True), the schedule operations and "
          "procedures_prune.")


class WriteOutsideStore(TypeError):
    """A write to a procedures model that did not go through ``django_procedures.store``."""


def _refuse(what: str, model: type[models.Model]) -> NoReturn:
    raise WriteOutsideStore(f"{model.__name__}: {what} is refused. {ADVICE}")


class ReadOnlyQuerySet(models.QuerySet):
    """A queryset that reads but refuses every write."""

    def update(self, **kwargs: Any) -> NoReturn:
        _refuse(".update()", self.model)

    def delete(self) -> NoReturn:
        _refuse(".delete()", self.model)

    def create(self, **kwargs: Any) -> NoReturn:
        _refuse(".create()", self.model)

    def get_or_create(self, defaults: Any = None, **kwargs: Any) -> NoReturn:
        _refuse(".get_or_create()", self.model)

    def update_or_create(self, defaults: Any = None, create_defaults: Any = None, **kwargs: Any) -> NoReturn:
        _refuse(".update_or_create()", self.model)

    def bulk_create(self, objs: Any, *args: Any, **kwargs: Any) -> NoReturn:
        _refuse(".bulk_create()", self.model)

    def bulk_update(self, objs: Any, fields: Any, *args: Any, **kwargs: Any) -> NoReturn:
        _refuse(".bulk_update()", self.model)

    # The async variants call the sync ones above; Django's aupdate() etc. reach them through sync_to_async.


class WriterQuerySet(models.QuerySet):
    """The store's queryset: every write allowed; ``create()`` saves past the instances' refusal."""

    def create(self, **kwargs: Any) -> Any:
        instance = self.model(**kwargs)
        self._for_write = True
        write_instance(instance, force_insert=True, using=self.db)
        return instance


class StoreWritten(models.Model):
    """Abstract base of the procedures models: instances refuse ``save()`` and ``delete()``.

    ``_writer`` is the store's door: a manager of :class:`WriterQuerySet`, private by name. Subclasses
    set ``objects`` to a manager of a :class:`ReadOnlyQuerySet` (and keep it first,
    so it is the default manager the admin and ``dumpdata`` read through).
    """

    class Meta:
        abstract = True

    def save(self, *args: Any, **kwargs: Any) -> None:
        _refuse("save()", type(self))

    def delete(self, *args: Any, **kwargs: Any) -> NoReturn:
        _refuse("delete()", type(self))


def write_instance(instance: StoreWritten, **kwargs: Any) -> None:
    """Save ``instance`` as the store does: the plain ``Model.save``, skipping the refusal above."""
    models.Model.save(instance, **kwargs)
