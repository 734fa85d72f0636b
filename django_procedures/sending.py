"""``send_event``: the public door to :func:`django_procedures.store.inbox.send`."""

from __future__ import annotations

import uuid
from typing import Any

from django_procedures.handle import ProcedureHandle
from django_procedures.store.inbox import Sent, send


def send_event(procedure: ProcedureHandle | uuid.UUID | str, name: str, payload: Any = None, *,
               key: str | None = None) -> Sent:
    """Send the event ``name`` (with a JSON ``payload``) to ``procedure``: a handle, an id, or its idempotency key.

    Written in the caller's transaction (rolled back: never sent). A procedure
    waiting for ``name`` is made ready in that transaction; otherwise the event
    is kept, in order, until a wait for its name takes it. A ``key`` makes the
    send idempotent per procedure (a second send with it returns the first
    event, ``duplicate=True``, even once the procedure has finished).
    ``TypeError`` for a payload that is not JSON (or that the database would
    not keep as sent: a NUL character, a lone surrogate, a tuple),
    ``ValueError`` for one past ``PROCEDURES["MAX_EVENT_BYTES"]`` or an empty or
    over-long name; :class:`~django_procedures.exceptions.EventNotDelivered`
    for an unknown or final procedure, or one with
    ``PROCEDURES["MAX_UNCONSUMED_EVENTS"]`` events not taken yet.
    """
    return send(procedure.id if isinstance(procedure, ProcedureHandle) else procedure, name, payload, key=key)


__all__ = ["send_event"]
