"""Tests for policy.cron's next fire times: in UTC, across DST, and as properties (pure: no Django)."""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from django_procedures.policy.cron import CronError, CronExpression
from tests.policy.test_cron import BERLIN, NEW_YORK, fires, utc

# --- next fire times in UTC ---------------------------------------------------------------

@pytest.mark.parametrize(
    ("expr", "after", "expected"),
    [
        # strictly after, truncation of seconds
        ("* * * * *", "2024-05-01 10:00", ["2024-05-01 10:01:00"]),
        ("* * * * *", "2024-05-01 10:00:00.000001", ["2024-05-01 10:01:00"]),
        ("* * * * *", "2024-05-01 10:00:59.999999", ["2024-05-01 10:01:00"]),
        ("0 * * * *", "2024-05-01 10:00", ["2024-05-01 11:00:00"]),
        ("*/15 * * * *", "2024-05-01 10:07", ["2024-05-01 10:15:00", "2024-05-01 10:30:00"]),
        ("0 9-17/4 * * *", "2024-05-01 13:00", ["2024-05-01 17:00:00", "2024-05-02 09:00:00"]),
        # rollovers
        ("59 23 * * *", "2024-12-31 23:59", ["2025-01-01 23:59:00"]),
        ("0 0 1 1 *", "2024-12-31 23:59", ["2025-01-01 00:00:00", "2026-01-01 00:00:00"]),
        ("@monthly", "2024-01-31 12:00", ["2024-02-01 00:00:00", "2024-03-01 00:00:00"]),
        ("@weekly", "2024-05-01 00:00", ["2024-05-05 00:00:00", "2024-05-12 00:00:00"]),
        ("@hourly", "2024-05-01 23:30", ["2024-05-02 00:00:00"]),
        ("@yearly", "2024-06-01 00:00", ["2025-01-01 00:00:00"]),
        # month ends
        ("0 0 31 * *", "2024-04-01 00:00", ["2024-05-31 00:00:00", "2024-07-31 00:00:00"]),
        ("0 0 30 * *", "2023-01-31 00:00", ["2023-03-30 00:00:00"]),
        ("0 12 31 2,3 *", "2024-02-01 00:00", ["2024-03-31 12:00:00", "2025-03-31 12:00:00"]),
        ("0 0 28-31 2 *", "2023-02-27 00:00", ["2023-02-28 00:00:00", "2024-02-28 00:00:00"]),
        # leap years
        ("0 0 29 2 *", "2024-03-01 00:00", ["2028-02-29 00:00:00", "2032-02-29 00:00:00"]),
        ("0 0 29 2 *", "2024-02-28 23:59", ["2024-02-29 00:00:00"]),
        ("0 0 29 2 *", "2097-01-01 00:00", ["2104-02-29 00:00:00"]),  # 2100 is no leap year
        ("0 0 29 2 *", "1999-01-01 00:00", ["2000-02-29 00:00:00"]),  # 2000 is one
        # day-of-month and day-of-week: OR when both are restricted, AND otherwise
        ("0 0 13 * FRI", "2024-09-01 00:00",
         ["2024-09-06 00:00:00", "2024-09-13 00:00:00", "2024-09-20 00:00:00",
          "2024-09-27 00:00:00", "2024-10-04 00:00:00", "2024-10-11 00:00:00",
          "2024-10-13 00:00:00"]),
        ("0 0 1 * MON", "2024-04-01 00:00", ["2024-04-08 00:00:00", "2024-04-15 00:00:00"]),
        ("0 0 * * MON", "2024-04-01 00:00", ["2024-04-08 00:00:00"]),
        ("0 0 1 * *", "2024-04-01 00:00", ["2024-05-01 00:00:00"]),
        ("0 0 */10 * 0", "2024-09-01 00:00",
         ["2024-09-08 00:00:00", "2024-09-11 00:00:00", "2024-09-15 00:00:00"]),
        ("0 0 30 2 1", "2024-02-01 00:00", ["2024-02-05 00:00:00"]),
        ("0 0 1-31 * MON", "2024-04-01 00:00", ["2024-04-08 00:00:00"]),  # 1-31 counts as *
        ("0 0 * JAN MON", "2024-02-01 00:00", ["2025-01-06 00:00:00"]),
    ],
)
def test_next_after_utc(expr, after, expected):
    assert fires(expr, after, UTC, len(expected)) == expected


