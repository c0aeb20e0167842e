"""A cold start, simulated: kustomize-controller and helm-controller on an empty cluster plus the bootstrap (pure).

Rounds stand for reconciles. In round N every Kustomization that exists (its parent has applied it),
is not suspended and whose dependsOn were Ready before round N reconciles; its apply is staged like
fluxcd/pkg ssa/manager_apply.go ApplyAllStaged: CRDs, Namespaces and ClusterRoles first (applied
and waited on), then `*Class` kinds, then the rest. A kind with no served CRD fails its stage:
nothing of that stage is written, the earlier stages stay (kustomize-controller reconcile → apply).
After the applies, helm-controller installs the HelmReleases whose chart source and `spec.dependsOn`
are ready (their chart's CRDs appear), and operators create the CRDs their CRs trigger. Then health:
a tier is Ready when applied and, with `wait`/`healthChecks`, when what it waits for is Ready
(kustomize-controller checkHealth). A failed tier retries in the next round (after `retryInterval`).

Worst case where timing decides: a CRD that appears after the object that brings it is applied
(a HelmRelease, an operator's CR) comes one round late unless the tier's health check holds it
Ready until then — a CR with no kstatus Ready condition (CDI) passes `wait` at once, so a dependent
may fail once. On a cold start every tier of one source applies the same revision, so dependsOn's
revision gate (same sourceRef only, kustomize-controller checkDependencies) holds once the
dependency is Ready.

The simulation reads tier facts only (kinds, CRDs, HelmReleases), never the objects: it is cheap.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from bot.engine.tiergraph.bootstrap import Bootstrap, BootstrapEntry
from bot.engine.render.facts import HELM_RELEASE, TierFacts
from bot.engine.tiergraph.graph import TierGraph
from bot.engine.core.model import GroupKind, ObjectRef, TierId, TierSpec
from bot.engine.tiergraph.providers import Provider, ProviderIndex, ProviderKind

KUSTOMIZATION = GroupKind("kustomize.toolkit.fluxcd.io", "Kustomization")
STAGE_ONE = {GroupKind("apiextensions.k8s.io", "CustomResourceDefinition"), GroupKind("", "Namespace"), GroupKind("rbac.authorization.k8s.io", "ClusterRole")}
# CRs whose status kstatus cannot read (no Ready/Reconciling/Stalled condition): `wait`/`healthChecks`
# call them Current as soon as they exist, before their operator has acted. cdi-operator reports
# Available/Progressing/Degraded and `status.phase` (docs/flux-semantics.md §7): only a
# healthCheckExprs entry for the kind makes Flux wait for it.
NO_KSTATUS_READY = frozenset({GroupKind("cdi.kubevirt.io", "CDI")})
NEVER = None
# Namespaces the API server creates: git may define them (to label them), nothing waits for that.
ALWAYS_THERE = frozenset({"default", "kube-system", "kube-public", "kube-node-lease"})
OWN_PARENT = ", its own parent"
DEPENDS_BACK = " (each waits for the other)"
DEADLOCK_ENDINGS = (OWN_PARENT, DEPENDS_BACK)


@dataclass(frozen=True)
class TierOutcome:
    """One tier on a cold start: Ready in round N (None: never), after how many failed applies, and why."""

    ready_round: int | None
    failed_attempts: int = 0
    max_delay_seconds: int = 0  # worst case added by failed applies (its own and its dependencies')
    blocked_by: str | None = None  # never Ready: the causal chain; else the kind its first failure missed
    failed_on: tuple[GroupKind, ...] = ()  # kinds its failed applies missed
    reason: str = ""  # never Ready: "dependency" | "apply" | "health" | "deadlock" | "parent" | "cycle" | "suspended" (or behind one)

    def to_json(self) -> dict[str, Any]:
        return {
            "ready_round": self.ready_round,
            "failed_attempts": self.failed_attempts,
            "max_delay_seconds": self.max_delay_seconds,
            "blocked_by": self.blocked_by,
        }


@dataclass(frozen=True)
class ColdStart:
    """The simulation's result for one cluster."""

    tiers: Mapping[TierId, TierOutcome] = field(default_factory=dict)
    rounds: int = 0
    # Kinds applied that nobody known provides (not built in, no CRD, chart or bootstrap): their tiers'
    # applies were not judged on them, so the timeline is only as good as that assumption.
    unjudged: tuple[GroupKind, ...] = ()
    # Tiers whose build failed: the simulation saw no objects of theirs, so it cannot say when they are Ready.
    unrendered: tuple[TierId, ...] = ()

    @property
    def converges(self) -> bool:
        return all(o.ready_round is not None for o in self.tiers.values() if o.reason != "suspended")

    @property
    def max_delay_seconds(self) -> int:
        return max((o.max_delay_seconds for o in self.tiers.values()), default=0)

    def never(self) -> list[TierId]:
        return sorted(t for t, o in self.tiers.items() if o.ready_round is None and o.reason != "suspended")

    def to_json(self) -> dict[str, Any]:
        return {
            "converges": self.converges,
            "rounds": self.rounds,
            "unjudged": [str(gk) for gk in self.unjudged],
            "tiers": {str(t): o.to_json() for t, o in sorted(self.tiers.items())},
            **({"unrendered": [str(t) for t in self.unrendered]} if self.unrendered else {}),
        }

    def timeline(self, limit: int = 8) -> str:
        """`round 1: flux-system · round 2: infra, cert-manager · … · never: platform-config (…); apps behind platform-config`."""
        by_round: dict[int, list[str]] = {}
        unrendered = set(self.unrendered)
        for tier, outcome in sorted(self.tiers.items()):
            if outcome.ready_round is not None and tier not in unrendered:
                retried = f" (after {outcome.failed_attempts} failed)" if outcome.failed_attempts else ""
                by_round.setdefault(outcome.ready_round, []).append(tier.name + retried)
        parts = [f"round {r}: {_names(names, limit)}" for r, names in sorted(by_round.items())]
        roots: list[str] = []
        behind: dict[str, list[str]] = {}
        for tier in self.never():
            if tier in unrendered:
                continue
            outcome = self.tiers[tier]
            chain = outcome.blocked_by or ""
            if outcome.reason in ("dependency", "parent") and " ← " in chain:
                behind.setdefault(chain.split(" ← ")[0].split()[-1].rstrip(","), []).append(tier.name)
            else:
                roots.append(f"{tier.name} ({chain})")
        stuck = roots + [f"{_names(names, limit)} behind {blocker}" for blocker, names in sorted(behind.items())]
        if stuck:
            parts.append("never: " + "; ".join(stuck))
        if self.unrendered:
            parts.append(f"not judged, build failed: {_names([t.name for t in self.unrendered], limit)}")
        held = [t.name for t, o in sorted(self.tiers.items()) if o.ready_round is None and o.reason == "suspended" and t not in unrendered]
        if held:
            parts.append(f"suspended (or behind one): {_names(held, limit)}")
        if self.unjudged:
            kinds = [gk.kind for gk in self.unjudged]
            parts.append(f"not judged: {len(kinds)} kind{'s' if len(kinds) != 1 else ''} nobody known provides, taken as served ({_names(kinds, limit)})")
        return " · ".join(parts)


