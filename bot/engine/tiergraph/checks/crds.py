"""Is every object's API there when its tier applies? CRDs in git, charts, and CRDs made at run time.

kustomize-controller server-side dry-runs every object of an apply stage before writing any; a
kind with no CRD yet fails the stage, so the whole Kustomization fails and retries forever
(fluxcd/pkg ssa/manager_apply.go ApplyAllStaged). CRDs of the same build are fine: they are
applied and waited on in the first stage.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Iterator, Sequence

from bot.engine.tiergraph.checks.context import CheckContext, check, name_list, plural
from bot.engine.tiergraph.coldstart import duration
from bot.engine.tiergraph.bootstrap import names_group
from bot.engine.render.facts import ObjectStub, TierFacts
from bot.engine.core.model import Finding, GroupKind, ObjectRef, Severity, TierId
from bot.engine.tiergraph.providers import Provider, ProviderKind, chart_name


@check(
    "second-order-crd",
    "crd-not-ordered",
    "dependency-not-waited",
    "unknown-kind",
)
def api_availability(ctx: CheckContext) -> Iterator[Finding]:
    unknown: dict[GroupKind, list[tuple[TierId, Sequence[ObjectStub]]]] = {}
    for tier_id in ctx.render.tiers:
        facts = ctx.facts[tier_id]
        for gk, objects in sorted(facts.kinds.items()):
            if gk in facts.own_crds:
                continue  # stage 1 of the same apply creates and waits for it
            providers = ctx.providers.resolve(gk)
            if _unprovided(providers):
                unknown.setdefault(gk, []).append((tier_id, objects))
                continue
            for finding in _judge(ctx, tier_id, gk, objects, providers):
                yield by_cold_start(ctx, finding, gk, providers)
    for gk, uses in sorted(unknown.items()):
        yield from _judge_unknown(ctx, gk, uses, ctx.providers.resolve(gk))


def _unprovided(providers: Sequence[Provider]) -> bool:
    """Whether nobody in this cluster is known to provide the kind (no tier brings it, not built in)."""
    return not any(p.tier is not None or p.kind in (ProviderKind.BUILTIN, ProviderKind.PREINSTALLED, ProviderKind.LIVE) for p in providers)


def _judge_unknown(ctx: CheckContext, gk: GroupKind, uses: list[tuple[TierId, Sequence[ObjectStub]]], providers: list[Provider]) -> Iterator[Finding]:
    """A kind no file and no known chart provides: the bootstrap's credit, else what each tier's waited
    dependencies prove, else one warning for the kind listing every tier that applies it."""
    if ctx.simulation.bootstrap_entry(gk) is None:
        proved = []
        for tier, objects in uses:
            assumption = _assumed(ctx, tier, gk)
            if assumption is None:
                proved.append(False)
                continue
            proved.append(True)
            first = objects[0]
            yield Finding(
                "unknown-kind",
                Severity.INFO,
                f"{plural(len(objects), gk.kind + ' object')} ({name_list(m.ref.name for m in objects)}): no CRD for {gk} is "
                f"in git or in a known chart; assumed served: {assumption}",
                kustomization=tier, object=first.ref, location=ctx.locate(first),
            )
        uses = [use for use, ok in zip(uses, proved) if not ok]
    if not uses:
        return
    tier, objects = uses[0]
    stubs = [stub for _, tier_objects in uses for stub in tier_objects]
    where = f"{plural(len(stubs), gk.kind + ' object')} ({name_list(m.ref.name for m in stubs)}) in {name_list((str(t) for t, _ in uses), 3)}"
    orphan_rules = [p for p in providers if p.kind == ProviderKind.RUNTIME and p.trigger_kind]
    if orphan_rules:
        rule = orphan_rules[0]
        applied = ctx.providers.packages(rule.trigger_kind) if rule.trigger_kind else []
        message = (
            f"{where}: the {gk} CRD is created at run time by {rule.description} when it reconciles a "
            + (
                f"{rule.trigger_kind} whose package serves {gk.group}; this cluster's ({name_list(applied, 3)}) do not"
                if applied else f"{rule.trigger_kind}, and this cluster applies none"
            )
        )
    else:
        message = f"{where}: no CRD for {gk} is in git, no known chart or operator provides it, and no dependency of {'this tier' if len(uses) == 1 else 'these tiers'} proves it served. {_unknown_hint(ctx, gk, [t for t, _ in uses])}"
    finding = Finding("unknown-kind", Severity.WARNING, message, kustomization=tier, object=objects[0].ref, location=ctx.locate(objects[0]))
    yield by_cold_start(ctx, finding, gk, providers)


def _unknown_hint(ctx: CheckContext, gk: GroupKind, tiers: list[TierId]) -> str:
    """The fix that applies: a dependsOn on a tier whose HelmRelease is named for the kind's group, the
    bootstrap's declaration when the cluster has a bootstrap, runtime_crds only for a run-time operator."""
    likely = sorted(
        {
            owner
            for owner, facts in ctx.facts.items()
            for manifest in facts.helm_releases
            if owner not in tiers and _names_group(ctx, manifest, gk.group)
        }
    )
    if likely:
        return ctx.add_dependency(tiers[0], likely, f" (its HelmRelease is named for {gk.group}; with wait: true there)")
    declare = f"declare it under bootstrap: crds: [{gk.group}/{gk.kind}] in .fluxwarden.yaml"
    if not ctx.bootstrap.empty:
        return f"If this cluster's bootstrap installs it, {declare}; else add a dependsOn on the tier that installs it"
    return (
        f"Add a dependsOn on the tier that installs its CRD; if it is installed before Flux, {declare}; add it to "
        f"runtime_crds only if an operator creates it at run time"
    )


