"""The statements of ``store.limits`` on PostgreSQL: limited candidates, taking and making slots, freeing, tidying.

Formatted with the table names (``run``, ``slot``, ``use``) once per process; parameters are bound by the server.
A row's limits are its own (``limits``) and its queue's (``%(queue_limits)s``, ``PROCEDURES["QUEUES"]`` as
``{queue: stored limits}``), each ``[name, kind, amount, per_seconds]``.
"""

from __future__ import annotations

import functools

from django_procedures.policy.status import CLAIMABLE
from django_procedures.store.db import sql_list
from django_procedures.store.kinds import VERSION_OK

#: Due limited rows read, from the front of the queue, to find the names that are full now.
SAMPLE = 100

ELEMENTS = ("jsonb_array_elements(COALESCE(r.limits, '[]'::jsonb) "
            "|| COALESCE(%(queue_limits)s::jsonb -> r.queue, '[]'::jsonb))")

# Rows of a claim's limited pass: due, of its types and queues, needing no lock key decision; "which" says
# whose limits (the row's own, or only its queue's).
DUE = f"""
    status IN ({sql_list(CLAIMABLE)}) AND run_at <= %(now)s AND (type_name || '') = ANY(%(types)s::text[])
    {VERSION_OK} {{queue_filter}} AND NOT waiting_for_keys AND (keys_held OR lock_keys = '[]'::jsonb) AND {{which}}
"""
OWN = "r.limits IS NOT NULL"
QUEUE_ONLY = "r.limits IS NULL AND r.queue = ANY(%(limited_queues)s::text[])"

# The names full now among those of the first due rows: every slot below the limit exists (slots are numbered
# from 0 without gaps) and none is free. One probe or two per distinct name, not per row.
_FULL_NAMES = """
    sample AS MATERIALIZED (
        SELECT r.limits, r.queue FROM {run} AS r WHERE {due} ORDER BY priority DESC, run_at LIMIT {sample}
    ), wanted AS MATERIALIZED (
        SELECT DISTINCT e->>0 AS name, e->>1 = 'rate' AS rate, (e->>2)::integer AS amount, r.queue
        FROM sample AS r, {elements} AS e
    ), full_ AS MATERIALIZED (
        SELECT w.name, w.rate, w.amount, w.queue FROM wanted AS w
        WHERE EXISTS (SELECT FROM {slot} AS s WHERE s.name = w.name AND s.rate = w.rate AND s.slot = w.amount - 1)
          AND NOT EXISTS (SELECT FROM {slot} AS s WHERE s.name = w.name AND NOT w.rate AND NOT s.rate
                          AND s.holder_id IS NULL AND s.slot < w.amount)
          AND NOT EXISTS (SELECT FROM {slot} AS s WHERE s.name = w.name AND w.rate AND s.rate
                          AND s.free_at <= %(now)s AND s.slot < w.amount)
    ), fulls AS MATERIALIZED (
        SELECT array_agg(DISTINCT name || ':' || CASE WHEN rate THEN 'rate' ELSE 'concurrency' END || ':' || amount)
            AS full_keys
        FROM full_
    )"""
# Per row only a comparison of its limits' keys with the full ones (an array read once per statement).
_NOT_FULL = """NOT EXISTS (SELECT FROM {elements} AS e
                    WHERE (e->>0) || ':' || (e->>1) || ':' || (e->>2) = ANY((SELECT full_keys FROM fulls)::text[]))"""

# Free slots of each wanted name (``w``), locked; a slot another transaction holds locked (taking it, or
# freeing it) is passed by, never waited for; one this claim took already (``taken``, still free until the
# lease statement writes it) is not taken twice.
_TAKE_FROM = """
    SELECT w.name, w.rate, t.slot, t.id
    FROM {wanted} CROSS JOIN LATERAL (
        SELECT s.slot, s.id FROM {slot} AS s
        WHERE s.name = w.name AND NOT w.rate AND NOT s.rate AND s.holder_id IS NULL AND s.slot < w.amount
          AND NOT s.id = ANY(%(taken)s::bigint[])
        ORDER BY s.slot LIMIT w.want FOR UPDATE SKIP LOCKED
    ) AS t
    UNION ALL
    SELECT w.name, w.rate, t.slot, t.id
    FROM {wanted} CROSS JOIN LATERAL (
        SELECT s.slot, s.id FROM {slot} AS s
        WHERE s.name = w.name AND w.rate AND s.rate AND s.free_at <= %(now)s AND s.slot < w.amount
          AND NOT s.id = ANY(%(taken)s::bigint[])
        ORDER BY s.free_at LIMIT w.want FOR UPDATE SKIP LOCKED
    ) AS t
"""
_TAKE = _TAKE_FROM.replace("{wanted}", "unnest(%(names)s::text[], %(rates)s::boolean[], %(amounts)s::integer[], "
                                       "%(wants)s::integer[]) AS w(name, rate, amount, want)")

