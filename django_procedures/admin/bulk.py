"""Confirm, then perform: the request side of every bulk action and button in the admin.

Django-celery-beat's pattern: an admin action (or a button on an object's page)
shows a confirmation page listing what will change; the confirmed POST does the
work through a plain function, ``message_user`` reports with plural-aware
counts, and every changed object gets an admin ``LogEntry``. Each admin states
its actions as ``BulkAction`` values; ``BulkConfirmations`` runs them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.contrib import messages
from django.contrib.admin import helpers
from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.translation import gettext as _


def operator(request: HttpRequest) -> str:
    """Who did it, as ``retried_by``, the cancel reason and the pause reason record it."""
    return request.user.get_username() or f"user {request.user.pk}"


@dataclass(frozen=True)
class Plan:
    """What an action would do to the selected objects: the page lists ``items``; ``changing`` counts changes."""

    items: Sequence[Any]
    changing: int
    #: More for the page's template (e.g. a default reason).
    context: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ActionResult:
    """What a confirmed action did: the success message, the refusals, and what to write in the admin log."""

    #: The success message; empty when nothing changed.
    done: str
    #: ``(pk, reason)`` for each object the store refused.
    refused: Sequence[tuple[Any, str]] = ()
    #: ``(pks, change message)``: one ``LogEntry`` per pk, with the group's message.
    logged: Sequence[tuple[Sequence[Any], str]] = ()


#: ``(request, selected objects) -> Plan``: read-only, for the confirmation page.
Planner = Callable[[HttpRequest, list[Any]], Plan]
#: ``(request, selected objects) -> ActionResult``: the work, through the store, on the confirmed POST.
Performer = Callable[[HttpRequest, list[Any]], ActionResult]


@dataclass(frozen=True)
class BulkAction:
    """One confirmable action: its name, what its page and messages say, how it plans and how it performs.

    ``title``, ``confirm`` and ``refusal`` are ``ngettext_lazy(..., "count")``
    strings; ``refusal`` also takes ``%(reasons)s``.
    """

    #: The action is ``<kind>_selected``, its button's URL ends in ``<kind>/``, its permission is ``<kind>``.
    kind: str
    label: Any
    title: Any
    confirm: Any
    refusal: Any
    plan: Planner
    perform: Performer
    #: The confirm button is styled as destructive.
    danger: bool = False


class BulkConfirmations:
    """Mixin for a ``ModelAdmin``: the confirmation page, the result messages and the log of each ``BulkAction``.

    The admin says which columns the page reads and in what order it lists
    the selection; the page is ``admin/<app>/<model>/confirm_action.html``,
    which extends ``admin/<app>/confirm_action.html``.
    """

    # Provided by ModelAdmin, which follows this mixin in the admin's bases.
    admin_site: Any
    model: Any
    opts: Any
    message_user: Any
    get_object: Any
    get_queryset: Any

    #: The most objects one action may select: the confirmation page lists every one of them.
    action_limit: int = 500
    #: The columns the confirmation page and the admin log read.
    action_fields: Sequence[str]
    #: The order the confirmation page lists the selection in (stable: the last field is unique).
    action_ordering: Sequence[str]

    def confirm(self, request: HttpRequest, queryset: Any, action: BulkAction, *,
                from_action: bool) -> HttpResponse | None:
        """The confirmation page; or, for the confirmed POST, the work, its messages and log, and ``None``.

        Both need the action's permission (which includes the view permission), whatever the way in.
        """
        if not self.has_button_permission(request, action):
            raise PermissionDenied
        limit = self.action_limit
        selected = list(queryset.only(*self.action_fields).order_by(*self.action_ordering)[:limit + 1])
        if len(selected) > limit:
            self.message_user(request, _("Select at most %(limit)d %(objects)s at a time; filter the list further.")
                              % {"limit": limit, "objects": self.opts.verbose_name_plural}, messages.ERROR)
            return None
        if request.method == "POST" and request.POST.get("post") == "yes":
            result = action.perform(request, selected)
            self._log(request, result.logged)
            self._report(request, action, result)
            return None
        plan = action.plan(request, selected)
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": action.title % {"count": plan.changing},
            "subtitle": None,
            "kind": action.kind,
            "label": action.label,
            "confirm_label": action.confirm % {"count": plan.changing},
            "danger": action.danger,
            "items": plan.items,
            "changing": plan.changing,
            "selected": selected,
            "from_action": from_action,
            "action_name": f"{action.kind}_selected",
            "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
            "form_url": request.get_full_path(),
            "single": None if from_action else selected[0],
            **plan.context,
        }
        request.current_app = self.admin_site.name
        templates = [f"admin/{self.opts.app_label}/{self.opts.model_name}/confirm_action.html",
                     f"admin/{self.opts.app_label}/confirm_action.html"]
        return TemplateResponse(request, templates, context)

    def has_button_permission(self, request: HttpRequest, action: BulkAction) -> bool:
        """Whether ``request`` may use the action: ``has_<kind>_permission``, which requires the view permission too."""
        return getattr(self, f"has_{action.kind}_permission")(request)

    def button_view(self, request: HttpRequest, object_id: str, action: BulkAction) -> HttpResponse:
        """An object page's button: the same confirmation for that one object, then back to its page.

        The permission is checked before anything is read: a forged POST without it gets a 403.
        """
        if not self.has_button_permission(request, action):
            raise PermissionDenied
        obj = self.get_object(request, unquote(object_id))
        if obj is None:
            raise Http404(f"no {self.opts.verbose_name} has the id {object_id}")
        response = self.confirm(request, self.get_queryset(request).filter(pk=obj.pk), action, from_action=False)
        return response or HttpResponseRedirect(reverse(self._url_name("change"), args=[obj.pk]))

    def _url_name(self, view: str) -> str:
        return f"{self.admin_site.name}:{self.opts.app_label}_{self.opts.model_name}_{view}"

    def _log(self, request: HttpRequest, logged: Sequence[tuple[Sequence[Any], str]]) -> None:
        """One ``LogEntry`` per changed object: who, what, when (shown in each object's history)."""
        wanted = {pk for pks, _message in logged for pk in pks}
        if not wanted:
            return
        found = {obj.pk: obj for obj in self.model._default_manager.filter(pk__in=wanted).only(*self.action_fields)}
        for pks, message in logged:
            changed = [found[pk] for pk in pks if pk in found]
            if changed:
                LogEntry.objects.log_actions(user_id=request.user.pk,  # type: ignore[arg-type]  # admin: logged in
                                             queryset=changed, action_flag=CHANGE,
                                             change_message=message)

    def _report(self, request: HttpRequest, action: BulkAction, result: ActionResult) -> None:
        if result.done:
            self.message_user(request, result.done, messages.SUCCESS)
        refused = result.refused
        if refused:
            reasons = "; ".join(reason for _, reason in refused[:5]) + ("; …" if len(refused) > 5 else "")
            self.message_user(request, action.refusal % {"count": len(refused), "reasons": reasons},
                              messages.WARNING)
        if not result.done and not refused:
            self.message_user(request, _("Nothing was selected; nothing changed."), messages.INFO)