def _names_group(ctx: CheckContext, manifest, group: str) -> bool:
    """Whether a HelmRelease's name or chart names an API group (`kopiur` for kopiur.home-operations.com)."""
    chart = chart_name(manifest, _oci_urls(ctx))
    return any(names_group(name, group) for name in (manifest.ref.name, chart or "") if name)


def _oci_urls(ctx: CheckContext) -> dict[tuple[str, str], str]:
    return {key: url for facts in ctx.facts.values() for key, url in facts.oci_urls.items()}


# Application charts that template workloads from values and never ship CRDs of their own (bjw-s app-template):
# waiting for one proves nothing about a kind.
_GENERIC_CHARTS = frozenset({"app-template"})


def _assumed(ctx: CheckContext, tier: TierId, gk: GroupKind) -> str | None:
    """What in `tier`'s dependencies proves `gk` served before it applies, in words (None: nothing does).

    A dependency is Ready only once its apply and its health checks passed (kustomize-controller
    checkHealth), so it proves the CRD exists when it health-checks that CRD, applies objects of the kind
    itself, or waits for a HelmRelease whose chart we cannot read: one named for the kind's API group at any
    depth, else one a direct dependency waits for (an application chart proves nothing).
    """
    dependencies = sorted(ctx.graph.ancestors(tier))
    direct = set(ctx.graph.deps.get(tier, ()))
    dependencies.sort(key=lambda d: d not in direct)
    how = lambda dep: f"dependsOn {dep}" if dep in direct else f"dependsOn (through its dependencies) {dep}"  # noqa: E731
    for dep in dependencies:
        spec = ctx.graph.specs.get(dep)
        for h in spec.health_checks if spec else ():
            if h.kind == "CustomResourceDefinition" and h.name.split(".", 1)[-1] == gk.group and h.name.split(".", 1)[0].startswith(gk.kind.lower()):
                return f"{how(dep)} → healthChecks CustomResourceDefinition/{h.name}"
    named: list[tuple[TierId, ObjectRef | TierId, str]] = []
    unnamed: list[tuple[TierId, ObjectRef | TierId, str]] = []
    for dep in dependencies:
        spec = ctx.graph.specs.get(dep)
        if spec is None:
            continue
        for manifest in ctx.facts.get(dep, TierFacts()).helm_releases:
            ref = manifest.ref
            if not (spec.wait or any(h.kind == "HelmRelease" and h.name == ref.name and h.namespace in (ref.namespace, "") for h in spec.health_checks)):
                continue
            release = ctx.render.releases.get(ref)
            if release is not None and release.rendered:
                continue  # its chart was read: what it installs is known exactly
            chart = chart_name(manifest, _oci_urls(ctx)) or "?"
            rule = ctx.providers.knowledge.chart_rule(chart)
            if _names_group(ctx, manifest, gk.group):
                # Named for the group, even when a known chart shares its name (hostzero's keycloak-operator
                # is not keycloak.org's): the knowledge base's rule does not cover this kind.
                if rule is None or not rule.provides(gk):
                    named.append((dep, ref, chart if rule is None else f"{chart} (its namesake in the knowledge base does not ship it)"))
            elif rule is None and dep in direct and chart not in _GENERIC_CHARTS:
                unnamed.append((dep, ref, chart))
    # A Kustomization of another source is as opaque as an unknown chart, and as telling once Ready.
    for dep in dependencies:
        for opaque in _opaque_waited(ctx, dep):
            entry = (dep, opaque, f"{ctx.graph.specs[opaque].source.kind} {ctx.graph.specs[opaque].source.name} not rendered")
            if names_group(opaque.name, gk.group) or names_group(ctx.graph.specs[opaque].source.name, gk.group):
                named.append(entry)
            elif dep in direct:
                unnamed.append(entry)
    if named:
        dep, via, chart = named[0]
        if isinstance(via, TierId):
            return f"{how(dep)} → Kustomization {via} (named for {gk.group}), content from {chart}"
        known = "" if "namesake" in chart else " not known"
        return f"{how(dep)} → HelmRelease {via.namespace}/{via.name} (named for {gk.group}), chart {chart}{known}"
    for dep in dependencies:
        if gk in ctx.facts.get(dep, TierFacts()).kinds:
            return f"{how(dep)}, which applies {gk.kind} objects itself (it cannot be Ready without the CRD)"
    if unnamed:
        dep, via, chart = unnamed[0]
        if isinstance(via, TierId):
            return f"{how(dep)} → Kustomization {via}, content from {chart}"
        return f"{how(dep)} → HelmRelease {via.namespace}/{via.name}, chart {chart} not known"
    return None