def _names(names: list[str], limit: int) -> str:
    return ", ".join(names) if len(names) <= limit else ", ".join(names[:limit]) + f" and {len(names) - limit} more"


def compare(base: ColdStart | None, head: ColdStart | None) -> str | None:
    """What a change does to a cold start: resolves or introduces a deadlock, or adds (saves) time."""
    if head is None or base is None or not base.tiers:
        return None
    if not base.converges and head.converges:
        return "this change resolves a cold-start deadlock"
    if base.converges and not head.converges:
        stuck = head.never()
        return f"this change introduces a cold-start deadlock ({', '.join(t.name for t in stuck[:3])}{' …' if len(stuck) > 3 else ''} never Ready)"
    if base.converges and head.converges:
        added = head.max_delay_seconds - base.max_delay_seconds
        if added > 0:
            return f"this change adds up to {duration(added)} to a cold start"
        if added < 0:
            return f"this change saves up to {duration(-added)} on a cold start"
    return None


def duration(seconds: int) -> str:
    """`1m`, `1h`, `1h30m`, `45s`."""
    hours, rest = divmod(int(seconds), 3600)
    minutes, secs = divmod(rest, 60)
    text = "".join(f"{n}{u}" for n, u in ((hours, "h"), (minutes, "m"), (secs, "s")) if n)
    return text or "0s"


def stage_of(gk: GroupKind) -> int:
    """1 for CRDs/Namespaces/ClusterRoles, 2 for `*Class` kinds, 3 for the rest (fluxcd/pkg ssa/utils/is.go)."""
    if gk in STAGE_ONE:
        return 1
    return 2 if gk.kind.endswith("Class") else 3


