from django.apps import AppConfig


class ProceduresConfig(AppConfig):
    name = "django_procedures"
    label = "django_procedures"
    verbose_name = "Procedures"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.db.models.signals import post_migrate

        from django_procedures import checks, registry  # noqa: F401  (checks registers itself)
        from django_procedures.tasks import discovery

        registry.autodiscover()
        discovery.autodiscover()  # each app's tasks module, when TASKS uses ProceduresBackend
        post_migrate.connect(_sync_schedules, sender=self, dispatch_uid="django_procedures.sync_schedules")


def _sync_schedules(using: str = "default", **kwargs: object) -> None:
    """Schedules declared in code reach the database after migrate (never at import or in ready())."""
    from django_procedures.store.schedules import sync_declared

    if using == "default":
        sync_declared()