def _opaque_waited(ctx: CheckContext, dep: TierId) -> list[TierId]:
    """The Kustomizations of another source (content not rendered) that `dep` is Ready only after: itself, or
    a child it applies and waits for (`wait: true`, or a Kustomization health check). A Kustomization is
    Ready only once its whole apply succeeded (kustomize-controller), CRDs included, as flux2-multi-tenancy's
    `kyverno` waits for `kyverno-controller` applying kyverno's release manifests from an OCIRepository."""
    spec = ctx.graph.specs.get(dep)
    if spec is None:
        return []
    candidates = [dep] + [
        child for child, child_spec in ctx.graph.specs.items()
        if child_spec.defined_in == dep and child != dep and (
            spec.wait or any(h.kind == "Kustomization" and h.name == child.name and h.namespace in (child.namespace, "") for h in spec.health_checks)
        )
    ]
    out = []
    for tier in candidates:
        rendered = ctx.render.tiers.get(tier)
        if rendered is not None and not rendered.rendered and not rendered.failed and not ctx.config.is_this_repo(ctx.graph.specs[tier].source):
            out.append(tier)
    return out


NO_READY_CONDITION = "has no Ready condition Flux can read"  # the simulation's own warning: judged already
ORDERING_CHECKS = frozenset({"second-order-crd", "crd-not-ordered", "dependency-not-waited", "unknown-kind"})