@dataclass
class _HelmRelease:
    ref: ObjectRef
    tier: TierId
    source: tuple[str, str, str] | None  # (kind, namespace, name) of its chart source
    depends_on: tuple[tuple[str, str], ...]
    installed: int | None = None


@dataclass
class _Tier:
    spec: TierSpec
    needs: dict[int, list[GroupKind]]  # stage → kinds whose API must be served
    helm_releases: list[_HelmRelease]
    triggers: list[ObjectRef]  # objects that make a controller define kinds at run time
    waits_for: list[tuple[ObjectRef, str]]  # (object, how) its health checks cover, beyond being applied
    exists: int | None = None
    attempted: int | None = None
    applied: dict[int, int] = field(default_factory=dict)  # stage → round it was written
    ready: int | None = None
    failures: list[tuple[int, tuple[GroupKind, ...]]] = field(default_factory=list)  # (round, kinds not served)
    missing: GroupKind | None = None  # what its last failed apply missed


class Simulation:
    """One cold start of a cluster: `run()` gives the outcome per tier."""

    def __init__(
        self,
        graph: TierGraph,
        facts: Mapping[TierId, TierFacts],
        providers: ProviderIndex,
        bootstrap: Bootstrap = Bootstrap(),
    ) -> None:
        self.graph = graph
        self.facts = facts
        self.providers = providers
        self.bootstrap = bootstrap
        self._resolved: dict[GroupKind, list[Provider]] = {}
        self._where: dict[GroupKind, dict[tuple[str, str], tuple[TierId, ...]]] = {}
        self._bootstrapped: dict[GroupKind, str | None] = {}
        self._namespaces: dict[str, list[TierId]] = {}  # Namespace name → the tiers that define it
        self._unjudged: set[GroupKind] = set()
        # The entry's namespace holds Flux itself: it exists before the first reconcile.
        self._always_there = ALWAYS_THERE | {t.namespace for t, s in graph.specs.items() if s.defined_in is None}
        for tid in sorted(graph.specs):
            for kind, name in self.facts.get(tid, TierFacts()).provider_defs:
                if kind == "Namespace":
                    self._namespaces.setdefault(name, []).append(tid)
        self.tiers: dict[TierId, _Tier] = {tid: self._tier(spec) for tid, spec in graph.specs.items()}
        self.helm_releases: dict[tuple[str, str], _HelmRelease] = {}
        for tid in sorted(self.tiers):  # one applied by two tiers: the first's (deterministic)
            for h in self.tiers[tid].helm_releases:
                self.helm_releases.setdefault((h.ref.namespace, h.ref.name), h)
        order = [t for t in bootstrap.tier_order if t in self.tiers]
        self._held_by = {later: earlier for earlier, later in zip(order, order[1:])}
        self.round = 0

    # -- setup ----------------------------------------------------------------------------------

    def resolve(self, gk: GroupKind) -> list[Provider]:
        found = self._resolved.get(gk)
        if found is None:
            found = self._resolved[gk] = self.providers.resolve(gk)
        return found

    def where(self, gk: GroupKind, namespace: str, name: str) -> tuple[TierId, ...]:
        """The tiers that apply object `gk` `namespace/name`, sorted (indexed per kind, on first use)."""
        index = self._where.get(gk)
        if index is None:
            found: dict[tuple[str, str], set[TierId]] = {}
            for tid, tier_facts in self.facts.items():
                if tid in self.tiers:
                    for stub in tier_facts.kinds.get(gk, ()):
                        found.setdefault((stub.ref.namespace, stub.ref.name), set()).add(tid)
            index = self._where[gk] = {key: tuple(sorted(owners)) for key, owners in found.items()}
        owners = index.get((namespace, name))
        if owners is None and namespace == "":  # a healthChecks entry without namespace for a cluster-scoped object
            owners = next((t for (_, n), t in sorted(index.items()) if n == name), None)
        return owners or ()

    def applied_by(self, owners: tuple[TierId, ...], gk: GroupKind, at: int) -> TierId | None:
        """The first of `owners` that has written objects of `gk` by round `at` (an object applied twice exists once either has)."""
        stage = stage_of(gk)
        written = [(self.tiers[o].applied[stage], o) for o in owners if self.tiers[o].applied.get(stage) is not None]
        written = [w for w in written if w[0] <= at]
        return min(written)[1] if written else None

    def _tier(self, spec: TierSpec) -> _Tier:
        facts = self.facts.get(spec.id, TierFacts())
        if spec.kube_config:  # applies to another cluster: nothing of it lands here
            facts = TierFacts()
        needs: dict[int, list[GroupKind]] = {2: [], 3: []}
        for gk in sorted(facts.kinds):
            stage = stage_of(gk)
            if stage == 1 or gk in facts.own_crds or gk == KUSTOMIZATION:
                continue
            providers = self.resolve(gk)
            if any(p.kind in (ProviderKind.BUILTIN, ProviderKind.PREINSTALLED, ProviderKind.LIVE) for p in providers):
                continue
            if not any(p.tier in self.graph.specs for p in providers):
                if self._bootstrap_kind(gk) is None:
                    self._unjudged.add(gk)
                continue  # nobody in this cluster provides it: not judged here (unknown-kind says so)
            needs[stage].append(gk)
        # A namespaced object whose Namespace another tier defines fails its dry-run ("namespaces … not
        # found") until that tier's first stage has run: judged like a kind, as `Namespace/<name>`.
        own = {name for kind, name in facts.provider_defs if kind == "Namespace"}
        for (kind, name, _), stubs in sorted(facts.provider_uses.items()):
            if kind != "Namespace" or name in own or name in self._always_there or name == spec.id.namespace or name not in self._namespaces:
                continue
            stage = 2 if all(stage_of(stub.ref.group_kind) == 2 for stub in stubs) else 3
            if namespace_kind(name) not in needs[stage]:
                needs[stage].append(namespace_kind(name))
        helm_releases = [self._helm_release(spec.id, m.ref, m.body) for m in facts.helm_releases]
        triggers = sorted(
            {stub.ref for gk, stubs in facts.kinds.items() if self.providers.knowledge.triggered_by(gk) for stub in stubs}
            | {ref for _, ref in facts.derived}
        )
        waits_for: list[tuple[ObjectRef, str]] = []
        if spec.wait:
            waits_for += [(h.ref, "wait: true") for h in helm_releases]
            waits_for += [(s.ref, "wait: true") for s in facts.kinds.get(KUSTOMIZATION, ())]
            waits_for += [(ref, "wait: true") for ref in triggers]
        else:
            for check in spec.health_checks:
                if check.name == "*" and check.namespace == "*":
                    continue  # healthCheckExprs say how to read a kind, not what to wait for
                ref = ObjectRef(check.api_version, check.kind, check.namespace, check.name)
                waits_for.append((ref, "healthChecks"))
        return _Tier(spec, needs, helm_releases, triggers, waits_for)

    def _helm_release(self, tier: TierId, ref: ObjectRef, body: Mapping[str, Any]) -> _HelmRelease:
        spec = body.get("spec") or {}
        source = None
        chart_ref = ((spec.get("chart") or {}).get("spec") or {}).get("sourceRef") or spec.get("chartRef") or {}
        if isinstance(chart_ref, Mapping) and chart_ref.get("name"):
            source = (str(chart_ref.get("kind", "")), str(chart_ref.get("namespace") or ref.namespace), str(chart_ref["name"]))
        depends = tuple(
            (str(d.get("namespace") or ref.namespace), str(d["name"]))
            for d in spec.get("dependsOn") or []
            if isinstance(d, Mapping) and d.get("name")
        )
        installed = 0 if (ref.namespace, ref.name) in self.bootstrap.releases else None
        return _HelmRelease(ref, tier, source, depends, installed)

    # -- what exists ------------------------------------------------------------------------------

    def bootstrap_entry(self, gk: GroupKind) -> BootstrapEntry | None:
        """The bootstrap entry that makes `gk` served before Flux starts, if one does."""
        kind = self._bootstrap_kind(gk)
        if kind is None:
            return None
        namespace = namespace_of(gk)
        if kind == "namespaces" and namespace is not None:
            made = self.bootstrap.namespace_source(namespace) or ""
            return next((e for e in self.bootstrap.entries if e.source == made), None) or BootstrapEntry(kind, made, f"namespace {namespace} created before Flux by {made}")
        source = self.bootstrap.credited(gk.group, gk.kind)
        # A CRD in `crds` is declared in .fluxwarden.yaml or seen by discovery (k3s, Talos, CRD bundles).
        entries = [e for e in self.bootstrap.entries if e.kind == kind] or ([e for e in self.bootstrap.entries if e.kind == "crds"] if kind == "declared" else [])
        return next((e for e in entries if e.source == source), None) or next(iter(entries), None) or BootstrapEntry(kind, "", "the bootstrap")

    def _bootstrap_kind(self, gk: GroupKind) -> str | None:
        if gk not in self._bootstrapped:
            self._bootstrapped[gk] = self._find_bootstrap_kind(gk)
        return self._bootstrapped[gk]

    def _find_bootstrap_kind(self, gk: GroupKind) -> str | None:
        b = self.bootstrap
        namespace = namespace_of(gk)
        if namespace is not None:  # helmfile sync creates a release's namespace (createNamespace defaults to true)
            if b.namespace_source(namespace) is not None:
                return "namespaces"
            return "release" if any(ns == namespace for ns, _ in b.releases) else None
        if (gk.group, gk.kind) in b.crds:
            return "declared"
        if b.credited(gk.group, gk.kind) is not None:
            return "crd-release"
        if self._bundled(gk):
            return "crd-release"
        for p in self.resolve(gk):
            if p.kind == ProviderKind.CHART and p.via is not None:
                key = (p.via.namespace, p.via.name)
                if key in b.releases:
                    return "release"
                if key in b.crd_releases or _chart_of(p) in b.crd_charts:
                    return "crd-release"
            if p.kind == ProviderKind.CRD and p.tier is not None and self._in_manifests(p.tier):
                return "manifests"
        return None

    def _bundled(self, gk: GroupKind) -> bool:
        """Whether a CRD-only chart the bootstrap installs (or a bundle standing for one: prometheus-operator's
        `stripped-down-crds.yaml` as prometheus-operator-crds) serves `gk`'s group, whoever else in git would
        install it later (kube-prometheus-stack's crds subchart): its CRDs exist before Flux."""
        for chart in self.bootstrap.crd_charts:
            rule = self.providers.knowledge.chart_rule(chart)
            if rule is not None and not rule.at_runtime and rule.provides(gk):
                return True
        return False

    def ordered_by_bootstrap(self, tier: TierId, provider: TierId) -> bool:
        """Whether only the bootstrap's tier order (not dependsOn) holds `tier` until `provider` is Ready."""
        if self.graph.depends_on(tier, provider) or not self._held_by:
            return False
        seen, todo = set(), [tier]
        while todo:
            node = todo.pop()
            for before in (*self.graph.deps.get(node, ()), self._held_by.get(node)):
                if before is not None and before not in seen:
                    seen.add(before)
                    todo.append(before)
        return provider in seen

    def tier_order_entry(self) -> BootstrapEntry:
        return next((e for e in self.bootstrap.entries if e.kind == "tier-order"), None) or BootstrapEntry("tier-order", "", "the bootstrap tier order")

    def _in_manifests(self, tier: TierId) -> bool:
        path = self.tiers[tier].spec.path if tier in self.tiers else None
        return path is not None and any(path == m.strip("./") or path.startswith(m.strip("./") + "/") for m in self.bootstrap.manifests)

    def served(self, gk: GroupKind, before: int) -> bool:
        """Whether `gk`'s API is served before round `before` (its CRD exists; for `Namespace/<name>`, the Namespace)."""
        namespace = namespace_of(gk)
        if namespace is not None:
            if self._bootstrap_kind(gk) is not None:
                return True
            attempts = (self.tiers[t].attempted for t in self._namespaces.get(namespace, ()))
            return any(attempted is not None and attempted < before for attempted in attempts)
        if self._bootstrap_kind(gk) is not None:
            return True
        for p in self.resolve(gk):
            when = self.provided_at(p)
            if when is not None and when < before:
                return True
        return False

    def provided_at(self, p: Provider) -> int | None:
        """The round in which provider `p` makes its kind served (None: not yet)."""
        if p.kind in (ProviderKind.BUILTIN, ProviderKind.PREINSTALLED, ProviderKind.LIVE):
            return 0
        if p.tier is None or p.tier not in self.tiers:
            return None
        tier = self.tiers[p.tier]
        if p.kind == ProviderKind.CRD:
            return tier.attempted  # stage 1 is written (and waited on) by every attempt
        if p.kind == ProviderKind.CHART and p.via is not None:
            release = self.helm_releases.get((p.via.namespace, p.via.name))
            return release.installed if release else None
        if p.kind == ProviderKind.RUNTIME and p.via is not None:
            applied = tier.applied.get(stage_of(p.via.group_kind))
            if applied is None:
                return None
            # Held Ready until it has acted only when a readable health check covers the CR.
            return applied if self._health_reads(tier, p.via) else applied + 1
        return None

    def _health_reads(self, tier: _Tier, ref: ObjectRef) -> bool:
        """Whether `tier`'s health checks hold it until the controller has acted on `ref`."""
        if not tier.spec.wait and not any(_same(ref, w) for w, _ in tier.waits_for):
            return False
        if ref.group_kind not in NO_KSTATUS_READY:
            return True
        return any(h.name == "*" and h.namespace == "*" and h.group_kind == ref.group_kind for h in tier.spec.health_checks)

    def object_ready(self, ref: ObjectRef, at: int) -> tuple[bool, TierId | None]:
        """Whether the object is Ready in round `at`, and the tier that applies it (None: not in git)."""
        gk = ref.group_kind
        owners = self.where(gk, ref.namespace, ref.name)
        if not owners:
            return True, None  # made by a chart or a controller: judged with what makes it
        owner = self.applied_by(owners, gk, at)
        if owner is None:
            return False, owners[0]
        if gk == HELM_RELEASE:
            release = self.helm_releases.get((ref.namespace, ref.name))
            return bool(release and release.installed is not None and release.installed <= at), owner
        if gk == KUSTOMIZATION:
            child = self.tiers.get(TierId(ref.namespace or "flux-system", ref.name))
            return bool(child is None or (child.ready is not None and child.ready <= at)), owner
        return True, owner

    # -- the rounds -------------------------------------------------------------------------------

    def run(self) -> "Simulation":
        """Play the rounds until nothing changes (then read `result()`)."""
        limit = 3 * len(self.tiers) + 6
        quiet = 0
        while self.round < limit and quiet < 2:
            self.round += 1
            changed = self._step(self.round)
            quiet = 0 if changed else quiet + 1
        return self

    def _step(self, r: int) -> bool:
        changed = False
        for tid in sorted(self.tiers):
            tier = self.tiers[tid]
            if tier.exists is None and self._exists(tier, r):
                tier.exists = r
                changed = True
            if tier.ready is not None or tier.exists is None or tier.spec.suspend or not self._may_start(tier, r):
                continue
            if tier.applied.get(3) is not None:
                continue  # applied: waiting for health
            changed |= self._apply(tier, r)
        changed |= self._controllers(r)
        for tier in self.tiers.values():
            if tier.ready is None and tier.applied.get(3) is not None and all(self._waited(tier, ref, r) for ref, _ in tier.waits_for):
                tier.ready = r
                changed = True
        return changed

    def _exists(self, tier: _Tier, r: int) -> bool:
        parent = tier.spec.defined_in
        if parent is None or parent not in self.tiers:
            return True
        applied = self.tiers[parent].applied.get(3)
        return applied is not None and applied < r

    def _may_start(self, tier: _Tier, r: int) -> bool:
        for dep in tier.spec.depends_on:
            other = self.tiers.get(dep)
            if other is None or other.ready is None or other.ready >= r:
                return False
        held = self._held_by.get(tier.spec.id)
        if held is not None:
            held_ready = self.tiers[held].ready
            if held_ready is None or held_ready >= r:
                return False
        return True

    def _apply(self, tier: _Tier, r: int) -> bool:
        if tier.attempted is None:
            tier.attempted = r
        tier.applied.setdefault(1, r)
        for stage in (2, 3):
            if stage in tier.applied:
                continue
            # Every object of the stage is dry-run before any is written: all its missing kinds are reported.
            missing = tuple(gk for gk in tier.needs[stage] if not self.served(gk, r))
            if missing:
                tier.failures.append((r, missing))
                tier.missing = missing[0]
                return True
            tier.applied[stage] = r
        return True

    def _controllers(self, r: int) -> bool:
        """helm-controller: install what can be installed this round (a chain of dependsOn in one go)."""
        changed = False
        progress = True
        while progress:
            progress = False
            for key in sorted(self.helm_releases):
                release = self.helm_releases[key]
                if release.installed is not None:
                    continue
                tier = self.tiers[release.tier]
                applied = tier.applied.get(3)
                if applied is None or not self._source_ready(release, r):
                    continue
                if not all(self._release_ready(d, r) for d in release.depends_on):
                    continue
                # Installed now when the tier's health check waits for it; otherwise in the worst case
                # the tier is Ready first and its dependents run before the chart's CRDs exist.
                waited = any(_same(release.ref, w) for w, _ in tier.waits_for)
                release.installed = r if waited or applied < r else r + 1
                progress = changed = True
        return changed

    def _source_ready(self, release: _HelmRelease, r: int) -> bool:
        """Whether the HelmRelease's chart source exists (applied by its tier); one not in git is assumed ready."""
        if release.source is None:
            return True
        kind, namespace, name = release.source
        gk = GroupKind("source.toolkit.fluxcd.io", kind)
        owners = self.where(gk, namespace, name)
        return not owners or self.applied_by(owners, gk, r) is not None

    def _release_ready(self, key: tuple[str, str], r: int) -> bool:
        release = self.helm_releases.get(key)
        if release is None:
            return True  # not in git (bootstrapped, or another tool's): not judged
        return release.installed is not None and release.installed <= r

    def _waited(self, tier: _Tier, ref: ObjectRef, r: int) -> bool:
        """Whether an object `tier` health-checks is Ready in round `r` (a CR: once applied, see `provided_at`)."""
        return self.object_ready(ref, r)[0]

    # -- the result -------------------------------------------------------------------------------

    def result(self) -> ColdStart:
        delays: dict[TierId, int] = {}
        order = self.graph.order()
        ordered = set(order)
        for tid in order + sorted(t for t in self.tiers if t not in ordered):
            tier = self.tiers[tid]
            before = [d for d in (*tier.spec.depends_on, tier.spec.defined_in, self._held_by.get(tid)) if d in delays]
            own = len(tier.failures) * tier.spec.retry_seconds if tier.ready is not None else 0
            delays[tid] = own + max((delays[d] for d in before), default=0)
        chains: dict[TierId, tuple[str, str]] = {}
        outcomes = {}
        for tid, tier in self.tiers.items():
            if tier.ready is not None:
                outcomes[tid] = TierOutcome(
                    tier.ready,
                    len(tier.failures),
                    delays.get(tid, 0),
                    f"no served {tier.failures[0][1][0]}" if tier.failures else None,
                    tuple(dict.fromkeys(gk for _, kinds in tier.failures for gk in kinds)),
                )
            else:
                reason, chain = self._chain(tid, chains, set())
                # Never Ready: no delay to speak of; its failed attempts are those of the simulated rounds.
                outcomes[tid] = TierOutcome(NEVER, len(tier.failures), 0, chain, tuple(dict.fromkeys(gk for _, kinds in tier.failures for gk in kinds)), reason)
        last = max((o.ready_round for o in outcomes.values() if o.ready_round is not None), default=0)
        return ColdStart(outcomes, last, tuple(sorted(self._unjudged)))

    def _chain(self, tid: TierId, memo: dict[TierId, tuple[str, str]], seen: set[TierId]) -> tuple[str, str]:
        """Why `tid` never becomes Ready: (reason, `a waits for X ← created by … ← …`)."""
        if tid in memo and not seen:
            return memo[tid]
        if tid in seen:
            return "cycle", f"back to {tid.name}"
        seen = seen | {tid}
        tier = self.tiers[tid]
        name = tid.name
        if tier.spec.suspend:
            out = ("suspended", f"{name} is suspended")
        elif tier.exists is None:
            parent = tier.spec.defined_in
            if parent in seen:  # the parent's apply waits for what this child brings
                out = ("parent", f"{name} is applied by {parent.name}, whose apply fails")
            else:
                why, rest = self._chain(parent, memo, seen) if parent in self.tiers else ("", "")
                out = ("suspended" if why == "suspended" else "parent", f"{name} is applied by {parent.name if parent else '?'}" + (f" ← {rest}" if rest else ""))
        elif tier.attempted is None:
            out = self._dependency_chain(tid, memo, seen)
        elif 3 not in tier.applied:
            out = ("apply", self._apply_chain(tid, tier.missing or tier.failures[-1][1][0], memo, seen))
        else:
            chain = self._health_chain(tid, memo, seen)
            out = ("deadlock" if chain.endswith(DEADLOCK_ENDINGS) else "health", chain)
        if not seen - {tid}:  # a chain is the same whichever tier asked first: only top-level ones are kept
            memo[tid] = out
        return out

    def _dependency_chain(self, tid: TierId, memo, seen) -> tuple[str, str]:
        tier = self.tiers[tid]
        held = self._held_by.get(tid)
        for dep in (*tier.spec.depends_on, *([held] if held else [])):
            other = self.tiers.get(dep)
            how = "dependsOn" if dep in tier.spec.depends_on else "comes after (bootstrap tier order)"
            if other is None:
                return "dependency", f"{tid.name} {how} {dep}, which this cluster does not have"
            if other.ready is None:
                if dep in seen:
                    if self.graph.depends_on(dep, tid):
                        return "cycle", f"{tid.name} {how} {dep.name}, which dependsOn {tid.name} (a dependsOn cycle)"
                    return "dependency", f"{tid.name} {how} {dep.name}, which waits for {tid.name}"
                why, rest = self._chain(dep, memo, seen)
                # Behind a suspended tier is meant, not stuck.
                return "suspended" if why == "suspended" else "dependency", f"{tid.name} {how} {dep.name} ← {rest}"
        return "dependency", f"{tid.name} never reconciles"

    def _apply_chain(self, tid: TierId, gk: GroupKind, memo, seen) -> str:
        text = f"{tid.name} waits for {gk}"
        namespace = namespace_of(gk)
        if namespace is not None:
            owner = self._namespaces[namespace][0]
            if owner in seen:
                return text + f" ← defined in {owner.name}, which waits for {tid.name}"
            return text + f" ← defined in {owner.name} ← " + self._chain(owner, memo, seen)[1]
        placed = [p for p in self.resolve(gk) if p.tier is not None and p.tier in self.tiers]
        if not placed:
            return text + " ← nobody applies what provides it"
        p = sorted(placed, key=lambda p: (p.tier != tid, p.kind != ProviderKind.RUNTIME, p.tier))[0]
        assert p.tier is not None  # placed: filtered above
        via = f"{p.via.kind}/{p.via.name}" if p.via else "?"
        if p.kind == ProviderKind.RUNTIME:
            operator = p.description.split(", when it reconciles")[0].split(" (")[0]
            text += f" ← created by {operator} after it reconciles {via}"
        elif p.kind == ProviderKind.CHART:
            text += f" ← installed by HelmRelease {p.via.namespace}/{p.via.name}" if p.via else ""
        else:
            text += f" ← CRD {p.via.name if p.via else ''}"
        if p.tier == tid:
            return text + f" ← {via} is in {tid.name}, whose apply fails"
        if p.kind == ProviderKind.CHART and p.via is not None and self.tiers[p.tier].applied.get(3) is not None:
            return text + f" ← HelmRelease {p.via.name} never installs (its chart source or dependsOn)"
        _, rest = self._chain(p.tier, memo, seen) if p.tier not in seen else ("", f"{p.tier.name} waits for {tid.name}")
        return text + f" ← {via} is in {p.tier.name}" + (f" ← {rest}" if rest else "")

    def _health_chain(self, tid: TierId, memo, seen) -> str:
        tier = self.tiers[tid]
        for ref, how in tier.waits_for:
            if self._waited(tier, ref, self.round):
                continue
            ready, owner = self.object_ready(ref, self.round)
            what = f"{ref.kind}/{ref.name}"
            text = f"{tid.name} waits for {what} ({how})"
            if ref.group_kind == KUSTOMIZATION:
                child = TierId(ref.namespace or "flux-system", ref.name)
                if child in self.tiers and self.graph.depends_on(child, tid):
                    return text + f" ← {child.name} dependsOn {tid.name}{OWN_PARENT}"
                if child in self.tiers and child not in seen:
                    return text + " ← " + self._chain(child, memo, seen)[1]
            if owner is not None and owner != tid:
                if self.graph.depends_on(owner, tid):
                    return text + f" ← applied by {owner.name}, which dependsOn {tid.name}{DEPENDS_BACK}"
                if owner not in seen:
                    return text + f" ← applied by {owner.name} ← " + self._chain(owner, memo, seen)[1]
            if ref.group_kind == HELM_RELEASE:
                return text + " ← it never installs (its chart source or dependsOn is never ready)"
            return text
        return f"{tid.name} never becomes healthy"


def namespace_kind(name: str) -> GroupKind:
    """The pseudo-kind a tier's need for Namespace `name` is recorded as (`Namespace/name`)."""
    return GroupKind("", f"Namespace/{name}")


def namespace_of(gk: GroupKind) -> str | None:
    return gk.kind.removeprefix("Namespace/") if gk.group == "" and gk.kind.startswith("Namespace/") else None


def _same(ref: ObjectRef, other: ObjectRef) -> bool:
    return ref.group_kind == other.group_kind and ref.name == other.name and other.namespace in ("", "*", ref.namespace)


def _chart_of(p: Provider) -> str:
    """The chart named in a CHART provider's description (`chart X of HelmRelease ns/name`)."""
    return p.description.removeprefix("chart ").split(" of HelmRelease")[0]


def simulate(
    graph: TierGraph, facts: Mapping[TierId, TierFacts], providers: ProviderIndex, bootstrap: Bootstrap = Bootstrap()
) -> ColdStart:
    """A cold start of the cluster (see the module docstring)."""
    return Simulation(graph, facts, providers, bootstrap).run().result()

