"""``Status.sleep`` checks its arguments where it is called, and says what to pass instead."""

import math
from datetime import UTC, datetime, timedelta

import pytest

from django_procedures import Status, clock
from django_procedures.policy.waiting import wake_time

NOW = datetime(2030, 6, 1, tzinfo=UTC)


@pytest.mark.parametrize(("delay", "expected"), [
    (timedelta(days=14), NOW + timedelta(days=14)), (30, NOW + timedelta(seconds=30)),
    (0.5, NOW + timedelta(seconds=0.5)), (0, NOW),
])
def test_a_delay_is_a_timedelta_or_seconds_from_now(delay, expected):
    with clock.frozen_at(NOW):
        status = Status.sleep(delay)
    assert (status.kind, status.wake_at) == ("sleeping", expected)


def test_until_is_an_aware_datetime_kept_as_given():
    at = datetime(2031, 1, 1, 12, tzinfo=UTC)
    assert Status.sleep(until=at).wake_at == at


@pytest.mark.parametrize(("args", "kwargs", "message"), [
    ((-1,), {}, "zero or more seconds"),
    ((timedelta(seconds=-1),), {}, "zero or more seconds"),
    ((math.nan,), {}, "finite"),
    ((math.inf,), {}, "finite"),
    ((-math.inf,), {}, "finite"),
    ((timedelta(days=40_000),), {}, "at most 36525 days"),
    (("10",), {}, "a timedelta or a number of seconds; got str"),
    ((True,), {}, "a timedelta or a number of seconds; got bool"),
    ((), {"until": datetime(2031, 1, 1)}, "aware datetime; got the naive 2031-01-01T00:00:00"),
    ((), {"until": "2031-01-01"}, "aware datetime; got str"),
    ((), {}, "a delay or until=, not both and not neither"),
    ((5,), {"until": datetime(2031, 1, 1, tzinfo=UTC)}, "not both and not neither"),
])
def test_bad_arguments_are_a_value_error_saying_what_to_pass(args, kwargs, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        Status.sleep(*args, **kwargs)


def test_wake_time_is_the_policy_behind_it():
    assert wake_time(None, NOW, now=NOW - timedelta(days=1)) == NOW