def by_cold_start(ctx: CheckContext, finding: Finding, gk: GroupKind, providers: Sequence[Provider]) -> Finding:
    """The severity the simulated cold start gives a static ordering finding (its id kept).

    Never Ready because of this kind: an error naming the chain. Ready after failed applies, or
    unordered (its first apply may fail): a warning with the delay. Served before Flux starts by the
    bootstrap, or ordered by its tier order: info naming the bootstrap entry.
    """
    if finding.check not in ORDERING_CHECKS or finding.kustomization is None or NO_READY_CONDITION in finding.message:
        return finding
    tier = finding.kustomization
    simulation = ctx.simulation
    outcome = ctx.cold_start.tiers.get(tier)
    entry = simulation.bootstrap_entry(gk)
    if entry is None and any(p.tier is not None and simulation.ordered_by_bootstrap(tier, p.tier) for p in providers):
        entry = simulation.tier_order_entry()
    if outcome is None:
        return finding
    if entry is not None and gk not in outcome.failed_on and (outcome.ready_round is not None or outcome.reason != "apply"):
        where = f" ({entry.source})" if entry.source else ""
        return replace(
            finding,
            severity=Severity.INFO,
            message=f"fine on a cold start only because of the bootstrap: {entry.description}{where}. Without it: {finding.message}",
        )
    if finding.check == "unknown-kind":
        return finding
    if outcome.ready_round is None and outcome.reason == "apply" and gk in outcome.failed_on:
        return replace(finding, severity=Severity.ERROR, message=f"{finding.message}. Cold start: {tier.name} never becomes Ready: {outcome.blocked_by}")
    spec = ctx.graph.specs.get(tier)
    retry = duration(spec.retry_seconds) if spec else "its retryInterval"
    if gk in outcome.failed_on and outcome.ready_round is not None:
        tail = (
            f"Cold start: {tier.name} is Ready in round {outcome.ready_round} after "
            f"{plural(outcome.failed_attempts, 'failed attempt')}, up to {duration(outcome.max_delay_seconds)} late"
        )
    else:
        tail = f"Nothing orders it: its first apply can fail, and it retries after {retry}"
    return replace(finding, severity=Severity.WARNING, message=f"{finding.message.rstrip('.')}. {tail}")


def _judge(ctx: CheckContext, tier: TierId, gk: GroupKind, objects: Sequence[ObjectStub], providers: list[Provider]) -> Iterator[Finding]:
    if any(p.kind in (ProviderKind.BUILTIN, ProviderKind.PREINSTALLED, ProviderKind.LIVE) for p in providers):
        return
    first = objects[0]
    what = f"{plural(len(objects), gk.kind + ' object')} ({name_list(m.ref.name for m in objects)})"
    need, rely = ("needs", "relies") if len(objects) == 1 else ("need", "rely")

    def finding(check_id: str, severity: Severity, message: str) -> Finding:
        return Finding(check_id, severity, message, kustomization=tier, object=first.ref, location=ctx.locate(first))

    static = [p for p in providers if p.kind == ProviderKind.CRD]
    if static:
        if any(p.tier == tier or ctx.before(tier, p.tier) for p in static if p.tier):
            return
        # A chart/operator in a waited dependency also brings it: ordered, even if git has a copy elsewhere.
        if any(p.at_runtime and p.tier and p.tier != tier and _waited(ctx, tier, p) for p in providers):
            return
        owners = name_list(str(p.tier) for p in static if p.tier)
        yield finding(
            "crd-not-ordered",
            Severity.ERROR,
            f"{what} {need} the CRD for {gk}, which {owners} applies; {tier} does not depend on it, so on a cold "
            f"cluster its dry-run can fail with \"no matches for kind {gk.kind}\". "
            + ctx.add_dependency(tier, (p.tier for p in static if p.tier)),
        )
        return
    runtime = [p for p in providers if p.at_runtime and p.tier is not None]
    if runtime:
        yield from _judge_runtime(ctx, tier, gk, what, need, rely, runtime, finding)
        return
    # Nobody in this cluster provides it: judged once per kind by _judge_unknown.