# --- DST --------------------------------------------------------------------------------------
# Europe/Berlin 2024: 02:00 CET -> 03:00 CEST on Mar 31 (01:00 UTC);
#                     03:00 CEST -> 02:00 CET on Oct 27 (01:00 UTC), 02:00-02:59 happens twice.
# America/New_York 2024: 02:00 EST -> 03:00 EDT on Mar 10 (07:00 UTC);
#                        02:00 EDT -> 01:00 EST on Nov 3 (06:00 UTC), 01:00-01:59 happens twice.

@pytest.mark.parametrize(
    ("expr", "tz", "after", "expected"),
    [
        # Berlin spring forward: 02:30 does not exist and fires at 03:00 CEST, once.
        ("30 2 * * *", BERLIN, "2024-03-30 12:00",
         ["2024-03-31 01:00:00", "2024-04-01 00:30:00", "2024-04-02 00:30:00"]),
        ("0 3 * * *", BERLIN, "2024-03-30 12:00", ["2024-03-31 01:00:00", "2024-04-01 01:00:00"]),
        ("30 1 * * *", BERLIN, "2024-03-30 12:00", ["2024-03-31 00:30:00", "2024-03-31 23:30:00"]),
        ("*/15 * * * *", BERLIN, "2024-03-31 00:30",
         ["2024-03-31 00:45:00", "2024-03-31 01:00:00", "2024-03-31 01:15:00"]),
        ("0,30 2,3 * * *", BERLIN, "2024-03-31 00:00",
         ["2024-03-31 01:00:00", "2024-03-31 01:30:00", "2024-04-01 00:00:00"]),
        # Berlin fall back: 02:30 happens twice and fires at the first (CEST) one.
        ("30 2 * * *", BERLIN, "2024-10-26 12:00",
         ["2024-10-27 00:30:00", "2024-10-28 01:30:00"]),
        ("0 3 * * *", BERLIN, "2024-10-26 12:00", ["2024-10-27 02:00:00", "2024-10-28 02:00:00"]),
        # */15 fires through the first pass of the repeated hour only.
        ("*/15 * * * *", BERLIN, "2024-10-27 00:20",
         ["2024-10-27 00:30:00", "2024-10-27 00:45:00", "2024-10-27 02:00:00",
          "2024-10-27 02:15:00"]),
        ("*/15 * * * *", BERLIN, "2024-10-27 01:10", ["2024-10-27 02:00:00"]),  # second pass
        ("*/15 * * * *", BERLIN, "2024-10-27 00:45", ["2024-10-27 02:00:00"]),
        # New York spring forward: 02:30 EST does not exist -> 03:00 EDT.
        ("30 2 * * *", NEW_YORK, "2024-03-09 12:00",
         ["2024-03-10 07:00:00", "2024-03-11 06:30:00"]),
        ("0 * * * *", NEW_YORK, "2024-03-10 06:30",
         ["2024-03-10 07:00:00", "2024-03-10 08:00:00"]),
        # New York fall back: 01:30 happens twice and fires at 01:30 EDT.
        ("30 1 * * *", NEW_YORK, "2024-11-02 12:00",
         ["2024-11-03 05:30:00", "2024-11-04 06:30:00"]),
        ("0 * * * *", NEW_YORK, "2024-11-03 04:30",
         ["2024-11-03 05:00:00", "2024-11-03 07:00:00", "2024-11-03 08:00:00"]),
        ("0 * * * *", NEW_YORK, "2024-11-03 05:59:59", ["2024-11-03 07:00:00"]),
        ("0 * * * *", NEW_YORK, "2024-11-03 06:00", ["2024-11-03 07:00:00"]),
        # ordinary days keep their offsets: 09:00 CET vs CEST
        ("0 9 * * *", BERLIN, "2024-01-10 12:00", ["2024-01-11 08:00:00"]),
        ("0 9 * * *", BERLIN, "2024-07-10 12:00", ["2024-07-11 07:00:00"]),
        ("0 9 * * *", NEW_YORK, "2024-07-10 00:00", ["2024-07-10 13:00:00"]),
        # a whole skipped day (Samoa, 2011-12-30) fires once at the end of the gap
        ("0 12 * * *", ZoneInfo("Pacific/Apia"), "2011-12-29 12:00",
         ["2011-12-29 22:00:00", "2011-12-30 10:00:00", "2011-12-30 22:00:00"]),
        # Lord Howe has a 30-minute DST shift: 02:15 does not exist on 2024-10-06
        ("15 2 * * *", ZoneInfo("Australia/Lord_Howe"), "2024-10-05 12:00",
         ["2024-10-05 15:30:00", "2024-10-06 15:15:00"]),
    ],
)
def test_next_after_dst(expr, tz, after, expected):
    assert fires(expr, after, tz, len(expected)) == expected


