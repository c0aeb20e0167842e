"""Who provides each kind's API in a cluster: built-in, Flux, a CRD in git, a chart, or a controller at run time."""

from __future__ import annotations

import enum
import re
from collections import defaultdict
from dataclasses import dataclass
from typing import Callable, Mapping

from bot.engine.render.facts import TierFacts, facts_of_render
from bot.engine.render.knowledge import ChartRule, KnowledgeBase, RuntimeCrdRule, bundle_provides
from bot.engine.core.model import GroupKind, Manifest, ObjectRef, TierId
from bot.engine.render.rendered import ClusterRender


class ProviderKind(str, enum.Enum):
    """How a kind's API comes to exist on the cluster."""

    BUILTIN = "built-in"
    PREINSTALLED = "flux"
    CRD = "crd"  # a CustomResourceDefinition rendered from git
    CHART = "chart"  # a HelmRelease whose chart ships the CRD (created when helm-controller installs it)
    RUNTIME = "runtime"  # a controller creates the CRD when it reconciles a trigger CR
    LIVE = "live"  # seen on the live cluster (filled in by the live adapter)


@dataclass(frozen=True)
class Provider:
    """One way a kind's API is provided; `tier`/`via` say which tier and object bring it."""

    kind: ProviderKind
    tier: TierId | None = None
    via: ObjectRef | None = None  # the CRD, HelmRelease or trigger CR
    description: str = ""
    trigger_kind: GroupKind | None = None  # for RUNTIME rules whose trigger is not applied anywhere

    @property
    def at_runtime(self) -> bool:
        """Whether the CRD appears only after a controller reconciles `via` (not at apply time)."""
        return self.kind in (ProviderKind.CHART, ProviderKind.RUNTIME)


