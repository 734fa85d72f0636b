import pytest

from django_procedures.policy.locks import Request, blockers, conflicts, find_deadlocks, tree_deadlocks


def req(proc, mode="exclusive", granted=False, order=0, tree=None, key="k"):
    return Request(key, proc, tree or proc, mode, granted, (order,))


@pytest.mark.parametrize(("a", "b", "expected"), [
    ("exclusive", "exclusive", True), ("exclusive", "shared", True), ("shared", "exclusive", True),
    ("shared", "shared", False),
])
def test_conflicts(a, b, expected):
    assert conflicts(a, b) is expected


@pytest.mark.parametrize(("others", "mine", "lenders", "blocked_by"), [
    # nobody else: free
    ([], req("me", order=5), set(), []),
    # an exclusive holder blocks
    ([req("a", granted=True, order=1)], req("me", order=5), set(), ["a"]),
    # shared holders let a shared request in, not an exclusive one
    ([req("a", "shared", True, 1)], req("me", "shared", order=5), set(), []),
    ([req("a", "shared", True, 1)], req("me", order=5), set(), ["a"]),
    # an older conflicting waiter goes first; a younger one does not block
    ([req("a", order=1)], req("me", "shared", order=5), set(), ["a"]),
    ([req("a", order=9)], req("me", order=5), set(), []),
    # older shared waiters do not block a shared request
    ([req("a", "shared", order=1)], req("me", "shared", order=5), set(), []),
    # another key is irrelevant
    ([req("a", granted=True, key="other")], req("me", order=5), set(), []),
    # an ancestor's hold is lent to its descendants
    ([req("parent", granted=True, order=1, tree="t")], req("me", order=5, tree="t"), {"parent"}, []),
    # ... who contend among themselves
    ([req("parent", granted=True, order=1, tree="t"), req("sibling", granted=True, order=3, tree="t")],
     req("me", order=5, tree="t"), {"parent"}, ["sibling"]),
    # ... while outsiders waiting for the ancestor do not block them
    ([req("parent", granted=True, order=1, tree="t"), req("outsider", "shared", order=2, tree="o")],
     req("me", order=5, tree="t"), {"parent"}, []),
    # ... but outsiders sharing an ancestor's shared key keep a descendant from taking it exclusively
    ([req("parent", "shared", True, 1, tree="t"), req("outsider", "shared", True, 2, tree="o")],
     req("me", order=5, tree="t"), {"parent"}, ["outsider"]),
])
def test_blockers(others, mine, lenders, blocked_by):
    assert [r.procedure for r in blockers([*others, mine], mine, lenders)] == blocked_by


def test_a_two_tree_cycle_is_found_once():
    (deadlock,) = find_deadlocks({"A": [("L", "B")], "B": [("K", "A")]})
    assert set(deadlock.trees) == {"A", "B"}
    assert {(w, k, h) for w, k, h in deadlock.edges} == {("A", "L", "B"), ("B", "K", "A")}


def test_longer_cycles_and_no_false_positives():
    assert find_deadlocks({"A": [("K", "B")], "B": [("L", "C")]}) == []
    (cycle,) = find_deadlocks({"A": [("K", "B")], "B": [("L", "C")], "C": [("M", "A")]})
    assert set(cycle.trees) == {"A", "B", "C"}
    assert find_deadlocks({"A": [("K", "A")]}) == []  # waiting on its own tree is not a deadlock
    two = find_deadlocks({"A": [("K", "B")], "B": [("L", "A")], "C": [("M", "D")], "D": [("N", "C")]})
    assert sorted(sorted(d.trees) for d in two) == [["A", "B"], ["C", "D"]]


class Tree:
    """A tree id that counts how often the search looks at it: the search's work must stay polynomial."""

    looks = 0

    def __init__(self, n: int) -> None:
        self.n = n

    def __repr__(self) -> str:
        Tree.looks += 1
        if Tree.looks > 200_000:
            raise AssertionError("find_deadlocks is walking an exponential number of paths")
        return f"t{self.n:03d}"


def test_a_long_key_queue_is_searched_in_linear_time_and_one_cycle_per_tangle_is_reported():
    """Found by the soak: ~100 trees queued for keys made every maintenance pass take a minute of CPU."""
    trees = [Tree(n) for n in range(60)]
    # Each tree waits for every tree after it (the waiters ahead of it in a key's queue): no cycle, but
    # 2**59 paths from the first tree.
    waits = {t: [("K", u) for u in trees[n + 1:]] for n, t in enumerate(trees)}
    Tree.looks = 0
    assert find_deadlocks(waits) == []
    # The last tree waits for the first: every tree is in one tangle with exponentially many cycles. One is
    # reported, the shortest through the smallest tree.
    waits[trees[-1]] = [("L", trees[0])]
    Tree.looks = 0
    (deadlock,) = find_deadlocks(waits)
    assert deadlock.edges == ((trees[0], "K", trees[-1]), (trees[-1], "L", trees[0]))


def held(proc, tree, key, order=0):
    return Request(key, proc, tree, "exclusive", True, (order,))


def waits(proc, tree, key, order=9):
    return Request(key, proc, tree, "exclusive", False, (order,))


@pytest.mark.parametrize(("requests", "ancestors", "cycles"), [
    # A's root holds K, its child waits for L; B's root holds L, its child waits for K: a deadlock
    ([held("a", "A", "K"), waits("a1", "A", "L"), held("b", "B", "L"), waits("b1", "B", "K")],
     {"a1": {"a"}, "b1": {"b"}}, [{"A", "B"}]),
    # the same keys held by running leaves instead: each finishes without the other, no deadlock
    ([held("a2", "A", "K"), waits("a1", "A", "L"), held("b2", "B", "L"), waits("b1", "B", "K")],
     {"a1": {"a"}, "b1": {"b"}}, []),
    # a key the root lends its child: the outsider queued before the child is not waited for
    ([held("a", "A", "K", 1), waits("b", "B", "K", 2), waits("a1", "A", "K", 3)], {"a1": {"a"}, "b": set()}, []),
    # a cycle through an older waiter ahead in the queue is a deadlock too (the oldest waiter goes first)
    ([held("a", "A", "K"), waits("c", "C", "M", 1), held("b", "B", "L"), waits("b1", "B", "M", 2),
      waits("c", "C", "K", 1), waits("a1", "A", "L")], {"a1": {"a"}, "b1": {"b"}, "c": set()}, [{"A", "B", "C"}]),
    # waits inside one tree are not reported
    ([held("p", "T", "K"), held("q", "T", "L"), waits("p1", "T", "L"), waits("q1", "T", "K")],
     {"p1": {"p", "r"}, "q1": {"q", "r"}}, []),
])
def test_tree_deadlocks(requests, ancestors, cycles):
    assert [set(d.trees) for d in tree_deadlocks(requests, ancestors)] == cycles