@pytest.mark.parametrize(
    "after",
    [
        datetime(2024, 3, 31, 0, 30, tzinfo=UTC),
        datetime(2024, 3, 31, 1, 30, tzinfo=BERLIN),
        datetime(2024, 3, 30, 20, 30, tzinfo=NEW_YORK),
        datetime(2024, 3, 31, 9, 30, tzinfo=ZoneInfo("Asia/Tokyo")),
        datetime(2024, 3, 31, 6, 0, tzinfo=timezone(timedelta(hours=5, minutes=30))),
    ],
)
def test_input_zone_does_not_matter(after):
    """The same instant in any zone gives the same fire time, always in UTC."""
    fire = CronExpression.parse("30 2 * * *").next_after(after, BERLIN)
    assert fire == utc("2024-03-31 01:00")
    assert fire.tzinfo is UTC


def test_schedule_zone_matters_and_may_be_a_name():
    expr = CronExpression.parse("0 9 * * *")
    after = utc("2024-07-10 00:00")
    assert expr.next_after(after, UTC) == utc("2024-07-10 09:00")
    assert expr.next_after(after, "Asia/Tokyo") == utc("2024-07-11 00:00")
    assert expr.next_after(after, ZoneInfo("Asia/Tokyo")) == utc("2024-07-11 00:00")
    assert expr.next_after(after, timezone(timedelta(hours=-3))) == utc("2024-07-10 12:00")


def test_fold_1_input_is_read_as_its_real_instant():
    # 02:10 CET (second pass) is 01:10 UTC; the first-pass 02:15 CEST has already gone by.
    after = datetime(2024, 10, 27, 2, 10, fold=1, tzinfo=BERLIN)
    assert CronExpression.parse("15 2 * * *").next_after(after, BERLIN) == utc("2024-10-28 01:15")
    after = datetime(2024, 10, 27, 2, 10, fold=0, tzinfo=BERLIN)
    assert CronExpression.parse("15 2 * * *").next_after(after, BERLIN) == utc("2024-10-27 00:15")


def test_naive_after_is_rejected():
    with pytest.raises(ValueError, match="timezone-aware"):
        CronExpression.parse("* * * * *").next_after(datetime(2024, 1, 1), UTC)


def test_no_fire_time_in_range_is_a_cron_error():
    with pytest.raises(CronError, match="does not fire"):
        CronExpression.parse("0 0 29 2 *").next_after(utc("9997-01-01 00:00"), UTC)


def test_matches_reads_wall_fields():
    expr = CronExpression.parse("30 2 13 * FRI")
    assert expr.matches(datetime(2024, 9, 13, 2, 30))  # Friday the 13th
    assert expr.matches(datetime(2024, 9, 6, 2, 30))  # a Friday
    assert expr.matches(datetime(2024, 10, 13, 2, 30, tzinfo=BERLIN))  # a 13th; tz ignored
    assert not expr.matches(datetime(2024, 9, 7, 2, 30))
    assert not expr.matches(datetime(2024, 9, 13, 2, 31))