class ProviderIndex:
    """Resolves a GroupKind to every provider the cluster's render offers."""

    def __init__(self, render: ClusterRender | None, knowledge: KnowledgeBase, facts: Mapping[TierId, TierFacts] | None = None) -> None:
        self.knowledge = knowledge
        self._crds: dict[GroupKind, list[Provider]] = defaultdict(list)
        self._charts: list[tuple[TierId, ObjectRef, ChartRule]] = []
        self._released: dict[GroupKind, list[Provider]] = defaultdict(list)  # CRDs rendered charts install
        self._triggers: list[tuple[TierId, ObjectRef, RuntimeCrdRule]] = []
        self._packages: dict[ObjectRef, str] = {}
        self._derived: dict[GroupKind, list[Provider]] = defaultdict(list)
        self._live: dict[GroupKind, Provider] = {}
        self._bundles: list[tuple[TierId, str, Callable[[GroupKind], bool]]] = []  # remote CRD bundles a tier's build names
        self._chart_crd_sources: list[tuple[TierId, str, ChartRule]] = []  # tiers applying a chart's crds from its own repository
        if facts is None:
            assert render is not None, "a ProviderIndex needs a render or its facts"
            facts = facts_of_render(render, knowledge)
        releases = render.releases if render is not None else {}
        self.facts = facts
        if render is not None:
            self._chart_crd_sources = _chart_crd_sources(render, facts, knowledge)
        oci_urls = {key: url for tier_facts in facts.values() for key, url in tier_facts.oci_urls.items()}
        for tier, tier_facts in facts.items():
            for defined, ref in tier_facts.crds:
                self._crds[defined].append(Provider(ProviderKind.CRD, tier, ref, f"CRD {ref.name}"))
            for manifest in tier_facts.helm_releases:
                release = releases.get(manifest.ref)
                if release is not None and release.rendered:
                    # Its chart was rendered: the CRDs it installs are known exactly (crds/ under the
                    # release's CRD policy, and templates), so the knowledge base is not asked.
                    described = f"chart {release.chart} of HelmRelease {manifest.ref.namespace}/{manifest.ref.name}"
                    for defined, _ in release.crds:
                        self._released[defined].append(Provider(ProviderKind.CHART, tier, manifest.ref, described))
                    continue
                chart = chart_name(manifest, oci_urls)
                rule = knowledge.chart_rule(chart) if chart else None
                # Not rendered: its composed values (valuesFrom too) when the chart stage made them, else spec.values.
                values = release.values if release is not None and release.values is not None else (manifest.body.get("spec") or {}).get("values")
                if rule and rule.crds_enabled(values or {}):
                    self._charts.append((tier, manifest.ref, rule))
            self._packages.update(tier_facts.packages)
            for url in tier_facts.remote:
                provides = bundle_provides(url, knowledge)
                if provides is not None:
                    self._bundles.append((tier, url, provides))
            triggers = [
                (stub.position, index, stub.ref, rule)
                for gk, stubs in tier_facts.kinds.items()
                for index, rule in enumerate(knowledge.triggered_by(gk))
                for stub in stubs
            ]
            self._triggers.extend((tier, ref, rule) for _, _, ref, rule in sorted(triggers, key=lambda t: t[:2]))
            for derived, ref in tier_facts.derived:
                self._derived[derived].append(
                    Provider(ProviderKind.RUNTIME, tier, ref, f"{ref.kind} {ref.name} (defines it at run time)")
                )

    def packages(self, trigger: GroupKind) -> list[str]:
        """The `spec.package` of every applied trigger CR of kind `trigger` (Crossplane Providers), sorted."""
        return sorted({self._packages[ref] for _, ref, _ in self._triggers if ref.group_kind == trigger and ref in self._packages})

    def learn_live(self, kinds: Mapping[GroupKind, str]) -> None:
        """Record kinds that exist on the live cluster (with who made them) as providers."""
        for gk, who in kinds.items():
            self._live[gk] = Provider(ProviderKind.LIVE, description=who)

    def resolve(self, gk: GroupKind) -> list[Provider]:
        """Every provider of `gk`; empty when nobody known provides it."""
        if self.knowledge.is_builtin(gk):
            return [Provider(ProviderKind.BUILTIN, description="built-in Kubernetes API")]
        if self.knowledge.is_preinstalled(gk):
            return [Provider(ProviderKind.PREINSTALLED, description="installed by flux bootstrap")]
        found = list(self._crds.get(gk, ()))
        # kustomize-controller fetches them (Fluxwarden does not): what the bundle holds is known, not read.
        found += [Provider(ProviderKind.CRD, tier, None, f"CRDs of the remote bundle {url}, as known") for tier, url, provides in self._bundles if provides(gk)]
        found += [Provider(ProviderKind.CRD, tier, None, f"{what}, as known") for tier, what, rule in self._chart_crd_sources if rule.provides(gk)]
        found += self._released.get(gk, [])
        found += [
            Provider(ProviderKind.CHART, tier, ref, f"chart {rule.chart} of HelmRelease {ref.namespace}/{ref.name}")
            for tier, ref, rule in self._charts
            if rule.provides(gk)
        ]
        found += [
            Provider(ProviderKind.RUNTIME, tier, ref, f"{rule.operator}, when it reconciles {ref.kind} {ref.name}")
            for tier, ref, rule in self._triggers
            if rule.creates(gk) and package_provides(self._packages.get(ref), ref, gk)
        ]
        found += self._derived.get(gk, [])
        if not found:
            # A known runtime rule whose trigger CR this cluster never applies: say so rather than "unknown".
            found += [
                Provider(ProviderKind.RUNTIME, description=rule.operator, trigger_kind=rule.trigger)
                for rule in self.knowledge.runtime_rules(gk)
            ]
        if gk in self._live:
            found.append(self._live[gk])
        return found


# Crossplane provider packages name the API groups they serve: upbound's `provider-aws-iam` serves
# iam.aws.upbound.io (and iam.aws.m.upbound.io, v2's namespaced kinds), `provider-family-aws` only
# aws.upbound.io (ProviderConfig); crossplane-contrib's `provider-kubernetes` serves kubernetes.crossplane.io.
# https://docs.upbound.io/manuals/packages/providers/provider-families/ ; a package of another shape says nothing.
_PACKAGE_FAMILY_ALIASES = {"terraform": "tf"}  # upbound/provider-terraform serves tf.upbound.io


