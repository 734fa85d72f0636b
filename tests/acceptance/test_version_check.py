"""Acceptance: check W005 of docs/changing-procedures.md, through Django's own check framework."""

from datetime import UTC, datetime

import pytest
from django.core import checks

from django_procedures import Procedure, Status, step
from django_procedures.testing import drain, isolated_registry

pytestmark = pytest.mark.django_db
T0 = datetime(2030, 1, 1, tzinfo=UTC)


def define(names, version=1, sleeper=None):
    def plain(self, ctx):
        return None

    def sleeps(self, ctx):
        return Status.sleep(3600)

    body = {"type_name": "acc.Checked", "version": version, "__module__": __name__,
            **{n: step(sleeps if n == sleeper else plain) for n in names}}
    return type("Checked", (Procedure,), body)


def w005():
    return [m for m in checks.run_checks(databases=["default"]) if m.id == "django_procedures.W005"]


def park(names, at):
    """A run of the old class stands at the step after ``at`` (it slept there)."""
    with isolated_registry():
        old = define(names, sleeper=at)
        old.submit({}, run_after=T0)
        drain(now=T0)
        assert w005() == []


@pytest.mark.parametrize("old,new", [
    (["a", "b", "c"], ["a", "c"]),          # the step it stands at is removed
    (["a", "b", "c"], ["b", "a", "c"]),     # reordered
    (["a", "b", "c"], ["x", "a", "b", "c"]),  # one added before it
])
def test_a_changed_step_list_at_the_same_version_warns(old, new):
    park(old, at="a")  # stands at b
    with isolated_registry():
        define(new)
        assert len(w005()) == 1
    with isolated_registry():
        define(new, version=2)
        assert w005() == []


def test_a_step_added_after_where_runs_stand_does_not_warn():
    park(["a", "b"], at="a")
    with isolated_registry():
        define(["a", "b", "c"])
        assert w005() == []
