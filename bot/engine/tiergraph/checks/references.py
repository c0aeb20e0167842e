"""missing-provider: an object names a cluster-scoped provider that git defines in a tier not applied before it."""

from __future__ import annotations

from collections import defaultdict
from typing import Iterator

from bot.engine.tiergraph.checks.context import CheckContext, check, name_list, plural
from bot.engine.tiergraph.coldstart import duration, namespace_kind
from bot.engine.core.model import Finding, Severity, TierId

# Namespaces every cluster has from the start (kube-apiserver creates them): git may define them (to
# label them), but nothing waits for that.
SYSTEM_NAMESPACES = frozenset({"default", "kube-system", "kube-public", "kube-node-lease"})


@check("missing-provider")
def missing_provider(ctx: CheckContext) -> Iterator[Finding]:
    defined: dict[tuple[str, str], set[TierId]] = defaultdict(set)
    for tier_id in ctx.render.tiers:
        for provider in ctx.facts[tier_id].provider_defs:
            defined[provider].add(tier_id)
    for tier_id in ctx.render.tiers:
        for (kind, name, how), objects in sorted(ctx.facts[tier_id].provider_uses.items()):
            # A Kustomization's own namespace exists before it reconciles (the object lives there), and
            # so does the one Flux runs in (the entry's).
            if kind == "Namespace" and name in (*SYSTEM_NAMESPACES, tier_id.namespace, ctx.render_entry.namespace):
                continue
            owners = defined.get((kind, name))
            # Not in git (made elsewhere), the same tier (staged apply), a dependency, or an ancestor:
            # the parent's apply writes it before the child Kustomization object exists (see `before`).
            if not owners or tier_id in owners or any(ctx.before(tier_id, o) for o in owners):
                continue
            owner_names = name_list(str(o) for o in owners)
            first = objects[0]
            severity, cold = _by_cold_start(ctx, tier_id, owners, kind, name)
            yield Finding(
                "missing-provider",
                severity,
                f"{plural(len(objects), 'object')} ({name_list(str(m.ref) for m in objects)}) {'uses' if len(objects) == 1 else 'use'} {kind} {name} "
                f"({how}), which {owner_names} defines; {tier_id} does not depend on it, so on a cold cluster {'it' if len(objects) == 1 else 'they'} can "
                f"be applied before it exists. " + ctx.add_dependency(tier_id, owners) + cold,
                kustomization=tier_id,
                object=first.ref,
                location=ctx.locate(first),
            )


def _by_cold_start(ctx: CheckContext, tier: TierId, owners: set[TierId], kind: str, name: str) -> tuple[Severity, str]:
    """How much a provider that may arrive after its user matters on a cold start.

    A missing Namespace fails the dry-run of the objects in it, hence the tier's apply: an error when
    the tier never becomes Ready for it, a warning with the delay when it retries. Any other provider
    (a PVC's StorageClass, a Certificate's ClusterIssuer, an Ingress's IngressClass) is accepted while it
    does not exist yet, and its controller acts once it does (a PVC stays Pending, then binds): a delay,
    so info, unless the provider is never applied or waits for this very tier (whose workloads may wait
    for it: then neither becomes Ready), which stay warnings. Info too when only the bootstrap orders them.
    """
    simulation = ctx.simulation
    outcome = ctx.cold_start.tiers.get(tier)
    namespace = name if kind == "Namespace" else None
    if namespace is not None and outcome is not None:
        gk = namespace_kind(namespace)
        entry = simulation.bootstrap_entry(gk)
        if entry is not None:
            return Severity.INFO, f". Fine on a cold start only because of the bootstrap: {entry.description}" + (f" ({entry.source})" if entry.source else "")
        if outcome.ready_round is None and outcome.reason == "apply" and gk in outcome.failed_on:
            return Severity.ERROR, f". Cold start: {tier.name} never becomes Ready: {outcome.blocked_by}"
        if outcome.ready_round is not None and gk in outcome.failed_on:
            return Severity.WARNING, (
                f". Cold start: {tier.name} is Ready in round {outcome.ready_round} after "
                f"{plural(outcome.failed_attempts, 'failed attempt')}, up to {duration(outcome.max_delay_seconds)} late"
            )
    if any(simulation.ordered_by_bootstrap(tier, o) for o in owners):
        entry = simulation.tier_order_entry()
        return Severity.INFO, f". Fine on a cold start only because of the bootstrap: {entry.description}" + (f" ({entry.source})" if entry.source else "")
    outcomes = ctx.cold_start.tiers
    stuck = [o for o in sorted(owners) if o in outcomes and outcomes[o].ready_round is None and outcomes[o].reason != "suspended"]
    if stuck and len(stuck) == len(owners):
        return Severity.WARNING, f". Cold start: it is never applied ({outcomes[stuck[0]].blocked_by})"
    if namespace is not None:
        return Severity.WARNING, ""
    waiting = sorted(o for o in owners if ctx.graph.depends_on(o, tier))
    if waiting:
        return Severity.WARNING, (
            f". {name_list(str(o) for o in waiting)} waits for {tier} itself: if {tier} waits for what uses the {kind}, neither becomes Ready"
        )
    return Severity.INFO, f". Kubernetes accepts the object before the {kind} exists and its controller acts once it does: a delay on a cold start, not a failure"
