from django.apps import AppConfig


class ProceduresConfig(AppConfig):
    name = "django_procedures"
    label = "django_procedures"
    verbose_name = "Procedures"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django_procedures import checks, registry  # noqa: F401  (checks registers itself)

        registry.autodiscover()
