"""``policy.options.Options``: the submit options as one value, checked once, when it is made."""

import dataclasses
from datetime import UTC, datetime, timedelta

import pytest

from django_procedures.policy.options import Options


def test_options_are_checked_when_made_with_the_messages_submit_gives():
    with pytest.raises(TypeError, match="queue must be a queue name"):
        Options(queue=5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="priority must be between"):
        Options(priority=2**31)
    with pytest.raises(ValueError, match="key '' is empty or blank"):
        Options(key="")
    with pytest.raises(ValueError, match="naive datetime"):
        Options(run_after=datetime(2030, 1, 1))


def test_a_number_of_seconds_is_kept_as_a_timedelta_and_unset_options_are_left_to_the_class():
    moment = datetime(2030, 1, 1, tzinfo=UTC)
    assert Options(run_after=60).run_after == timedelta(seconds=60)
    assert Options(run_after=moment, queue="io").given() == {"queue": "io", "run_after": moment}
    assert Options().given() == {}


def test_a_changed_copy_is_checked_again():
    with pytest.raises(ValueError, match="at most 100"):
        dataclasses.replace(Options(queue="io"), queue="q" * 101)