# Due limited rows in claim order, locked, past rows whose limits are full (when every row of a sample that
# holds the whole backlog is over a full limit, the scan is skipped: a one-time filter); and, in the same
# statement, free slots for them: of each name as many as rows want it, up to the claim's ``wanted``.
_CANDIDATES = """
    WITH {full_names}, picked AS MATERIALIZED (
        SELECT r.id, r.limits, r.queue, r.priority, r.run_at FROM {run} AS r
        WHERE {due} AND NOT r.id = ANY(%(skip)s::uuid[]) AND {not_full}
          AND ((SELECT count(*) FROM sample) >= {sample}
               OR EXISTS (SELECT FROM sample AS r WHERE {not_full}))
        ORDER BY priority DESC, run_at
        LIMIT %(limit)s
        FOR UPDATE OF r SKIP LOCKED
    ), wants AS MATERIALIZED (
        SELECT e->>0 AS name, e->>1 = 'rate' AS rate, min((e->>2)::integer) AS amount,
               LEAST(count(*), %(wanted)s)::integer AS want
        FROM picked AS r, {elements} AS e GROUP BY 1, 2
    ), took AS MATERIALIZED ({take})
    SELECT r.id, r.limits, r.queue, r.priority, r.run_at, NULL::text, NULL::boolean, NULL::integer, NULL::bigint
    FROM picked AS r
    UNION ALL
    SELECT NULL, NULL, NULL, NULL, NULL, t.name, t.rate, t.slot, t.id FROM took AS t
"""

# Slots a name lacks, below its limit: numbers from 0 not taken yet (a gap the sweep left while deleting is
# filled first), in one global order so two claims making slots never deadlock; a number another claim made
# meanwhile is left to it. The name's row is made with its first slots.
_MAKE = """
    WITH made AS (
        INSERT INTO {slot} (name, rate, slot, free_at)
        SELECT w.name, w.rate, g, CASE WHEN w.rate THEN timestamptz 'epoch' END
        FROM unnest(%(names)s::text[], %(rates)s::boolean[], %(amounts)s::integer[], %(shorts)s::integer[])
            AS w(name, rate, amount, short)
        CROSS JOIN LATERAL (SELECT count(*)::integer AS n FROM {slot} AS s
                            WHERE s.name = w.name AND s.rate = w.rate) AS c
        CROSS JOIN LATERAL generate_series(0, LEAST(w.amount, c.n + w.short) - 1) AS g
        WHERE c.n < w.amount
        ORDER BY w.name, w.rate, g
        ON CONFLICT (name, rate, slot) DO NOTHING
        RETURNING name, rate, slot, id
    ), heads AS (
        INSERT INTO {use} (name, max, per, waiting)
        SELECT h.name, h.max, h.per, '[]'::jsonb
        FROM unnest(%(head_names)s::text[], %(head_maxes)s::integer[], %(head_pers)s::float8[]) AS h(name, max, per)
        WHERE h.name IN (SELECT name FROM made)
        ORDER BY h.name
        ON CONFLICT (name) DO NOTHING
    )
    SELECT name, rate, slot, id FROM made
"""

# The claim statement's extra parts (store.claim): the slots taken, written with the leases that hold them.
HOLD = """, held AS (
    UPDATE {slot} AS s
    SET holder_id = CASE WHEN s.rate THEN NULL ELSE c.id END,
        holder_token = CASE WHEN s.rate THEN NULL ELSE c.lease_token END,
        free_at = CASE WHEN s.rate THEN %(now)s + make_interval(secs => h.per) END
    FROM unnest(%(slot_ids)s::uuid[], %(slot_names)s::text[], %(slot_rates)s::boolean[], %(slot_numbers)s::integer[],
                %(slot_pers)s::float8[]) AS h(id, name, rate, slot, per)
    JOIN claimed AS c ON c.id = h.id
    WHERE s.name = h.name AND s.rate = h.rate AND s.slot = h.slot
)"""
LEASE_LIMITS = (", limits", ", hl.names::jsonb",
                " LEFT JOIN unnest(%(lease_ids)s::uuid[], %(lease_names)s::text[]) AS hl(lease_id, names)"
                " ON hl.lease_id = claimed.id")

# The names of the slots freed (``freed``) lose their notes of waiting queues, returned (``woken``) to be told;
# a note holding only ``%(own)s``, the queue whose worker claims again at once, is left as it is.
_WOKEN = """woken AS (
    UPDATE {use} AS u SET waiting = '[]'::jsonb
    FROM (SELECT name, waiting FROM {use}
          WHERE name = ANY(ARRAY(SELECT name FROM freed)) AND waiting <> '[]'::jsonb AND waiting <> %(own)s::jsonb
          ORDER BY name FOR UPDATE) AS noted
    WHERE u.name = noted.name
    RETURNING noted.waiting
)"""

# The lease ending: its own slots back, and the queues noted as waiting for them.
_FREE = """
    WITH freed AS (
        UPDATE {slot} AS s SET holder_id = NULL, holder_token = NULL
        FROM unnest(%(ids)s::uuid[], %(tokens)s::bigint[]) AS l(id, token)
        WHERE s.holder_id = l.id AND s.holder_token = l.token
        RETURNING s.name
    ), {woken}
    SELECT DISTINCT q FROM woken, jsonb_array_elements_text(woken.waiting) AS q
""".replace("{woken}", _WOKEN)

