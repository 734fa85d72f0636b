"""The procedure page's "Send event": a form (a name waited for, or any other; a JSON payload), a confirmation
page, then :func:`django_procedures.store.inbox.send` with the user as ``sent_by``; and the event history."""

from __future__ import annotations

import json
from typing import Any

from django.contrib import messages
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.translation import gettext as _

from django_procedures.conf import conf
from django_procedures.exceptions import EventNotDelivered
from django_procedures.models import Event, ProcedureRun
from django_procedures.policy.events import check_name, encode_payload
from django_procedures.policy.status import RunStatus
from django_procedures.store import inbox

TEMPLATE = "admin/django_procedures/procedurerun/send_event.html"
#: Events shown on the procedure page, the newest.
HISTORY_LIMIT = 100
PERMISSION = "send_event_procedurerun"


def can_send_event(model_admin: Any, request: HttpRequest) -> bool:
    return bool(model_admin.has_view_permission(request)
                and request.user.has_perm(f"{model_admin.opts.app_label}.{PERMISSION}"))


def waited_names(run: ProcedureRun) -> list[str]:
    if run.status == RunStatus.WAITING and run.waiting_for == "event":
        return list(run.waiting_events or [])
    return []


def history_context(run: ProcedureRun) -> dict[str, Any]:
    """The page's event history (one query): each event, who sent it, and which step consumed it."""
    events: list[Event] = inbox.history(run.id, HISTORY_LIMIT)
    for event in events:
        event.payload_json = json.dumps(event.payload)[:300]  # type: ignore[attr-defined]
    return {"events": events, "events_limit": HISTORY_LIMIT}


def _read(request: HttpRequest) -> tuple[str, Any, str, str]:
    """The name and payload posted, and the payload's text; the last is what is wrong with them ("" if nothing)."""
    name = (request.POST.get("other_name") or "").strip() or (request.POST.get("name") or "").strip()
    text = (request.POST.get("payload") or "").strip() or "null"
    try:
        check_name(name, where="Send event")
    except (TypeError, ValueError) as error:
        return name, None, text, str(error)
    try:
        payload = json.loads(text)
    except ValueError as error:
        return name, None, text, _("The payload is not JSON: %(error)s") % {"error": error}
    try:
        encode_payload(payload, conf.MAX_EVENT_BYTES)
    except (TypeError, ValueError) as error:
        return name, None, text, str(error)
    return name, payload, text, ""


def send_event_view(model_admin: Any, request: HttpRequest, object_id: str) -> HttpResponse:
    """GET: the form; POST ``review``: the confirmation page; POST ``confirm``: send, then back to the page.

    The permission is checked before anything is read: a forged POST without it gets a 403.
    """
    if not can_send_event(model_admin, request):
        raise PermissionDenied
    run = model_admin.get_object(request, unquote(object_id))
    if run is None:
        raise Http404(f"no procedure has the id {object_id}")
    page = reverse(model_admin._url_name("change"), args=[run.pk])
    names = waited_names(run)
    name, payload, text, problem = ("", None, "null", "")
    stage = "form"
    if request.method == "POST":
        name, payload, text, problem = _read(request)
        if not problem and "confirm" in request.POST:
            try:
                sent = inbox.send(run.id, name, payload, sent_by=request.user.get_username())
            except (EventNotDelivered, TypeError, ValueError) as error:
                model_admin.message_user(request, _("The event was not sent: %(error)s") % {"error": error},
                                         messages.ERROR)
                return HttpResponseRedirect(page)
            if sent.delivered:
                note = _("Event “%(name)s” sent; the procedure was waiting for it and is ready.")
            else:
                note = _("Event “%(name)s” sent; it is kept until a wait for that name takes it.")
            model_admin.message_user(request, note % {"name": name}, messages.SUCCESS)
            return HttpResponseRedirect(page)
        stage = "form" if problem else "confirm"
    context = {
        **model_admin.admin_site.each_context(request),
        "opts": model_admin.opts,
        "title": _("Send an event to %(type)s %(id)s") % {"type": run.type_name, "id": run.id},
        "run": run,
        "page_url": page,
        "names": names,
        "name": name,
        "other_name": name if name and name not in names else "",
        "payload_text": text,
        "problem": problem,
        "stage": stage,
        "takes_it": name in names,
    }
    request.current_app = model_admin.admin_site.name
    return TemplateResponse(request, TEMPLATE, context)


__all__ = ["PERMISSION", "can_send_event", "history_context", "send_event_view", "waited_names"]