def test_sparse_expressions_are_fast():
    apia = ZoneInfo("Pacific/Apia")
    cases = [
        ("0 0 29 2 *", utc("2097-01-01 00:00"), NEW_YORK),
        ("59 23 31 12 *", utc("2024-01-01 00:00"), BERLIN),
        ("0 0 29 2 1", utc("2024-03-01 00:00"), UTC),
        ("* * * * *", datetime(2024, 10, 27, 2, 0, fold=1, tzinfo=BERLIN), BERLIN),
        ("* * * * *", utc("2011-12-30 10:00"), apia),
    ]
    start = time.perf_counter()
    for _ in range(20):
        for text, after, tz in cases:
            CronExpression.parse(text).next_after(after, tz)
    assert time.perf_counter() - start < 5


# --- properties -------------------------------------------------------------------------------

ZONES = [UTC, BERLIN, NEW_YORK, ZoneInfo("Australia/Lord_Howe"), ZoneInfo("Asia/Kolkata"),
         ZoneInfo("America/Sao_Paulo"), ZoneInfo("Pacific/Apia")]


def _field(lo: int, hi: int) -> st.SearchStrategy[str]:
    value = st.integers(lo, hi)
    item = st.one_of(
        value.map(str),
        st.tuples(value, value).map(lambda p: f"{min(p)}-{max(p)}"),
        st.integers(1, hi).map(lambda n: f"*/{n}"),
        st.tuples(value, value, st.integers(1, hi)).map(lambda p: f"{min(p[:2])}-{max(p[:2])}/{p[2]}"),
        st.tuples(value, st.integers(1, hi)).map(lambda p: f"{p[0]}/{p[1]}"),
    )
    return st.one_of(st.just("*"), st.lists(item, min_size=1, max_size=3).map(",".join))


@st.composite
def expressions(draw) -> CronExpression:
    text = " ".join(draw(_field(lo, hi)) for lo, hi in [(0, 59), (0, 23), (1, 31), (1, 12), (0, 7)])
    try:
        return CronExpression.parse(text)
    except CronError:
        assume(False)
        raise


instants = st.datetimes(
    min_value=datetime(1990, 1, 1), max_value=datetime(2060, 1, 1), timezones=st.sampled_from(ZONES)
)
# make test-fast sets PROCEDURES_PROPERTY_EXAMPLES lower: the inner loop keeps the properties, not their depth.
PROPERTY = settings(max_examples=int(os.environ.get("PROCEDURES_PROPERTY_EXAMPLES", "300")), deadline=None,
                    database=None)


def _is_gap_end(instant: datetime, tz) -> bool:
    """Whether the clocks of ``tz`` jumped forward at ``instant``."""
    before = (instant - timedelta(seconds=1)).astimezone(tz).utcoffset()
    return before < instant.astimezone(tz).utcoffset()


@PROPERTY
@given(expressions(), instants, st.sampled_from(ZONES))
def test_next_after_is_later_and_matches(expr, after, tz):
    fire = expr.next_after(after, tz)
    assert fire > after
    assert fire.tzinfo is UTC
    local = fire.astimezone(tz)
    if expr.matches(local):
        assert local.second == 0 and local.microsecond == 0 and local.fold == 0
    else:  # moved forward out of a spring-forward gap
        assert _is_gap_end(fire, tz)


@PROPERTY
@given(expressions(), instants, st.timedeltas(timedelta(0), timedelta(days=40)), st.sampled_from(ZONES))
def test_next_after_is_monotonic(expr, after, delta, tz):
    later = after.astimezone(UTC) + delta  # real time: wall-clock arithmetic could go back
    assert expr.next_after(after, tz) <= expr.next_after(later, tz)


@PROPERTY
@given(expressions(), instants, st.sampled_from(ZONES))
def test_nothing_fires_in_between(expr, after, tz):
    """Brute force, minute by minute: no first-pass instant before the result matches."""
    fire = expr.next_after(after, tz)
    assert expr.next_after(after.astimezone(UTC) + (fire - after) // 2, tz) == fire
    assume(fire - after <= timedelta(days=2))
    t = after.astimezone(UTC).replace(second=0, microsecond=0) + timedelta(minutes=1)
    while t < fire:
        local = t.astimezone(tz)
        assert local.fold == 1 or not expr.matches(local), t
        t += timedelta(minutes=1)


@PROPERTY
@given(expressions())
def test_normalised_text_round_trips(expr):
    assert CronExpression.parse(str(expr)) == expr
    assert str(CronExpression.parse(str(expr))) == str(expr)
