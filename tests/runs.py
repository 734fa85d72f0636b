"""Reads the tests make of runs, steps, leases and Effect rows, and of admin pages: one definition each."""

from __future__ import annotations

import re
from typing import Any

from django_procedures.models import Lease, ProcedureRun, Step
from testproject.testapp.models import Effect


def status_of(pid) -> str:
    return ProcedureRun.objects.values_list("status", flat=True).get(id=pid)


def steps(pid) -> list[tuple[int, str, int, str]]:
    """``(index, name, attempt, status)`` of every Step row of ``pid``, in order."""
    return list(Step.objects.filter(procedure_id=pid).order_by("index", "attempt", "id")
                .values_list("index", "name", "attempt", "status"))


def lease_outcomes(pid) -> list[str]:
    return list(Lease.objects.filter(procedure_id=pid).order_by("token").values_list("outcome", flat=True))


def open_leases() -> int:
    return Lease.objects.filter(released_at__isnull=True).count()


def effect_rows(pid) -> list[tuple[str, int]]:
    """``(step, worker_pid)`` of every committed step body of ``pid``, in commit order."""
    return list(Effect.objects.filter(procedure_id=pid).order_by("id").values_list("step", "worker_pid"))


def page_text(page: Any) -> str:
    """An admin page (a response, or its HTML) as text: tags dropped, whitespace collapsed, quotes unescaped."""
    html = page if isinstance(page, str) else page.content.decode()
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html)).replace("&#x27;", "'").replace("&quot;", '"')
