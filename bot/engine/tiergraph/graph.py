"""The tier graph: Flux Kustomizations as nodes, `dependsOn` as edges."""

from __future__ import annotations

import graphlib
from dataclasses import dataclass
from functools import cached_property
from typing import Iterable, Mapping

from bot.engine.core.model import TierId, TierSpec


@dataclass(frozen=True)
class Cycle:
    """A dependency cycle, as the path that closes it (first node repeated at the end)."""

    path: tuple[TierId, ...]

    def __str__(self) -> str:
        return " → ".join(str(t) for t in self.path)


class TierGraph:
    """Nodes and `dependsOn` edges of one cluster, with the orders and closures checks need."""

    def __init__(self, specs: Iterable[TierSpec]) -> None:
        self.specs: dict[TierId, TierSpec] = {s.id: s for s in specs}
        # Edges to Kustomizations the cluster does not have are kept out; `missing-dependency` reports them.
        self.deps: dict[TierId, frozenset[TierId]] = {
            tid: frozenset(d for d in spec.depends_on if d in self.specs) for tid, spec in self.specs.items()
        }

    @property
    def nodes(self) -> list[TierId]:
        return list(self.specs)

    def missing_dependencies(self) -> list[tuple[TierId, TierId]]:
        """(tier, dependency) pairs whose dependency is not a Kustomization of this cluster."""
        return [(tid, d) for tid, spec in self.specs.items() for d in spec.depends_on if d not in self.specs]

    @cached_property
    def cycles(self) -> list[Cycle]:
        """One cycle per strongly connected component that has one (Tarjan, iterative)."""
        index: dict[TierId, int] = {}
        low: dict[TierId, int] = {}
        on_stack: set[TierId] = set()
        stack: list[TierId] = []
        components: list[list[TierId]] = []
        counter = 0
        for root in sorted(self.specs):
            if root in index:
                continue
            work = [(root, iter(sorted(self.deps[root])))]
            index[root] = low[root] = counter
            counter += 1
            stack.append(root)
            on_stack.add(root)
            while work:
                node, children = work[-1]
                advanced = False
                for child in children:
                    if child not in index:
                        index[child] = low[child] = counter
                        counter += 1
                        stack.append(child)
                        on_stack.add(child)
                        work.append((child, iter(sorted(self.deps[child]))))
                        advanced = True
                        break
                    if child in on_stack:
                        low[node] = min(low[node], index[child])
                if advanced:
                    continue
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1 or node in self.deps[node]:
                        components.append(sorted(component))
        return [self._cycle_in(set(c)) for c in components]

    def _cycle_in(self, component: set[TierId]) -> Cycle:
        start = min(component)
        # Breadth-first search for the shortest way back to `start` inside the component.
        parents: dict[TierId, TierId] = {}
        frontier = [start]
        while frontier:
            nxt = []
            for node in frontier:
                for child in sorted(self.deps[node] & component):
                    if child == start:
                        path = [start]
                        cur = node
                        while cur != start:
                            path.append(cur)
                            cur = parents[cur]
                        path.append(start)
                        path.reverse()
                        # Written as "depends on" arrows: start → ... → start.
                        return Cycle(tuple(path))
                    if child not in parents:
                        parents[child] = node
                        nxt.append(child)
            frontier = nxt
        return Cycle((start, start))

    def order(self) -> list[TierId]:
        """A topological order (dependencies first), ties by name; tiers on cycles are left out."""
        on_cycle = {t for c in self.cycles for t in c.path}
        sorter = graphlib.TopologicalSorter({t: set(d - on_cycle) for t, d in self.deps.items() if t not in on_cycle})
        sorter.prepare()
        out: list[TierId] = []
        while sorter.is_active():
            ready = sorted(sorter.get_ready())
            out.extend(ready)
            sorter.done(*ready)
        return out

    @cached_property
    def _ancestors(self) -> Mapping[TierId, frozenset[TierId]]:
        memo: dict[TierId, frozenset[TierId]] = {}
        for root in self.specs:
            if root in memo:
                continue
            seen: set[TierId] = set()
            stack = list(self.deps[root])
            while stack:
                node = stack.pop()
                if node in seen:
                    continue
                seen.add(node)
                if node in memo:
                    seen |= memo[node]
                else:
                    stack.extend(self.deps[node])
            memo[root] = frozenset(seen)
        return memo

    def ancestors(self, tier: TierId) -> frozenset[TierId]:
        """Every tier `tier` transitively depends on (not including itself unless on a cycle)."""
        return self._ancestors.get(tier, frozenset())

    def depends_on(self, tier: TierId, other: TierId) -> bool:
        """Whether `tier` transitively depends on `other`."""
        return other in self.ancestors(tier)
