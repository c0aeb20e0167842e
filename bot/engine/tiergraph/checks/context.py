"""What every check reads (`CheckContext`) and how a check names the public ids it reports."""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property
from typing import Callable, Iterable, Iterator, Mapping

from bot.engine.tiergraph.bootstrap import Bootstrap
from bot.engine.tiergraph.coldstart import ColdStart, Simulation
from bot.engine.render.config import RepoConfig
from bot.engine.render.facts import ObjectStub, TierFacts
from bot.engine.tiergraph.graph import TierGraph
from bot.engine.core.model import Finding, Manifest, Severity, SourceLocation, TierId, plural  # noqa: F401  (plural: for the checks)
from bot.engine.tiergraph.providers import ProviderIndex
from bot.engine.render.rendered import ClusterRender


Identity = tuple[str, str, str, str]  # ObjectRef.identity
Applier = tuple[TierId, ObjectStub]


@dataclass(frozen=True)
class CheckContext:
    """Everything a check may read about one cluster."""

    render: ClusterRender
    graph: TierGraph
    providers: ProviderIndex
    facts: Mapping[TierId, TierFacts]  # per tier: what the checks read of its objects
    config: RepoConfig
    other_graphs: Mapping[str, TierGraph]
    locate: Callable[[Manifest | ObjectStub], SourceLocation | None]
    bootstrap: Bootstrap = Bootstrap()  # what exists before Flux's first reconcile (empty: --no-bootstrap)

    @cached_property
    def simulation(self) -> Simulation:
        """The cold start of this cluster with its bootstrap, run once (bot/engine/tiergraph/coldstart.py)."""
        return Simulation(self.graph, self.facts, self.providers, self.bootstrap).run()

    @cached_property
    def cold_start(self) -> ColdStart:
        """The simulated cold start; a tier whose build failed is not listed as Ready (its objects are unknown)."""
        failed = tuple(sorted(t for t, rendered in self.render.tiers.items() if rendered.failed))
        return replace(self.simulation.result(), unrendered=failed)

    @cached_property
    def _applier_index(self) -> tuple[dict[Identity, Applier], dict[Identity, list[Applier]]]:
        first: dict[Identity, Applier] = {}
        more: dict[Identity, list[Applier]] = {}
        for tier_id, tier in self.render.tiers.items():
            facts = self.facts.get(tier_id)
            if not tier.rendered or facts is None:
                continue
            excluded = facts.not_applied_over
            for gk, stubs in facts.kinds.items():
                for stub in stubs:
                    ref = stub.ref
                    if excluded and ref in excluded:
                        continue
                    applier, identity = (tier_id, stub), (ref.namespace, ref.name, gk.group, gk.kind)  # ObjectRef.identity
                    held = first.setdefault(identity, applier)
                    if held is not applier:
                        more.setdefault(identity, [held]).append(applier)
        return first, more

    def appliers(self, identity: Identity) -> tuple[Applier, ...]:
        """The rendered tiers that apply the object `identity` (ObjectRef.identity), in render order; an object
        marked never to be applied over a live one is not applied here. Indexed once for every check."""
        first, more = self._applier_index
        if identity in more:
            return tuple(more[identity])
        return (first[identity],) if identity in first else ()

    def applied_twice(self) -> Iterator[tuple[Identity, tuple[Applier, ...]]]:
        """Each object identity that more than one stub applies (in one tier or several), with its appliers."""
        for identity, found in self._applier_index[1].items():
            yield identity, tuple(found)

    def tier_location(self, tier: TierId) -> SourceLocation | None:
        """Where the Flux Kustomization `tier` is written."""
        spec = self.graph.specs.get(tier)
        return spec.origin if spec else None

    def before(self, tier: TierId, provider_tier: TierId) -> bool:
        """Whether `provider_tier`'s CRDs, Namespaces and cluster-scoped providers exist before `tier` applies.

        True for a dependency (dependsOn, transitively) and for an ancestor: the Kustomization that
        applies `tier` (or applies one of its ancestors, up to the cluster entry). Its staged apply
        writes CRDs, Namespaces and ClusterRoles first, then `*Class` objects, then the rest one by
        one in kind order (fluxcd/pkg ssa/manager_apply.go ApplyAllStaged, ssa/sort.go): every
        provider kind the checks track (StorageProfile.cdi.kubevirt.io, ClusterIssuer.cert-manager.io
        included) sorts before Kustomization.kustomize.toolkit.fluxcd.io, so it exists before the
        child Kustomization object does. Not for what a controller makes later (see `waits_for`).
        """
        return self.waits_for(tier, provider_tier) or self.is_ancestor(provider_tier, tier)

    def waits_for(self, tier: TierId, provider_tier: TierId) -> bool:
        """Whether Flux holds `tier` until `provider_tier` is Ready: a dependsOn does, and so does a dependsOn on
        a waited parent of it.

        A child exists (and reconciles) as soon as its parent's apply writes it, before the parent's own health
        checks have run; but a parent with `wait: true` health-checks every object it applied, the child
        Kustomization's Ready condition included (kustomize-controller's kstatus health check), so it is Ready
        only after the child is: a tier depending on it waits for the child too (toboshii/home-ops' `crds`).
        """
        if self.graph.depends_on(tier, provider_tier):
            return True
        for parent in self.parents(provider_tier):  # nearest first: every parent up to the dependency must wait
            spec = self.graph.specs.get(parent)
            if spec is None or not spec.wait:
                return False
            if self.graph.depends_on(tier, parent):
                return True
        return False

    def is_ancestor(self, ancestor: TierId, tier: TierId) -> bool:
        """Whether `ancestor` applies `tier`, directly or through Kustomizations it applies."""
        return ancestor in self.parents(tier)

    def parents(self, tier: TierId) -> list[TierId]:
        """The Kustomizations that apply `tier`: its parent first, up to the cluster entry."""
        chain: list[TierId] = []
        spec = self.graph.specs.get(tier)
        while spec is not None and spec.defined_in is not None and spec.defined_in not in chain and spec.defined_in != tier:
            chain.append(spec.defined_in)
            spec = self.graph.specs.get(spec.defined_in)
        return chain

    def add_dependency(self, tier: TierId, owners: Iterable[TierId], suffix: str = "") -> str:
        """The advice `Add dependsOn: …` for the owners `tier` may depend on (`suffix` after it).

        Never its own ancestor or descendant: the child exists only once the parent has applied, so
        either edge waits forever (or deadlocks with the parent's wait). Objects that need a provider
        their own tier applies through a child must move below that child instead.
        """
        owners = sorted(set(owners))
        free = [o for o in owners if not self.is_ancestor(o, tier) and not self.is_ancestor(tier, o)]
        below = [o for o in owners if self.is_ancestor(tier, o)]
        advice = []
        if free:
            advice.append(f"Add dependsOn: {name_list(str(o) for o in free)}{suffix}")
        if below:
            names = name_list(str(o) for o in below)
            advice.append(
                f"{names} {'is' if len(below) == 1 else 'are'} applied by {tier} itself, so {tier} cannot depend on "
                f"{'it' if len(below) == 1 else 'them'}: move these objects into a Kustomization that dependsOn {names}{suffix}"
            )
        return "; ".join(advice)

    @property
    def render_entry(self) -> TierId:
        return next(iter(self.render.tiers))


Check = Callable[[CheckContext], Iterable[Finding]]


def check(*ids: str) -> Callable[[Check], Check]:
    """Name the public finding ids a check function reports (each in bot/engine/core/findings.py CATALOGUE).

    Only a label: the registry is `bot.engine.tiergraph.checks.RUNNERS`, a tuple, not something importing fills.
    """

    def label(fn: Check) -> Check:
        fn.finding_ids = ids  # type: ignore[attr-defined]
        return fn

    return label


def name_list(names: Iterable[str], limit: int = 4) -> str:
    """`a, b, c` or `a, b, c, d and 3 more`."""
    items = sorted(set(names))
    if len(items) <= limit:
        return ", ".join(items)
    return ", ".join(items[:limit]) + f" and {len(items) - limit} more"
