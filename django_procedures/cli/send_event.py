"""``procedures send-event``: an event to one procedure, as ``send_event`` sends it (the actor as ``sent_by``)."""

from __future__ import annotations

import argparse
import uuid
from typing import Any

from django.db import transaction

from django_procedures.cli.common import actor, json_argument
from django_procedures.cli.output import Output, Refused
from django_procedures.exceptions import EventNotDelivered
from django_procedures.store.inbox import send

HELP = "Send an event to a procedure (by id, or by its idempotency key) waiting for it or about to."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("procedure", metavar="ID", help="the procedure's id, or its idempotency key (order:1234)")
    parser.add_argument("name", metavar="NAME", help="the event's name, e.g. approved")
    parser.add_argument("--payload", metavar="JSON", help="the event's payload, a JSON document (default: null)")
    parser.add_argument("--key", help="makes the send idempotent: a second send with this key sends nothing")
    parser.add_argument("--json", action="store_true", help="print one JSON document")


def _target(text: str) -> uuid.UUID | str:
    try:
        return uuid.UUID(text.strip())
    except ValueError:
        return text  # an idempotency key: the store looks it up


def run(options: dict[str, Any], out: Output) -> None:
    payload = None if options["payload"] is None else json_argument(options["payload"], "--payload")
    try:
        with transaction.atomic():
            sent = send(_target(options["procedure"]), options["name"], payload, key=options["key"], sent_by=actor())
    except EventNotDelivered as error:
        raise Refused(f"{error}; nothing was sent") from None
    except (TypeError, ValueError) as error:
        raise Refused(f"{error}; nothing was sent") from None
    if out.as_json:
        out.document({"event": sent.event_id, "procedure": str(sent.procedure_id), "name": sent.name,
                      "delivered": sent.delivered, "duplicate": sent.duplicate, "status": sent.status})
        return
    if sent.duplicate:
        out.line(f"event {sent.event_id} with key {options['key']!r} was sent before; nothing sent again")
    elif sent.delivered:
        out.line(f"sent event {sent.event_id} {sent.name!r}: procedure {sent.procedure_id} was waiting for it "
                 f"and is {sent.status} now")
    else:
        out.line(f"sent event {sent.event_id} {sent.name!r} to procedure {sent.procedure_id} ({sent.status}): "
                 "kept until a wait for it takes it")
