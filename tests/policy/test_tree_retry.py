"""The tree-aware retry's decision, without a database: which runs come back, and what each then waits for."""

import pytest

from django_procedures.policy.tree_retry import Member, collateral_reason, plan


def member(pid, status="failed", parent=None, *, suspension=0, can_retry=True, handled=False, error=""):
    return Member(pid, "T", status, parent, 1 if parent else 0, suspension, can_retry, handled, error)


P = member("p", suspension=1)


@pytest.mark.parametrize(("below", "expected"), [
    ([], [("p", "ready", 0)]),
    ([member("a", "done", "p"), member("b", "failed", "p")], [("p", "waiting", 1), ("b", "ready", 0)]),
    ([member("b", "failed", "p", handled=True)], [("p", "ready", 0)]),  # its hook handled it: left alone
    ([member("b", "failed", "p"), member("c", "cancelled", "p", error=collateral_reason("p"))],
     [("p", "waiting", 2), ("b", "ready", 0), ("c", "ready", 0)]),
    ([member("b", "failed", "p", suspension=1), member("x", "failed", "b"),
      member("y", "cancelled", "b", error=collateral_reason("b"))],
     [("p", "waiting", 1), ("b", "waiting", 2), ("x", "ready", 0), ("y", "ready", 0)]),
])
def test_what_comes_back(below, expected):
    result = plan(P, below)
    assert result.refusal is None
    assert [(r.member.id, r.status, r.waits_for) for r in result.revivals] == expected


@pytest.mark.parametrize(("child", "words"), [
    (member("b", "failed", "p", can_retry=False, error="E"),
     "failed with an error marked not worth a manual retry (E)"),
    (member("b", "rolled_back", "p"), "is rolled back (only failed procedures can be retried)"),
    (member("b", "cancelled", "p", error="cancelled by alice"), "was cancelled (cancelled by alice)"),
    (member("b", "cancelled", "p", error=collateral_reason("other")), "was cancelled (cancelled: ancestor other"),
])
def test_what_refuses(child, words):
    result = plan(P, [child])
    assert result.revivals == ()
    assert result.refusal.startswith(f"its child T b {words}")
    assert result.refusal.endswith("submit a new procedure instead")


def test_a_refusal_deep_down_names_the_run_it_is_below():
    result = plan(P, [member("b", "failed", "p", suspension=1), member("x", "failed", "b", can_retry=False)])
    assert result.refusal.endswith("submit a new procedure instead (below T b)")


def test_describe_says_what_happens_below():
    result = plan(P, [member("b", "failed", "p"), member("c", "failed", "p"),
                      member("d", "cancelled", "p", error=collateral_reason("p"))])
    assert result.describe() == ("retries 2 failed children and resumes 1 child cancelled by its failure, "
                                 "and waits for them")
    assert plan(P, []).describe() == ""