def _judge_runtime(ctx, tier, gk, what, need, rely, runtime: list[Provider], finding) -> Iterator[Finding]:
    # Prefer a provider that is ordered correctly; judge waiting on that one.
    ordered = [p for p in runtime if p.tier != tier and ctx.before(tier, p.tier)]
    if ordered:
        waited = [p for p in ordered if _waited(ctx, tier, p)]
        outcome = ctx.cold_start.tiers.get(tier)
        if waited and outcome is not None and gk in outcome.failed_on and ctx.simulation.bootstrap_entry(gk) is None:
            # Waited, but on a CR whose status Flux cannot read: Ready passes before the operator acts.
            p = waited[0]
            spec = ctx.graph.specs.get(tier)
            yield finding(
                "dependency-not-waited",
                Severity.WARNING,
                f"{what} {rely} on {p.tier} for the {gk} CRD, created at run time by {p.description}; {_via(p).kind} "
                f"{_via(p).name} {NO_READY_CONDITION}, so {p.tier}'s health check may pass before the CRD "
                f"exists and {tier} may fail once (retry after {duration(spec.retry_seconds) if spec else 'its retryInterval'}). "
                f"Add a healthCheckExprs entry for {_via(p).kind} to {p.tier} (e.g. current: \"status.phase == 'Deployed'\")",
            )
            return
        if waited:
            return
        dependencies = [p for p in ordered if ctx.waits_for(tier, p.tier)]
        if not dependencies:
            # Only ancestors: the child exists as soon as their apply writes it, whatever they wait for,
            # and a dependsOn on an ancestor deadlocks with its wait. The provider needs a tier of its own.
            p = ordered[0]
            yield finding(
                "dependency-not-waited",
                Severity.WARNING,
                f"{what} {rely} on {p.tier} for the {gk} CRD, created at run time by {p.description}; {p.tier} "
                f"applies {tier} itself, so {tier} reconciles as soon as it is written, before the CRD exists (its "
                f"dry-run fails and retries until then; wait: true on {p.tier} does not hold it back). Move "
                f"{_via(p).kind} {_via(p).name} into a Kustomization of its own with wait: true and add it to {tier}'s dependsOn",
            )
            return
        p = dependencies[0]
        yield finding(
            "dependency-not-waited",
            Severity.WARNING,
            f"{what} {rely} on {p.tier} for the {gk} CRD, created at run time by {p.description}; {p.tier} has "
            f"neither wait: true nor a healthChecks entry for {_via(p).kind} {_via(p).name}, so it reports Ready "
            f"before the CRD exists and {tier} can fail its dry-run",
        )
        return
    same = [p for p in runtime if p.tier == tier]
    if same:
        p = same[0]
        yield finding(
            "second-order-crd",
            Severity.ERROR,
            f"{what} {need} the {gk} CRD, which is created at run time by {p.description} — in this same tier. "
            f"Flux dry-runs the whole tier first, the unknown kind aborts it, {_via(p).kind} {_via(p).name} is never "
            f"applied, the CRD is never created: {tier} can never converge. Keep {_via(p).kind} {_via(p).name} in a "
            f"Kustomization with wait: true and move these objects into another one that dependsOn it (not one that "
            f"{tier} applies itself)",
        )
        return
    owners = name_list(str(p.tier) for p in runtime)
    p = runtime[0]
    if all(q.kind == ProviderKind.CHART for q in runtime):
        # docs/reference.md: a chart's CRD in a non-dependency tier is crd-not-ordered (second-order is for operators' CRs).
        yield finding(
            "crd-not-ordered",
            Severity.ERROR,
            f"{what} {need} the CRD for {gk}, which {p.description} in {owners} installs; {tier} does not depend "
            f"on it, so on a cold cluster its dry-run can fail with \"no matches for kind {gk.kind}\". "
            + ctx.add_dependency(tier, (q.tier for q in runtime), " (with wait: true there)"),
        )
        return
    yield finding(
        "second-order-crd",
        Severity.ERROR,
        f"{what} {need} the {gk} CRD, created at run time by {p.description} in {owners}; {tier} does not depend "
        f"on it, so its dry-run fails until that has happened. " + ctx.add_dependency(tier, (q.tier for q in runtime), " (with wait: true there)"),
    )


def _via(p: Provider) -> ObjectRef:
    """The object that brings a runtime provider's CRD (a runtime provider always names one)."""
    assert p.via is not None
    return p.via


def _waited(ctx: CheckContext, tier: TierId, provider: Provider) -> bool:
    """Whether `tier` depends on the provider's tier and that tier health-checks the object that brings
    the CRD (wait: true covers all)."""
    if provider.tier is None or provider.via is None:
        return False
    spec = ctx.graph.specs.get(provider.tier)
    if spec is None or not ctx.waits_for(tier, provider.tier):
        return False
    if spec.wait:
        return True
    via = provider.via
    # A healthCheckExprs entry (name and namespace "*") says how to read a kind, not what to wait for:
    # only `wait` or `healthChecks` choose the objects (kustomize-controller checkHealth; RFC-0009).
    return any(
        h.kind == via.kind
        and h.group_kind.group == via.group
        and h.name == via.name
        and h.namespace in (via.namespace, "")
        for h in spec.health_checks
        if not (h.name == "*" and h.namespace == "*")
    )
