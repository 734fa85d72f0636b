"""The "why is it not running" explanation: a pure function, tested from a table."""

from datetime import UTC, datetime, timedelta

import pytest

from django_procedures.admin.why import KeyWait, NodeFacts, duration, explain, first_line

NOW = datetime(2025, 3, 1, 12, 0, 0, tzinfo=UTC)
S = timedelta(seconds=1)

CASES = [
    # (id, facts, expected codes, fragments every text together must contain)
    ("final", NodeFacts("done"), [], []),
    ("failed is final", NodeFacts("failed", error="boom"), [], []),
    ("children", NodeFacts("waiting", pending_children=3), ["children"], ["waiting for children: 3 left"]),
    ("children none recorded", NodeFacts("waiting"), ["children"], ["none is recorded as unfinished"]),
    ("sleeping", NodeFacts("waiting", waiting_for="timer", wake_at=NOW + timedelta(days=14, hours=1)), ["timer"],
     ["sleeping until 2025-03-15 13:00:00 UTC (in 14d 1h)"]),
    ("sleep due", NodeFacts("waiting", waiting_for="timer", wake_at=NOW - S), ["timer"],
     ["sleeping until 2025-03-01 11:59:59 UTC (due: the next wake pass of any worker makes it ready)"]),
    ("leased with heartbeat", NodeFacts("running", lease_owner="w1@host", lease_expires_at=NOW + 20 * S,
                                        lease_seconds=30.0),
     ["leased"], ["leased by worker w1@host", "last heartbeat 10s ago", "lease expires in 20s"]),
    ("leased, length unknown", NodeFacts("running", lease_owner="w1", lease_expires_at=NOW + 5 * S),
     ["leased"], ["leased by worker w1", "lease expires in 5s"]),
    ("lease expired", NodeFacts("running", lease_owner="w2", lease_expires_at=NOW - 90 * S, lease_seconds=30.0),
     ["lease_expired"], ["lease of worker w2 expired 1m 30s ago", "recovery sweep"]),
    ("rolling back", NodeFacts("rolling_back", lease_owner="w3", lease_expires_at=NOW + 29 * S, lease_seconds=30.0),
     ["leased"], ["rolling back, leased by worker w3", "last heartbeat 1s ago"]),
    ("backing off", NodeFacts("retrying", run_at=NOW + 125 * S, attempt=3, error="TimeoutError: slow\nmore"),
     ["backoff"], ["backing off until 2025-03-01 12:02:05 UTC (in 2m 5s)", "after attempt 2 failed",
                   "TimeoutError: slow"]),
    ("rollback backing off", NodeFacts("retrying", run_at=NOW + 10 * S, in_rollback=True),
     ["backoff"], ["the next rollback runs then"]),
    ("retrying and due", NodeFacts("retrying", run_at=NOW - 5 * S), ["due"], ["due since", "(5s ago)"]),
    ("run_after in the future", NodeFacts("ready", run_at=NOW + timedelta(hours=2)),
     ["scheduled"], ["not due until 2025-03-01 14:00:00 UTC (in 2h)"]),
    ("due, waiting for a worker", NodeFacts("ready", run_at=NOW - 65 * S),
     ["due"], ["due since 2025-03-01 11:58:55 UTC (1m 5s ago) and waiting for a worker"]),
    ("lock key held", NodeFacts("ready", run_at=NOW - S, waiting_for_keys=True,
                                key_waits=(KeyWait("tenant:acme", "exclusive", ("1111",)),)),
     ["lock"], ["waiting for lock key 'tenant:acme' (exclusive) held by procedure 1111"]),
    ("lock key held by many", NodeFacts("ready", run_at=NOW - S, waiting_for_keys=True,
                                        key_waits=(KeyWait("db", "shared", ("a", "b", "c", "d", "e")),)),
     ["lock"], ["held by procedures a, b, c and 2 more"]),
    ("lock key free again", NodeFacts("ready", run_at=NOW - S, waiting_for_keys=True,
                                      key_waits=(KeyWait("db"),)),
     ["lock"], ["waiting for 'db', which nobody holds now"]),
    ("unknown type", NodeFacts("ready", run_at=NOW - S, type_known=False, type_name="gone.Type"),
     ["unknown_type"], ["no running worker knows its type gone.Type"]),
    ("unknown type and backing off", NodeFacts("retrying", run_at=NOW + 60 * S, type_known=False, type_name="x.Y"),
     ["unknown_type", "backoff"], ["no running worker knows", "backing off until"]),
    ("key wait and not yet due", NodeFacts("ready", run_at=NOW + 60 * S,
                                           key_waits=(KeyWait("k", "exclusive", ("p",)),)),
     ["scheduled", "lock"], ["not due until", "held by procedure p"]),
    ("newer version", NodeFacts("ready", run_at=NOW - S, type_name="shop.Ship", version=3, code_version=2),
     ["newer_version"], ["written by version 3 of shop.Ship, newer than version 2 in this code",
                         "finish deploying that version"]),
    ("same version", NodeFacts("ready", run_at=NOW - S, version=2, code_version=2), ["due"], []),
    ("odd status", NodeFacts("sideways"), ["unknown"], ["unexpected status 'sideways'"]),
]


@pytest.mark.parametrize(("facts", "codes", "fragments"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_explain(facts, codes, fragments):
    reasons = explain(facts, NOW)
    assert [r.code for r in reasons] == codes
    text = " | ".join(r.text for r in reasons)
    for fragment in fragments:
        assert fragment in text


def test_leases_are_read_against_the_database_clock():
    facts = NodeFacts("running", lease_owner="w", lease_expires_at=NOW + 20 * S, lease_seconds=30.0)
    (reason,) = explain(facts, NOW, lease_now=NOW + 5 * S)  # the database clock is 5 s ahead of this host
    assert reason.code == "leased" and "last heartbeat 15s ago" in reason.text


@pytest.mark.parametrize(("seconds", "text"), [(0, "0s"), (59.4, "59s"), (60, "1m"), (200, "3m 20s"),
                                               (3600, "1h"), (7500, "2h 5m"), (86400, "1d"), (273600, "3d 4h"),
                                               (-5, "0s")])
def test_duration(seconds, text):
    assert duration(seconds) == text


@pytest.mark.parametrize(("text", "limit", "line"), [("", 10, ""), ("\n\n  first  \nsecond", 50, "first"),
                                                     ("abcdefghijkl", 6, "abcde…")])
def test_first_line(text, limit, line):
    assert first_line(text, limit) == line


def test_a_ready_procedure_over_a_limit_names_it():
    now = datetime(2030, 1, 1, tzinfo=UTC)
    facts = NodeFacts(status="ready", run_at=now, limits_full=("crm-api: 5 of 5 running",))
    (reason,) = explain(facts, now)
    assert reason.code == "limit"
    assert reason.text.startswith("over its limit crm-api: 5 of 5 running")
