"""Lock key decisions: who may take a key now, and which trees wait for each other in a cycle."""

from __future__ import annotations

from collections.abc import Collection, Hashable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Request:
    """One procedure's request for one key; ``order`` ranks waiters (oldest first)."""

    key: str
    procedure: Hashable
    tree: Hashable
    mode: str  # "exclusive" or "shared"
    granted: bool
    order: tuple[Any, ...]


def conflicts(a: str, b: str) -> bool:
    return a == "exclusive" or b == "exclusive"


def blockers(requests: Iterable[Request], mine: Request, lenders: Collection[Hashable]) -> list[Request]:
    """The requests that keep ``mine`` from being granted now.

    A conflicting request blocks if it is granted, or if it waits and is older
    (the oldest waiter gets a key first). A key an ancestor (one of
    ``lenders``) holds is lent to its descendants, who contend among themselves
    as if the ancestor did not hold it: the ancestor's request is ignored, and
    so are outsiders still waiting for the key (they wait for the ancestor
    anyway). Outsiders holding it still count, so a descendant cannot turn an
    ancestor's shared key into an exclusive one while they share it.
    """
    same_key = [r for r in requests if r.key == mine.key and r.procedure != mine.procedure]
    borrowing = any(r.granted and r.procedure in lenders for r in same_key)
    return [r for r in same_key
            if r.procedure not in lenders and conflicts(r.mode, mine.mode)
            and (r.granted or (r.order < mine.order and (not borrowing or r.tree == mine.tree)))]


@dataclass(frozen=True)
class Deadlock:
    """Trees waiting for each other: ``edges`` are (waiting tree, key it waits for, tree holding the key)."""

    edges: tuple[tuple[Hashable, str, Hashable], ...]

    @property
    def trees(self) -> list[Hashable]:
        return [tree for tree, _, _ in self.edges]


def find_deadlocks(waits: Mapping[Hashable, Iterable[tuple[str, Hashable]]]) -> list[Deadlock]:
    """Cycles in the wait-for graph between trees.

    ``waits[tree]`` lists ``(key, holder_tree)``: a procedure of ``tree``
    waits for ``key``, which ``holder_tree`` holds. Each cycle is reported
    once, starting from its smallest tree.
    """
    graph = {tree: sorted({(k, h) for k, h in edges if h != tree}, key=repr) for tree, edges in waits.items()}
    found: dict[frozenset[Hashable], Deadlock] = {}

    def walk(path: list[tuple[Hashable, str, Hashable]], seen: list[Hashable]) -> None:
        tree = seen[-1]
        for key, holder in graph.get(tree, ()):
            edge = (tree, key, holder)
            if holder == seen[0]:
                members = frozenset(seen)
                if members not in found:
                    found[members] = Deadlock(tuple([*path, edge]))
            elif holder not in seen and repr(holder) > repr(seen[0]):
                walk([*path, edge], [*seen, holder])

    for start in sorted(graph, key=repr):
        walk([], [start])
    return list(found.values())
