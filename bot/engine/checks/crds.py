"""Is every object's API there when its tier applies? CRDs in git, charts, and CRDs made at run time.

kustomize-controller server-side dry-runs every object of an apply stage before writing any; a
kind with no CRD yet fails the stage, so the whole Kustomization fails and retries forever
(fluxcd/pkg ssa/manager_apply.go ApplyAllStaged). CRDs of the same build are fine: they are
applied and waited on in the first stage.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Iterator, Sequence

from bot.engine.checks.context import CheckContext, check, name_list, plural
from bot.engine.coldstart import duration
from bot.engine.facts import ObjectStub
from bot.engine.model import Finding, GroupKind, ObjectRef, Severity, TierId
from bot.engine.providers import Provider, ProviderKind


@check(
    ("second-order-crd", Severity.ERROR, "an object's CRD is created at run time by a controller reconciling a CR in the same tier, or in a tier this one does not depend on"),
    ("crd-not-ordered", Severity.ERROR, "an object's CRD (in git or from a chart) is applied by a tier this one does not depend on"),
    ("dependency-not-waited", Severity.WARNING, "the tier this one relies on for a CRD/CR has neither wait: true nor a healthChecks entry covering it"),
    ("unknown-kind", Severity.WARNING, "nobody known provides the kind"),
)
def api_availability(ctx: CheckContext) -> Iterator[Finding]:
    for tier_id in ctx.render.tiers:
        facts = ctx.facts[tier_id]
        for gk, objects in sorted(facts.kinds.items()):
            if gk in facts.own_crds:
                continue  # stage 1 of the same apply creates and waits for it
            providers = ctx.providers.resolve(gk)
            for finding in _judge(ctx, tier_id, gk, objects, providers):
                yield by_cold_start(ctx, finding, gk, providers)


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
    orphan_rules = [p for p in providers if p.kind == ProviderKind.RUNTIME and p.trigger_kind]
    if orphan_rules:
        rule = orphan_rules[0]
        yield finding(
            "unknown-kind",
            Severity.WARNING,
            f"{what}: the {gk} CRD is created at run time by {rule.description} when it reconciles a "
            f"{rule.trigger_kind}, and this cluster applies none",
        )
        return
    yield finding(
        "unknown-kind",
        Severity.WARNING,
        f"{what}: no CRD for {gk} is in git, no known chart or operator provides it (add it to "
        f"runtime_crds in .fluxwarden.yaml if a controller creates it)",
    )


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
        # README: a chart's CRD in a non-dependency tier is crd-not-ordered (second-order is for operators' CRs).
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