def package_provides(package: str | None, trigger: ObjectRef, gk: GroupKind) -> bool:
    """Whether a Crossplane Provider with `package` can serve `gk`'s group (True when the package does not say)."""
    if package is None or trigger.kind != "Provider" or trigger.group != "pkg.crossplane.io":
        return True
    name = package.rsplit("/", 1)[-1].split("@", 1)[0].split(":", 1)[0]
    if not name.startswith("provider-") or "{" in name or "$" in name:
        return True
    name = name[len("provider-"):]
    family_only = name.startswith("family-")
    family, _, service = name[len("family-"):].partition("-") if family_only else name.partition("-")
    family = _PACKAGE_FAMILY_ALIASES.get(family, family)
    labels = gk.group.split(".")
    if len(labels) < 3 or labels[-1] != "io" or labels[-2] not in ("upbound", "crossplane"):
        return False
    rest = labels[:-2]
    if rest and rest[-1] == "m":  # v2 namespaced managed resources: <service>.<family>.m.upbound.io
        rest = rest[:-1]
    if not rest or rest[-1] != family:
        return False
    if family_only:
        return len(rest) == 1
    return not service or rest[:-1] in ([], [service.replace("-", "")], [service])


def chart_name(manifest: Manifest, oci_urls: Mapping[tuple[str, str], str]) -> str | None:
    """The chart a HelmRelease installs: `spec.chart.spec.chart`, or the last segment of its chartRef's OCI URL."""
    spec = manifest.body.get("spec") or {}
    chart = ((spec.get("chart") or {}).get("spec") or {}).get("chart")
    if isinstance(chart, str) and chart:
        return chart.rstrip("/").rsplit("/", 1)[-1]
    ref = spec.get("chartRef") or {}
    if ref.get("kind") == "OCIRepository":
        url = oci_urls.get((str(ref.get("namespace") or manifest.ref.namespace), str(ref.get("name") or "")), "")
        return url.rstrip("/").rsplit("/", 1)[-1] or None
    return None


# A path of a chart's CRDs in its own repository: `charts/kube-prometheus-stack/crds`,
# `charts/cloudnative-pg/templates/crds`, `charts/kube-prometheus-stack/charts/crds/crds`.
_CHART_CRDS = re.compile(r"(?:^|/)charts/([a-z0-9][a-z0-9-]*)(?:/[^/]+)*?/crds(?:/|$)")


def _chart_crd_sources(render: ClusterRender, facts: Mapping[TierId, TierFacts], knowledge: KnowledgeBase) -> list[tuple[TierId, str, ChartRule]]:
    """Tiers that apply a known chart's CRDs straight from the chart's repository (not rendered: another source).

    The k8s-at-home pattern (toboshii/home-ops): a GitRepository of prometheus-community/helm-charts whose
    `spec.ignore` keeps only `!/charts/kube-prometheus-stack/crds`, and a Kustomization (`wait: true`) applying
    it. source-controller ships only the kept paths, so the tier applies that chart's CRDs: as known from the
    knowledge base (the chart's groups), never read. Judged from the tier's `path` and the source's kept paths.
    """
    sources = {(m.ref.kind, m.ref.namespace, m.ref.name): m for f in facts.values() for m in f.chart_sources}
    out = []
    for tid, tier in render.tiers.items():
        source = tier.spec.source
        if tier.rendered or tier.failed or source.kind != "GitRepository":
            continue
        repository = sources.get((source.kind, source.namespace, source.name))
        spec = repository.body.get("spec") if repository is not None else None
        if not isinstance(spec, Mapping):
            continue
        ignore = raw if isinstance(raw := spec.get("ignore"), str) else ""
        kept = [line.strip()[1:].strip("/") for line in ignore.splitlines() if line.strip().startswith("!")]
        for place in (tier.spec.path, *kept):
            match = _CHART_CRDS.search(place or "")
            rule = knowledge.chart_rule(match.group(1)) if match else None
            if rule is not None and not rule.at_runtime:
                out.append((tid, f"CRDs of chart {rule.chart} ({place} of GitRepository {source.namespace}/{source.name})", rule))
                break
    return out
