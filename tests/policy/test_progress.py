"""``policy.progress.normalise``: documented clamps, refusals that say why."""

import math
from decimal import Decimal

import pytest

from django_procedures.policy.progress import MAX_NOTE, Report, fraction, normalise


@pytest.mark.parametrize(("args", "stored", "problem"), [
    ((3, 10, "rows"), Report(3, 10, "rows"), None),
    ((2.5, None, ""), Report(2.5, None, ""), None),
    ((0, 0, ""), Report(0, 0, ""), None),
    ((Decimal("1.5"), 3, ""), Report(1.5, 3, ""), None),
    ((-1, 10, ""), Report(0, 10, ""), "done must be 0 or more; got -1, stored as 0"),
    ((11, 10, ""), Report(10, 10, ""), "done (11) is more than total (10); stored as 10"),
    ((1, "ten", ""), Report(1, None, ""), "total must be a finite number, 0 or more, or None; got str 'ten'"),
    ((1, -5, ""), Report(1, None, ""), "total must be a finite number"),
    ((1, math.inf, ""), Report(1, None, ""), "total must be a finite number"),
    ((1, None, 42), Report(1, None, "42"), None),
    ((1, None, "a\x00b"), Report(1, None, "ab"), None),
    (("3", 10, ""), None, "takes a finite number of units done (int or float); got str '3': the report was ignored"),
    ((None, 10, ""), None, "got NoneType None"),
    ((math.nan, 10, ""), None, "got float nan"),
    ((True, 10, ""), None, "got bool True"),
])
def test_normalise(args, stored, problem):
    report, problems = normalise(*args)
    assert report == stored
    if problem is None:
        assert problems == []
    else:
        assert len(problems) == 1 and problem in problems[0], problems


def test_a_10_mb_note_is_cut():
    report, problems = normalise(1, 2, "x" * 10_000_000)
    assert len(report.note) == MAX_NOTE and report.note.endswith("…")
    assert problems == [f"ctx.progress: a note is kept to {MAX_NOTE} characters; got 10000000, cut"]


@pytest.mark.parametrize(("progress", "expected"), [
    (None, None), ({"done": 1, "total": None}, None), ({"done": 1, "total": 0}, None),
    ({"done": 1, "total": 4}, 0.25), ({"done": 5, "total": 4}, 1.0),
])
def test_fraction(progress, expected):
    assert fraction(progress) == expected
