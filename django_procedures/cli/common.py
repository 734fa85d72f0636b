"""Arguments and values several subcommands share: ids, ages, the actor, the procedure filters."""

from __future__ import annotations

import argparse
import getpass
import json
import os
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import connections
from django.db.models import Q
from django.utils import timezone

from django_procedures import clock
from django_procedures.cli.output import Refused
from django_procedures.models import ProcedureRun
from django_procedures.policy.durations import parse_duration
from django_procedures.policy.status import RunStatus
from django_procedures.store.overview import newest_matches_first


def actor() -> str:
    """Who acts, as the admin records a user: ``cli:<os user>``."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no login name (a container's uid without a passwd entry)
        user = f"uid {os.getuid()}"
    return f"cli:{user}"


def procedure_id(text: str) -> uuid.UUID:
    """A procedure id from the command line; a malformed one is refused (exit 1, per the issue)."""
    try:
        return uuid.UUID(text.strip())
    except ValueError:
        raise Refused(f"{text!r} is not a procedure id; pass a UUID such as "
                      "0190d7a2-5c3e-7b1a-9f00-2d4e6a8b0c1d (the first column of `procedures list`)") from None


def procedure_ids(texts: Sequence[str]) -> list[uuid.UUID]:
    """The ids, malformed ones refused before anything is read, duplicates dropped, in the order given."""
    return list(dict.fromkeys(procedure_id(t) for t in texts))


def require_known(ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, ProcedureRun]:
    """The procedures of ``ids`` (one query on the primary key); an unknown id is refused."""
    found = ProcedureRun.objects.in_bulk(list(ids))
    missing = [str(pid) for pid in ids if pid not in found]
    if missing:
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        raise Refused(f"procedure {missing[0]} does not exist{more}; nothing was changed")
    return found


def json_argument(text: str, flag: str) -> Any:
    """The value of a JSON option (e.g. ``--payload``); text that is not JSON is refused in one line (exit 1)."""
    try:
        return json.loads(text)
    except ValueError as error:
        raise Refused(f"{flag} is not JSON ({error}); give e.g. {flag} '{{\"amount\": 10}}'") from None


def age(text: str) -> timedelta | datetime:
    """An ``argparse`` type: ``90s``, ``15m``, ``2h``, ``3d``, ``1d12h`` (as ``procedures_prune --older-than``),
    or an ISO date/time (UTC unless it says otherwise)."""
    try:
        delta = parse_duration(text)
    except ValueError as error:
        try:
            moment = datetime.fromisoformat(text.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(f"{error}; or give an ISO time such as 2030-01-31T12:00") from None
        return moment if timezone.is_aware(moment) else timezone.make_aware(moment, UTC)
    try:
        datetime.now(UTC) - delta
    except OverflowError:
        raise argparse.ArgumentTypeError(f"{text} ago is before the year 1; give a shorter age") from None
    return delta


def moment(value: timedelta | datetime, now: datetime) -> datetime:
    return now - value if isinstance(value, timedelta) else value


def add_filters(parser: argparse.ArgumentParser, *, statuses: Sequence[str] | None = None) -> None:
    """``--status --type --queue --since --older-than --error``: which procedures, by the admin's indexes."""
    parser.add_argument("--status", choices=statuses or [s.value for s in RunStatus])
    parser.add_argument("--type", dest="type_name", metavar="TYPE", help="the procedure type, e.g. app.Order")
    parser.add_argument("--queue")
    parser.add_argument("--since", type=age, metavar="AGE",
                        help="created within this age (30m, 2h, 3d) or since this ISO time")
    parser.add_argument("--older-than", type=age, metavar="AGE", help="created before this age ago (or ISO time)")
    parser.add_argument("--error", metavar="TEXT", help="words of the error (not of done procedures)")


FILTERS = ("status", "type_name", "queue", "since", "older_than", "error")


def has_filters(options: dict[str, Any]) -> bool:
    return any(options.get(name) is not None for name in FILTERS)


def describe_filters(options: dict[str, Any]) -> str:
    flags = {"type_name": "--type", "older_than": "--older-than"}
    parts = [f"{flags.get(n, '--' + n)} {options[n] if not isinstance(options[n], timedelta) else _ago(options[n])}"
             for n in FILTERS if options.get(n) is not None]
    return " ".join(parts) or "no filter"


def _ago(delta: timedelta) -> str:
    seconds = int(delta.total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds and seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def filtered(options: dict[str, Any], base: Any = None) -> Any:
    """``ProcedureRun.objects`` narrowed by the filters, newest first (``created_at DESC, id DESC``).

    Each filter is a leading column of one of the admin's list indexes (status, type, queue, created_at),
    so the newest page is read from one index range: nothing here counts the table.
    """
    now = clock.now()
    qs = ProcedureRun.objects.all() if base is None else base
    if options.get("status"):
        qs = qs.filter(status=options["status"])
    if options.get("type_name"):
        qs = qs.filter(type_name=options["type_name"])
    if options.get("queue"):
        qs = qs.filter(queue=options["queue"])
    if options.get("since") is not None:
        qs = qs.filter(created_at__gte=moment(options["since"], now))
    if options.get("older_than") is not None:
        qs = qs.filter(created_at__lt=moment(options["older_than"], now))
    if options.get("error"):
        term = options["error"].strip()
        # As the admin's search: `error <> ''` lets PostgreSQL use the trigram index, which holds only errors.
        qs = qs.filter(Q(error__icontains=term) & ~Q(error="")).exclude(status=RunStatus.DONE)
    return qs.order_by("-created_at", "-id")


#: Matches of ``--error`` above which the newest are found by walking the errors newest first (as the admin does).
ERROR_WALK_ABOVE = 10_000


def newest(queryset: Any, n: int, options: dict[str, Any]) -> list[Any]:
    """The first ``n`` rows of the filtered ``queryset`` (newest first).

    Words common to many errors: PostgreSQL would read every match through the
    trigram index and sort them; past ``ERROR_WALK_ABOVE`` matches (a capped
    count) the newest are read by walking ``procedures_error_created_idx``
    instead (``store.overview.newest_matches_first``).
    """
    page = queryset[:n]
    if (options.get("error") and connections[queryset.db].vendor == "postgresql"
            and queryset.order_by()[: ERROR_WALK_ABOVE + 1].count() > ERROR_WALK_ABOVE):
        return newest_matches_first(page)
    return list(page)


def ago(seconds: float) -> str:
    """A short age: ``42s``, ``5m``, ``3h12m``, ``2d4h``."""
    seconds = max(0, int(seconds))
    if seconds < 60:
        return f"{seconds}s"
    minutes, s = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m{s:02d}s" if s and minutes < 10 else f"{minutes}m"
    hours, m = divmod(minutes, 60)
    if hours < 24:
        return f"{hours}h{m:02d}m" if m else f"{hours}h"
    days, h = divmod(hours, 24)
    return f"{days}d{h}h" if h else f"{days}d"


def when(value: datetime | None) -> str:
    return timezone.localtime(value).strftime("%Y-%m-%d %H:%M:%S") if value else "-"
