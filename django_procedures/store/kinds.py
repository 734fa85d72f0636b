"""What a worker claims: its type names, each with the newest run version its class can run."""

from __future__ import annotations

import functools
import operator
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.db.models import Q

from django_procedures.store.db import text_array

# A run written by a newer class version than this worker's is left to the workers that have it: each type's
# version, looked up by the type's position in the parallel arrays. A filter on the rows the index gives, like
# the type's: no join, and the same plan.
VERSION_OK = "AND version <= (%(versions)s::integer[])[array_position(%(types)s::text[], type_name::text)]"

# The type and queue filters of the claim and of next_due are expressions no index matches (``|| ''``). A type or
# queue the table's statistics have not seen (a new type, or a burst into a table of millions that autovacuum has
# not analyzed since) is estimated at one row, and the planner would fetch its rows by the admin's
# procedures_type_idx (or procedures_queue_idx) and sort them: every claim then read every row of that type,
# finished history included (40 ms and 5,000 buffers per claim after 5,000 runs beside 1,000,000 finished
# procedures, and more with each run). Written so, the statements read only the partial indexes of ready and
# retrying rows, in claim order: their cost follows the backlog, never the history. (Turning ``enable_sort`` off
# instead pushes the plan's cost past ``jit_above_cost``: 0.8 s of JIT compilation per claim.)
TYPE_IN = "(type_name || '') = ANY(%(types)s::text[])"
QUEUE_IN = "AND (queue || '') = ANY(%(queues)s::text[])"

# Queues with limits in PROCEDURES["QUEUES"] are left to store.limits (only when some are configured).
NOT_LIMITED_QUEUE = "AND NOT (queue = ANY(%(limited_queues)s::text[]))"


@dataclass(frozen=True)
class Kinds:
    """The type names a worker claims, each with the newest run version its class can run."""

    type_names: tuple[str, ...]
    versions: tuple[int, ...]

    @classmethod
    def of(cls, type_names: Sequence[str], versions: Sequence[int] | None = None) -> Kinds:
        """``versions`` (default: the registered classes') paired with ``type_names``."""
        if versions is None:
            from django_procedures import registry

            versions = registry.versions(type_names)
        if len(versions) != len(type_names):
            raise ValueError(f"versions must give one version per type name; got {len(versions)} for "
                             f"{len(type_names)} type names")
        return cls(tuple(type_names), tuple(versions))

    def params(self) -> dict[str, Any]:
        """The ``types`` and ``versions`` arrays of the raw statements (see ``VERSION_OK``)."""
        return {"types": text_array(self.type_names), "versions": "{" + ",".join(map(str, self.versions)) + "}"}

    def q(self) -> Q:
        """The same rule for the ORM: one term per distinct version (mostly one)."""
        by_version: dict[int, list[str]] = {}
        for name, version in zip(self.type_names, self.versions, strict=True):
            by_version.setdefault(version, []).append(name)
        terms = [Q(type_name__in=names, version__lte=version) for version, names in by_version.items()]
        return functools.reduce(operator.or_, terms, Q(pk__in=[])) if len(terms) != 1 else terms[0]