# The same for the lease a completion's statement closes (store.progress_sql): freed only if the fenced
# update ("run") matched, and the queues woken by NOTIFY in that statement (``told`` is read by its SELECT).
FREE_WITH_RUN = """, freed AS (
    UPDATE {slot} SET holder_id = NULL, holder_token = NULL
    WHERE holder_id = %(id)s AND holder_token = %(token)s AND EXISTS (SELECT FROM run)
    RETURNING name
), {woken}, told AS (
    SELECT {tell} FROM (SELECT DISTINCT q FROM woken, jsonb_array_elements_text(woken.waiting) AS q
                        WHERE q <> %(own_queue)s) AS w
)""".replace("{woken}", _WOKEN)

# When idle: note the queues waiting for full concurrency names (a free wakes them), and say whether a due
# limited row could be claimed now, and when the first full rate admits a claim again.
_IDLE = """
    WITH {full_names}, noted AS (
        INSERT INTO {use} AS u (name, waiting)
        SELECT f.name, jsonb_agg(DISTINCT f.queue) FROM full_ AS f
        WHERE NOT f.rate AND NOT EXISTS (SELECT FROM {use} AS n WHERE n.name = f.name AND n.waiting ? f.queue)
        GROUP BY f.name ORDER BY f.name
        ON CONFLICT (name) DO UPDATE SET waiting = (
            SELECT jsonb_agg(DISTINCT q ORDER BY q) FROM jsonb_array_elements(u.waiting || EXCLUDED.waiting) AS q)
    )
    SELECT EXISTS (SELECT FROM sample AS r WHERE {not_full}),
           (SELECT min(s.free_at) FROM full_ AS f JOIN {slot} AS s ON s.name = f.name AND s.rate
            WHERE f.rate AND s.free_at > %(now)s)
"""

# The sweep: names nothing holds (no lease, no claim a rate still counts) lose their slots and their row, all
# at once, and only when every one of them could be locked without waiting (so no claim is taking one).
_TIDY = """
    WITH idle AS (
        SELECT u.name FROM {use} AS u
        WHERE NOT EXISTS (SELECT FROM {slot} AS s WHERE s.name = u.name
                          AND (s.holder_id IS NOT NULL OR s.free_at > %(now)s))
        ORDER BY u.name LIMIT 500 FOR UPDATE SKIP LOCKED
    ), locked AS MATERIALIZED (
        SELECT s.id, s.name FROM {slot} AS s
        WHERE s.name IN (SELECT name FROM idle) AND s.holder_id IS NULL
          AND (s.free_at IS NULL OR s.free_at <= %(now)s)
        FOR UPDATE SKIP LOCKED
    ), whole AS MATERIALIZED (
        SELECT i.name FROM idle AS i
        WHERE (SELECT count(*) FROM {slot} AS s WHERE s.name = i.name)
            = (SELECT count(*) FROM locked AS l WHERE l.name = i.name)
    ), gone AS (
        DELETE FROM {slot} WHERE id IN (SELECT l.id FROM locked AS l JOIN whole AS w ON w.name = l.name)
    )
    DELETE FROM {use} WHERE name IN (SELECT name FROM whole) RETURNING name
"""


def _tables() -> dict[str, str]:
    from django_procedures.models import LimitSlot, LimitUse, ProcedureRun

    return {"run": ProcedureRun._meta.db_table, "slot": LimitSlot._meta.db_table, "use": LimitUse._meta.db_table}


def _due(which: str, queues: bool) -> str:
    return DUE.format(which=which, queue_filter="AND (queue || '') = ANY(%(queues)s::text[])" if queues else "")


def _full_names(due: str) -> str:
    return _FULL_NAMES.format(due=due, sample=SAMPLE, elements=ELEMENTS, **_tables())


@functools.cache
def candidates(which: str, queues: bool) -> str:
    due = _due(which, queues)
    tables = _tables()
    return _CANDIDATES.format(full_names=_full_names(due), due=due, sample=SAMPLE, elements=ELEMENTS,
                              not_full=_NOT_FULL.format(elements=ELEMENTS),
                              take=_TAKE_FROM.format(wanted="wants AS w", slot=tables["slot"]), **tables)


@functools.cache
def idle(which: str, queues: bool) -> str:
    due = _due(which, queues)
    return _IDLE.format(full_names=_full_names(due), not_full=_NOT_FULL.format(elements=ELEMENTS), **_tables())


@functools.cache
def free_with_run(notify: bool) -> str:
    """:data:`FREE_WITH_RUN` with the tables; ``notify``: send the NOTIFYs (someone LISTENs)."""
    from django_procedures.store.notify import CHANNEL

    return FREE_WITH_RUN.format(tell=f"pg_notify('{CHANNEL}', w.q)" if notify else "w.q", **_tables())


@functools.cache
def statement(name: str) -> str:
    """``take``, ``make``, ``free``, ``tidy`` or ``hold``, with the table names."""
    text = {"take": _TAKE, "make": _MAKE, "free": _FREE, "tidy": _TIDY, "hold": HOLD}[name]
    return text.format(**_tables())
