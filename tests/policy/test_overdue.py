"""policy.overdue: a schedule is overdue once two more ticks after its next tick have passed."""

from datetime import UTC, datetime, timedelta

import pytest

from django_procedures.policy.cron import CronExpression
from django_procedures.policy.overdue import overdue_lag
from django_procedures.policy.schedule import every

T0 = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
MIN = timedelta(minutes=1)


@pytest.mark.parametrize(("next_tick_at", "now", "lag"), [
    (None, T0, None),  # paused, or a fixed_delay run still going
    (T0, T0 - MIN, None),  # not due yet
    (T0, T0 + MIN, None),  # one tick late: a busy ticker
    (T0, T0 + 2 * MIN, None),  # exactly two periods: not more than two
    (T0, T0 + 2 * MIN + timedelta(seconds=1), 2 * MIN + timedelta(seconds=1)),
    (T0, T0 + timedelta(days=3), timedelta(days=3)),  # the lag keeps growing while nothing ticks
])
def test_a_period_schedule_is_overdue_past_two_periods(next_tick_at, now, lag):
    assert overdue_lag(next_tick_at, now, every(MIN)) == lag


def test_a_cron_schedule_is_overdue_once_its_next_two_fire_times_have_passed():
    daily = CronExpression.parse("0 9 * * 1-5")  # weekdays at 09:00; 2030-01-04 is a Friday
    cadence = lambda after: daily.next_after(after, UTC)  # noqa: E731
    friday = datetime(2030, 1, 4, 9, 0, tzinfo=UTC)
    # Two calendar days later is a Sunday: Monday's fire time has not come, so one missed tick at most.
    assert overdue_lag(friday, friday + timedelta(days=3), cadence) is None
    # Monday and Tuesday have passed too.
    assert overdue_lag(friday, friday + timedelta(days=4, minutes=1), cadence) == timedelta(days=4, minutes=1)
