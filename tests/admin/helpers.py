"""Users and URLs shared by the admin tests."""

from __future__ import annotations

from django.contrib.auth.models import Permission, User
from django.test import Client
from django.urls import reverse

VIEW = "view_procedurerun"
RETRY = "retry_procedurerun"
CANCEL = "cancel_procedurerun"
VIEW_SCHEDULE = "view_schedule"
ADD_SCHEDULE = "add_schedule"
CHANGE_SCHEDULE = "change_schedule"
PAUSE = "pause_schedule"
RESUME = "resume_schedule"
TRIGGER = "trigger_schedule"
SCHEDULE_OPERATOR = (VIEW, VIEW_SCHEDULE, ADD_SCHEDULE, CHANGE_SCHEDULE, PAUSE, RESUME, TRIGGER)


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


def schedules_url(query: str = "") -> str:
    return reverse("admin:django_procedures_schedule_changelist") + (f"?{query}" if query else "")


def schedule_url(pk) -> str:
    return reverse("admin:django_procedures_schedule_change", args=[pk])


def schedule_add_url() -> str:
    return reverse("admin:django_procedures_schedule_add")


def schedule_button_url(pk, kind: str) -> str:
    """The schedule page's pause, resume or trigger button."""
    return reverse(f"admin:django_procedures_schedule_{kind}", args=[pk])
