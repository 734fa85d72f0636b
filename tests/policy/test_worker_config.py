"""WorkerConfig.resolve: PROCEDURES with the command line laid over it, and every rule applied (no database)."""

import math

import pytest

from django_procedures.conf import DEFAULTS
from django_procedures.policy.worker_config import WorkerConfig, WorkerConfigError, settings_problems


def resolve(settings=None, *, sqlite=False, **command_line):
    return WorkerConfig.resolve({**DEFAULTS, **(settings or {})}, sqlite=sqlite, **command_line)


def problems(settings=None, *, sqlite=False, **command_line):
    with pytest.raises(WorkerConfigError) as raised:
        resolve(settings, sqlite=sqlite, **command_line)
    return raised.value.problems


def test_defaults():
    config = resolve()
    assert (config.lease_seconds, config.renewal_timeout, config.idle_in_transaction_timeout) == (30, 20, 60)
    assert (config.concurrency, config.prefetch, config.shutdown_timeout, config.queues) == (4, 32, 30, None)
    assert resolve(sqlite=True).concurrency == 1


def test_the_command_line_wins_and_the_derived_timeouts_follow_its_lease():
    config = resolve({"LEASE_SECONDS": 60, "CONCURRENCY": 8, "POLL_SECONDS": 0.25}, lease_seconds=9,
                     concurrency=2, queues=["a", "b"], shutdown_timeout=0, worker_id="w1")
    assert (config.lease_seconds, config.renewal_timeout, config.idle_in_transaction_timeout) == (9, 6, 18)
    assert (config.concurrency, config.queues, config.shutdown_timeout, config.worker_id) == (2, ("a", "b"), 0, "w1")
    assert config.poll_seconds == 0.25


def test_the_workers_own_connections_wait_twice_the_lease_at_most_whatever_a_step_may():
    assert resolve().own_idle_timeout == 60
    assert resolve({"IDLE_IN_TRANSACTION_TIMEOUT_SECONDS": 600}).own_idle_timeout == 60
    assert resolve({"IDLE_IN_TRANSACTION_TIMEOUT_SECONDS": 45}).own_idle_timeout == 45
    assert resolve({"IDLE_IN_TRANSACTION_TIMEOUT_SECONDS": 600}, lease_seconds=2).own_idle_timeout == 4


def test_an_option_replaces_a_setting_the_checks_refuse_for_its_worker():
    (problem,) = settings_problems({**DEFAULTS, "LEASE_SECONDS": 0.5}, sqlite=False)
    assert problem.id == "django_procedures.E003"
    assert resolve({"LEASE_SECONDS": 0.5}, lease_seconds=5).lease_seconds == 5


def test_an_explicit_renewal_timeout_is_kept_to_two_thirds_of_the_lease():
    # Between a third of the lease and the lease passes the rule; the heartbeat still never waits past 2/3.
    assert resolve({"RENEWAL_TIMEOUT_SECONDS": 25}).renewal_timeout == 20
    assert resolve({"RENEWAL_TIMEOUT_SECONDS": 12}).renewal_timeout == 12


def test_the_config_is_frozen():
    with pytest.raises(AttributeError):
        resolve().lease_seconds = 1  # type: ignore[misc]


@pytest.mark.parametrize(("settings", "command_line", "code"), [
    ({"IDLE_IN_TRANSACTION_TIMEOUT_SECONDS": 60}, {"lease_seconds": 120}, "E005"),
    ({"RENEWAL_TIMEOUT_SECONDS": 20}, {"lease_seconds": 120}, "E004"),
    ({"RENEWAL_TIMEOUT_SECONDS": 15}, {"lease_seconds": 10}, "E004"),
    ({"RENEWAL_TIMEOUT_SECONDS": "soon"}, {}, "E004"),
    ({"IDLE_IN_TRANSACTION_TIMEOUT_SECONDS": "1m"}, {}, "E005"),
    ({"PREFETCH": -1}, {}, "E011"),
    ({"POLL_SECONDS": math.inf}, {}, "E003"),
    ({"TICK_SECONDS": 0}, {}, "E003"),
])
def test_each_rule(settings, command_line, code):
    (problem,) = problems(settings, **command_line)
    assert problem.id == f"django_procedures.{code}"


def test_sqlite_allows_one_thread_whichever_way_it_is_asked_for():
    (from_setting,) = problems({"CONCURRENCY": 2}, sqlite=True)
    (from_option,) = problems(sqlite=True, concurrency=2)
    assert from_setting.id == from_option.id == "django_procedures.E008"
    assert from_setting.msg == from_option.msg == (
        "a concurrency of 2 is not possible on SQLite, which allows one writer at a time")
    assert "PROCEDURES['CONCURRENCY'] to 1" in from_setting.hint and "--concurrency to 1" in from_option.hint
    assert resolve({"CONCURRENCY": 2}, sqlite=True, concurrency=1).concurrency == 1


def test_every_problem_is_reported_at_once():
    found = problems({"IDLE_IN_TRANSACTION_TIMEOUT_SECONDS": 5, "PREFETCH": "8"}, concurrency=0,
                     worker_id="x" * 300, queues=["ok", "a,b"])
    assert [p.id for p in found] == ["django_procedures.E005", "django_procedures.E006",
                                     "django_procedures.E011", None, None]


def test_options_without_a_setting_have_no_check_id():
    (empty,) = problems(queues=[])
    assert empty.id is None and str(empty) == (
        "--queues needs at least one queue name; leave it out to serve every queue")


def test_settings_problems_is_what_the_check_reports():
    assert settings_problems(DEFAULTS, sqlite=False) == []
    (problem,) = settings_problems({**DEFAULTS, "LEASE_SECONDS": 0}, sqlite=False)
    assert problem.msg == "PROCEDURES['LEASE_SECONDS'] must be between 1 and 86400 seconds (one day); got 0"
