"""How many trees the next prune batch takes, so that a batch lasts about a given time whatever the trees' sizes.

A batch deletes whole trees, and a tree can be one procedure or thousands: a
fixed number of trees per batch bounds neither a batch's locks nor, in a
worker, how long its main thread stops claiming. The pace is judged from the
last batch instead.
"""

from __future__ import annotations

#: A batch that went fast may have been lucky (small trees, a quiet moment): the next grows at most this much.
GROWTH = 2


def next_batch_trees(asked: int, deleted: int, took: float, *, seconds: float, most: int) -> int:
    """Trees to ask for next, after a batch asked for ``asked`` deleted ``deleted`` trees in ``took`` seconds.

    Aims at ``seconds`` per batch, between 1 and ``most`` trees. A batch that
    took longer sets the next one at once to what fits at its pace (a slow batch
    is a fact; large trees stay large). A faster one grows the next at most
    ``GROWTH`` times, and only if it was full: the last, short batch of a
    backlog says nothing about a full one, nor a batch that found no tree
    about the trees.
    """
    if deleted == 0:  # nothing to judge the trees by (a slow one: the search for them was slow)
        trees = asked
    elif took > seconds:
        trees = round(deleted * seconds / took)
    elif deleted < asked:
        trees = asked
    else:
        trees = asked * GROWTH if took <= 0 else min(asked * GROWTH, round(asked * seconds / took))
    return max(1, min(most, trees))
