"""Tests for django_procedures.policy.cron's parsing (pure: no Django); next fire times: test_cron_next.py."""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest

from django_procedures.policy.cron import CronError, CronExpression

BERLIN = ZoneInfo("Europe/Berlin")
NEW_YORK = ZoneInfo("America/New_York")


def utc(text: str) -> datetime:
    """``"2024-03-31 01:00"`` as an aware UTC datetime."""
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def fires(expr: str, after: str, tz=UTC, count: int = 1) -> list[str]:
    """The next ``count`` fire times after the UTC time ``after``, as UTC strings."""
    cron, t, out = CronExpression.parse(expr), utc(after), []
    for _ in range(count):
        t = cron.next_after(t, tz)
        out.append(t.strftime("%Y-%m-%d %H:%M:%S"))
    return out


# --- parsing --------------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("text", "field", "values"),
    [
        ("* * * * *", "minutes", tuple(range(60))),
        ("7 * * * *", "minutes", (7,)),
        ("0,30,15 * * * *", "minutes", (0, 15, 30)),
        ("10-14 * * * *", "minutes", (10, 11, 12, 13, 14)),
        ("*/15 * * * *", "minutes", (0, 15, 30, 45)),
        ("10-30/10 * * * *", "minutes", (10, 20, 30)),
        ("50/4 * * * *", "minutes", (50, 54, 58)),
        ("1-3,*/20,59 * * * *", "minutes", (0, 1, 2, 3, 20, 40, 59)),
        ("* */6 * * *", "hours", (0, 6, 12, 18)),
        ("* 23 * * *", "hours", (23,)),
        ("* * 1,15,31 * *", "days", (1, 15, 31)),
        ("* * */10 * *", "days", (1, 11, 21, 31)),
        ("* * * jan,Jul,DEC *", "months", (1, 7, 12)),
        ("* * * FEB-apr *", "months", (2, 3, 4)),
        ("* * * */3 *", "months", (1, 4, 7, 10)),
        ("* * * 2/5 *", "months", (2, 7, 12)),
        ("* * * * 0", "weekdays", (0,)),
        ("* * * * 7", "weekdays", (0,)),
        ("* * * * sun", "weekdays", (0,)),
        ("* * * * MON-FRI", "weekdays", (1, 2, 3, 4, 5)),
        ("* * * * 5-7", "weekdays", (0, 5, 6)),
        ("* * * * Sat,sun", "weekdays", (0, 6)),
        ("* * * * */2", "weekdays", (0, 2, 4, 6)),
        ("* * * * 1-7/3", "weekdays", (0, 1, 4)),
        ("* * * * 0-7", "weekdays", tuple(range(7))),
        ("  5\t4  * *   * ", "minutes", (5,)),
    ],
)
def test_parse_fields(text, field, values):
    assert getattr(CronExpression.parse(text), field) == values


@pytest.mark.parametrize(
    ("text", "normalised"),
    [
        ("* * * * *", "* * * * *"),
        ("0-59 0-23 1-31 1-12 0-7", "* * * * *"),
        ("*/1 * * * *", "* * * * *"),
        ("30,0 9-17 * * mon-fri", "0,30 9-17 * * 1-5"),
        ("0 0 * * 7", "0 0 * * 0"),
        ("*/20 */8 */15 */6 */3", "*/20 */8 */15 1,7 */3"),
        ("*/30 */12 * */4 *", "0,30 0,12 * */4 *"),
        ("5/20 1-10/3 * JAN,mar-MAY FRI-6,7", "5,25,45 1,4,7,10 * 1,3-5 0,5,6"),
        ("0 0 1-31 * 1", "0 0 * * 1"),
        ("@hourly", "0 * * * *"),
        ("@daily", "0 0 * * *"),
        ("@midnight", "0 0 * * *"),
        ("@weekly", "0 0 * * 0"),
        ("@monthly", "0 0 1 * *"),
        ("@yearly", "0 0 1 1 *"),
        ("@annually", "0 0 1 1 *"),
        (" @DAILY ", "0 0 * * *"),
    ],
)
def test_normalised_text_and_equality(text, normalised):
    expr = CronExpression.parse(text)
    assert str(expr) == normalised
    assert expr == CronExpression.parse(normalised)
    assert hash(expr) == hash(CronExpression.parse(normalised))
    assert repr(expr) == f"CronExpression.parse({normalised!r})"


def test_different_expressions_are_unequal():
    assert CronExpression.parse("0 0 * * *") != CronExpression.parse("0 1 * * *")
    assert CronExpression.parse("0 0 1 * *") != CronExpression.parse("0 0 1 * 1")


