"""Lock key decisions: who may take a key now, and which trees wait for each other in a cycle."""

from __future__ import annotations

from collections.abc import Collection, Hashable, Iterable, Mapping, Sequence
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
    """Trees (or procedures) waiting for each other: ``edges`` are (waiting tree, key it waits for, tree
    it waits behind)."""

    edges: tuple[tuple[Hashable, Any, Hashable], ...]

    @property
    def trees(self) -> list[Hashable]:
        return list(dict.fromkeys(tree for tree, _, _ in self.edges))


def find_deadlocks(waits: Mapping[Hashable, Iterable[tuple[str | None, Hashable]]]) -> list[Deadlock]:
    """Cycles in a wait-for graph (between trees, or between procedures).

    ``waits[node]`` lists ``(label, other)``: ``node`` waits for ``other``
    (for the key ``label``). Each cycle is reported once, starting from its
    smallest node. Only edges inside a strongly connected component can be on
    a cycle, so the search walks those alone: a long queue of waiters behind
    one holder has no cycle and costs no search.
    """
    graph = {node: sorted({(k, h) for k, h in edges if h != node}, key=repr) for node, edges in waits.items()}
    component = _components(graph)
    graph = {node: [(k, h) for k, h in edges if component.get(h) == component[node]] for node, edges in graph.items()}
    found: dict[frozenset[Hashable], Deadlock] = {}

    def walk(path: list[tuple[Hashable, Any, Hashable]], seen: list[Hashable]) -> None:
        node = seen[-1]
        for key, holder in graph.get(node, ()):
            edge = (node, key, holder)
            if holder == seen[0]:
                members = frozenset(seen)
                if members not in found:
                    found[members] = Deadlock(tuple([*path, edge]))
            elif holder not in seen and repr(holder) > repr(seen[0]):
                walk([*path, edge], [*seen, holder])

    for start in sorted(graph, key=repr):
        if graph[start]:
            walk([], [start])
    return list(found.values())


def _components(graph: Mapping[Hashable, Iterable[tuple[Any, Hashable]]]) -> dict[Hashable, int]:
    """The strongly connected component of each node (Tarjan's algorithm, without recursion)."""
    index: dict[Hashable, int] = {}
    low: dict[Hashable, int] = {}
    component: dict[Hashable, int] = {}
    stack: list[Hashable] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter([h for _, h in graph.get(root, ())]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        while work:
            node, successors = work[-1]
            for succ in successors:
                if succ not in index:
                    index[succ] = low[succ] = len(index)
                    stack.append(succ)
                    work.append((succ, iter([h for _, h in graph.get(succ, ())])))
                    break
                if succ not in component:
                    low[node] = min(low[node], index[succ])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    while True:
                        member = stack.pop()
                        component[member] = index[node]
                        if member == node:
                            break
    return component


def waits_for(requests: Sequence[Request], ancestors: Mapping[Hashable, Collection[Hashable]]
              ) -> dict[Hashable, set[tuple[str | None, Hashable]]]:
    """Which procedure waits for which, from every request on the contended keys.

    A waiting procedure waits for the procedure of each request that blocks
    one of its own (labelled with the key). A procedure also waits for each of
    its descendants that waits for a key (labelled ``None``): it cannot finish,
    and release what it holds, before they do. A holder with no waiting
    descendant (a running leaf, say) waits for nobody: it finishes and
    releases its keys whatever the others do. ``ancestors`` maps each waiting
    procedure to its ancestors.
    """
    graph: dict[Hashable, set[tuple[str | None, Hashable]]] = {}
    for request in requests:
        if request.granted:
            continue
        lenders = ancestors.get(request.procedure, ())
        graph.setdefault(request.procedure, set()).update(
            (request.key, blocker.procedure) for blocker in blockers(requests, request, lenders))
        for ancestor in lenders:
            graph.setdefault(ancestor, set()).add((None, request.procedure))
    return graph


def tree_deadlocks(requests: Sequence[Request], ancestors: Mapping[Hashable, Collection[Hashable]]
                   ) -> list[Deadlock]:
    """Cycles of procedures waiting for each other (see :func:`waits_for`) that span more than one tree,
    each reported once per set of trees, its ``edges`` the waits between trees: (waiting tree, key,
    tree of the procedure it waits behind)."""
    tree = {r.procedure: r.tree for r in requests}
    found: dict[frozenset[Hashable], Deadlock] = {}
    for cycle in find_deadlocks(waits_for(requests, ancestors)):
        members = frozenset(tree[p] for p in cycle.trees)
        if len(members) < 2 or members in found:
            continue
        found[members] = Deadlock(tuple((tree[w], key, tree[h]) for w, key, h in cycle.edges
                                        if key is not None and tree[w] != tree[h]))
    return list(found.values())
