"""Users and URLs shared by the admin tests."""

from __future__ import annotations

from django.contrib.auth.models import Permission, User
from django.test import Client
from django.urls import reverse

VIEW = "view_procedurerun"
RETRY = "retry_procedurerun"
CANCEL = "cancel_procedurerun"


def staff(username: str, *codenames: str) -> User:
    """A staff user (not a superuser) with exactly these permissions of the app."""
    user = User.objects.create_user(username, f"{username}@example.com", "pw", is_staff=True)
    user.user_permissions.set(Permission.objects.filter(content_type__app_label="django_procedures",
                                                        codename__in=codenames))
    return user


def client_for(user: User, **kwargs) -> Client:
    client = Client(**kwargs)
    client.force_login(user)
    return client


def changelist_url(query: str = "") -> str:
    return reverse("admin:django_procedures_procedurerun_changelist") + (f"?{query}" if query else "")


def page_url(pid) -> str:
    return reverse("admin:django_procedures_procedurerun_change", args=[pid])


def retry_url(pid) -> str:
    return reverse("admin:django_procedures_procedurerun_retry", args=[pid])


def cancel_url(pid) -> str:
    return reverse("admin:django_procedures_procedurerun_cancel", args=[pid])


def dashboard_url() -> str:
    return reverse("admin:django_procedures_procedurerun_dashboard")
