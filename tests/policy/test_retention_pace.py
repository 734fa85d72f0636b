import pytest

from django_procedures.policy.retention import next_batch_trees


@pytest.mark.parametrize(("asked", "deleted", "took", "expected"), [
    (500, 500, 0.025, 1000),   # full and twice as fast as aimed: twice the trees
    (500, 500, 0.005, 1000),   # ten times as fast: still only twice (one fast batch may be luck)
    (500, 500, 0.0, 1000),     # too fast for the clock
    (500, 500, 0.04, 625),     # a little fast: a little more
    (500, 500, 0.05, 500),     # on time
    (500, 500, 0.5, 50),       # ten times too slow: a tenth, at once
    (500, 20, 0.5, 2),         # a short batch of large trees, too slow: at its pace
    (500, 3, 10.0, 1),         # one tree takes longer than a batch should: one tree at a time
    (500, 0, 1.0, 500),        # nothing deleted, yet slow: nothing learnt about the trees
    (500, 120, 0.01, 500),     # the last, short batch of a backlog, fast: says nothing about a full one
    (8000, 8000, 0.01, 10_000),  # never more than the most
    (20_000, 20_000, 0.05, 10_000),
])
def test_the_next_batch_takes_as_many_trees_as_fit_at_the_last_pace(asked, deleted, took, expected):
    assert next_batch_trees(asked, deleted, took, seconds=0.05, most=10_000) == expected
