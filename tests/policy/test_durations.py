from datetime import timedelta

import pytest

from django_procedures.policy.durations import parse_duration


@pytest.mark.parametrize(("text", "expected"), [
    ("7d", timedelta(days=7)), ("12h", timedelta(hours=12)), ("30m", timedelta(minutes=30)),
    ("90s", timedelta(seconds=90)), ("2w", timedelta(weeks=2)), ("1d12h", timedelta(days=1, hours=12)),
    (" 1.5h ", timedelta(minutes=90)), (3600, timedelta(hours=1)), (timedelta(days=3), timedelta(days=3)),
])
def test_durations(text, expected):
    assert parse_duration(text) == expected


@pytest.mark.parametrize("text", ["", "7", "7x", "d7", "7d garbage", "-1d", "0d", None, True])
def test_bad_durations_say_how_to_write_one(text):
    with pytest.raises(ValueError, match="duration"):
        parse_duration(text)
