"""Lock key decisions: who may take a key now, and which trees wait for each other in a cycle."""

from __future__ import annotations

from collections import deque
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


def find_deadlocks(waits: Mapping[Hashable, Iterable[tuple[str, Hashable]]]) -> list[Deadlock]:
    """Cycles in the wait-for graph between trees: one for each tangle of trees that wait for each other.

    ``waits[tree]`` lists ``(key, holder_tree)``: a procedure of ``tree``
    waits for ``key``, which ``holder_tree`` holds (or is ahead in its queue).
    A tangle (trees that all reach each other: a strongly connected component)
    may hold many cycles, exponentially many in the size of the graph; one is
    reported, the shortest through its smallest tree, starting there. Breaking
    it may undo the others, and a later call finds any left. The work is linear
    in the size of the graph (a walk over every path of a long key queue, which
    has no cycle, made a maintenance pass take minutes).
    """
    graph = {tree: sorted({(k, h) for k, h in edges if h != tree}, key=repr) for tree, edges in waits.items()}
    component = _components(graph)
    tangles: dict[int, list[Hashable]] = {}
    for tree, number in component.items():
        tangles.setdefault(number, []).append(tree)
    found = [_shortest_cycle(graph, component, min(trees, key=repr)) for trees in tangles.values() if len(trees) > 1]
    return sorted(found, key=lambda deadlock: repr(deadlock.edges[0][0]))


def _components(graph: Mapping[Hashable, Iterable[tuple[str | None, Hashable]]]) -> dict[Hashable, int]:
    """The strongly connected component of every tree in ``graph`` (Kosaraju's, without recursion)."""
    finished: list[Hashable] = []
    visited: set[Hashable] = set()
    for root in graph:
        if root in visited:
            continue
        visited.add(root)
        stack = [(root, iter(graph.get(root, ())))]
        while stack:
            node, edges = stack[-1]
            for _, holder in edges:
                if holder not in visited:
                    visited.add(holder)
                    stack.append((holder, iter(graph.get(holder, ()))))
                    break
            else:
                stack.pop()
                finished.append(node)
    reverse: dict[Hashable, list[Hashable]] = {}
    for tree, tree_edges in graph.items():
        for _, holder in tree_edges:
            reverse.setdefault(holder, []).append(tree)
    component: dict[Hashable, int] = {}
    for number, root in enumerate(reversed(finished)):
        if root in component:
            continue
        component[root] = number
        todo = [root]
        while todo:
            for tree in reverse.get(todo.pop(), ()):
                if tree not in component:
                    component[tree] = number
                    todo.append(tree)
    return component


def _shortest_cycle(graph: Mapping[Hashable, Iterable[tuple[str, Hashable]]], component: Mapping[Hashable, int],
                    start: Hashable) -> Deadlock:
    """The shortest cycle from ``start`` back to it (breadth first), within ``start``'s component."""
    came_from: dict[Hashable, tuple[Hashable, str] | None] = {start: None}
    queue = deque([start])
    while queue:
        tree = queue.popleft()
        for key, holder in graph.get(tree, ()):
            if component.get(holder) != component[start]:
                continue
            if holder == start:
                edges = [(tree, key, start)]
                while (step := came_from[tree]) is not None:
                    edges.append((step[0], step[1], tree))
                    tree = step[0]
                return Deadlock(tuple(reversed(edges)))
            if holder not in came_from:
                came_from[holder] = (tree, key)
                queue.append(holder)
    raise AssertionError("a component of two or more trees has a cycle through each of them")  # pragma: no cover


def _path(graph: Mapping[Hashable, Iterable[tuple[Any, Hashable]]], component: Mapping[Hashable, int],
          source: Hashable, target: Hashable) -> list[tuple[Hashable, Any, Hashable]]:
    """The shortest path of edges from ``source`` to ``target`` (breadth first), within their component."""
    came_from: dict[Hashable, tuple[Hashable, Any] | None] = {source: None}
    queue = deque([source])
    while queue:
        node = queue.popleft()
        if node == target:
            edges = []
            while (step := came_from[node]) is not None:
                edges.append((step[0], step[1], node))
                node = step[0]
            return list(reversed(edges))
        for key, other in graph.get(node, ()):
            if other not in came_from and component.get(other) == component[source]:
                came_from[other] = (node, key)
                queue.append(other)
    raise AssertionError("nodes of one component reach each other")  # pragma: no cover


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
    """Deadlocks between trees: one cycle of procedures waiting for each other (see :func:`waits_for`)
    through more than one tree, for each tangle of such procedures (a strongly connected component).

    The cycle is the shortest through the tangle's smallest wait between two trees; its ``edges`` are
    the waits between trees on it: (waiting tree, key, tree of the procedure it waits behind). A
    tangle inside one tree is not reported. Linear in the number of waits, as :func:`find_deadlocks`.
    """
    tree = {r.procedure: r.tree for r in requests}
    graph = {p: sorted({(k, q) for k, q in edges if q != p}, key=repr)
             for p, edges in waits_for(requests, ancestors).items()}
    component = _components(graph)
    found: dict[int, Deadlock] = {}
    for p in sorted(graph, key=repr):
        for key, q in graph[p]:
            if key is None or tree[p] == tree[q] or component.get(q) != component[p] or component[p] in found:
                continue
            cycle = [(p, key, q), *_path(graph, component, q, p)]
            found[component[p]] = Deadlock(tuple((tree[w], k, tree[h]) for w, k, h in cycle
                                                 if k is not None and tree[w] != tree[h]))
    return list(found.values())