def test_expression_is_frozen():
    with pytest.raises(AttributeError):
        CronExpression.parse("* * * * *").minutes = (1,)  # type: ignore[misc]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("61 * * * *", "minute must be between 0 and 59; got 61"),
        ("* 24 * * *", "hour must be between 0 and 23; got 24"),
        ("* * 0 * *", "day of month must be between 1 and 31; got 0"),
        ("* * 32 * *", "day of month must be between 1 and 31; got 32"),
        ("* * * 13 *", "month must be between 1 and 12 (or JAN-DEC); got 13"),
        ("* * * 0 *", "month must be between 1 and 12 (or JAN-DEC); got 0"),
        ("* * * FOO *", "month must be between 1 and 12 (or JAN-DEC); got 'FOO'"),
        ("* * * January *", "month must be between 1 and 12 (or JAN-DEC); got 'January'"),
        ("* * * * 8", "day of week must be between 0 and 7 (or SUN-SAT); got 8"),
        ("* * * * MONDAY", "day of week must be between 0 and 7 (or SUN-SAT); got 'MONDAY'"),
        ("* MON * * *", "hour must be between 0 and 23; got 'MON'"),
        ("* * * * JAN", "day of week must be between 0 and 7 (or SUN-SAT); got 'JAN'"),
        ("1-60 * * * *", "minute must be between 0 and 59; got 60"),
        ("*/0 * * * *", "minute step must be between 1 and 59; got 0"),
        ("*/60 * * * *", "minute step must be between 1 and 59; got 60"),
        ("* 1-5/24 * * *", "hour step must be between 1 and 23; got 24"),
        ("5-3 * * * *", "minute range '5-3' runs backwards; write the smaller value first"),
        ("* * * DEC-JAN *", "month range 'DEC-JAN' runs backwards; write the smaller value first"),
        (
            "* * * * FRI-SUN",
            "day of week range 'FRI-SUN' runs backwards; write the smaller value first "
            "(Sunday can also be written 7, as in 5-7)",
        ),
        ("* * *", "expected 5 fields (minute hour day month weekday) or an alias like @daily; got 3"),
        ("", "expected 5 fields (minute hour day month weekday) or an alias like @daily; got 0"),
        (
            "0 0 * * * *",
            "expected 5 fields (minute hour day month weekday) or an alias like @daily; got 6",
        ),
        (
            "@reboot",
            "unknown alias '@reboot'; use one of @yearly, @annually, @monthly, @weekly, @daily, "
            "@midnight, @hourly",
        ),
        ("0 0 30 2 *", "never fires: February has no day 30"),
        ("0 0 30,31 2 *", "never fires: February has no day 30 or 31"),
        ("0 0 31 4,6,9,11 *", "never fires: April, June, September and November have no day 31"),
    ],
)
def test_parse_errors(text, message):
    with pytest.raises(CronError) as info:
        CronExpression.parse(text)
    assert str(info.value) == f"cron expression {text!r}: {message}"


@pytest.mark.parametrize(
    ("text", "field", "item"),
    [
        ("1,,2 * * * *", "minute", "''"),
        ("*-5 * * * *", "minute", "'*-5'"),
        ("1-2-3 * * * *", "minute", "'1-2-3'"),
        ("* -1 * * *", "hour", "'-1'"),
        ("* */ * * *", "hour", "'*/'"),
        ("* * ? * *", "day of month", "'?'"),
        ("* * L * *", "day of month", None),
        ("* * * */x *", "month", "'*/x'"),
        ("* * * * 1#2", "day of week", "'1#2'"),
        ("* * * * MON,", "day of week", "''"),
        ("\u0663 * * * *", "minute", "'\u0663'"),
    ],
)
def test_invalid_items_name_field_and_value(text, field, item):
    with pytest.raises(CronError) as info:
        CronExpression.parse(text)
    message = str(info.value)
    assert message.startswith(f"cron expression {text!r}: {field} ")
    if item is not None:
        assert f"has an invalid item {item}; use *, a number" in message


def test_cron_error_is_value_error():
    assert issubclass(CronError, ValueError)


def test_parse_rejects_non_strings():
    with pytest.raises(TypeError, match="must be a string; got int"):
        CronExpression.parse(5)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "text", ["0 0 31 1-12 *", "0 0 29 2 *", "0 0 30 2 1", "0 0 31 2,3 *", "0 0 31 2 */2"]
)
def test_expressions_that_can_fire_parse(text):
    CronExpression.parse(text)
