"""duplicate-object: one object applied by two Kustomizations, which then fight over it."""

from __future__ import annotations

from typing import Iterator

from bot.engine.tiergraph.checks.context import CheckContext, check, name_list, plural
from bot.engine.render.facts import ObjectStub
from bot.engine.render.flux import KUSTOMIZATION_GROUP
from bot.engine.core.model import Finding, Severity, TierId


# Deleting one of these takes more with it than the next reconcile restores: a Namespace its contents,
# a CRD every object of its kind, a PVC or PV its data.
_CASCADING_KINDS = frozenset({"Namespace", "CustomResourceDefinition", "PersistentVolumeClaim", "PersistentVolume"})


@check("duplicate-object")
def duplicate_object(ctx: CheckContext) -> Iterator[Finding]:
    # Every apply is a server-side apply with ForceOwnership that stamps the applier's owner labels
    # (kustomize-controller KustomizationReconciler.apply, SetOwnerLabels): the object changes hands
    # on every reconcile, and a prune deletes it only while it carries the pruner's labels
    # (fluxcd/pkg ssa/manager_delete.go), so the one that stops applying it last-held deletes it
    # while the other still defines it.
    appliers: dict[tuple, list[tuple[TierId, ObjectStub]]] = {}
    for identity, twice in ctx.applied_twice():
        _, _, group, kind = identity
        if group == KUSTOMIZATION_GROUP and kind == "Kustomization":
            continue  # a Kustomization defined twice is reported by the render ("defined more than once")
        for tier_id, stub in twice:
            # The same path applied to another cluster (spec.kubeConfig) is another object. Two kubeConfigs
            # naming different Secrets count as different clusters (whether they are cannot be known).
            appliers.setdefault((ctx.render.tiers[tier_id].spec.kube_config, identity), []).append((tier_id, stub))
    groups: dict[tuple[TierId, ...], list[tuple[TierId, ObjectStub]]] = {}
    for applied in appliers.values():
        tiers = tuple(sorted({t for t, _ in applied}))
        if len(tiers) > 1:
            groups.setdefault(tiers, []).extend(applied)
    for tiers, found in sorted(groups.items()):
        first_tier = tiers[0]
        first = next(stub for t, stub in found if t == first_tier)
        refs = list(dict.fromkeys(str(stub.ref) for _, stub in found))
        pruners = [
            t for t in tiers
            if ctx.graph.specs[t].prune and any(tid == t and stub.ref not in ctx.facts[t].unpruned for tid, stub in found)
        ]
        what = f"{plural(len(refs), 'object')} ({name_list(refs, 3)})"
        it, changes = ("it", "it changes") if len(refs) == 1 else ("them", "they change")
        who = f"both {tiers[0]} and {tiers[1]}" if len(tiers) == 2 else f"{len(tiers)} Kustomizations ({name_list((str(t) for t in tiers), 3)})"
        others = "the other still defines" if len(tiers) == 2 else "the others still define"
        if pruners:
            cascades = any(stub.ref.kind in _CASCADING_KINDS for _, stub in found)
            severity = Severity.ERROR if cascades else Severity.WARNING
            consequence = (
                f"and when one that prunes ({name_list((str(t) for t in pruners), 3)}) stops applying {it} while holding "
                f"{it}, it deletes {it} although {others} {it}"
                + (" (with everything in it or of its kind, which no re-apply restores)" if cascades else " until the next reconcile re-creates it")
            )
        else:
            severity, consequence = Severity.WARNING, (
                f"though none of them prunes {it} (prune: false or kustomize.toolkit.fluxcd.io/prune: disabled)"
            )
        yield Finding(
            "duplicate-object",
            severity,
            f"{what} {'is' if len(refs) == 1 else 'are'} applied by {who}: each apply takes {it} over (server-side "
            f"apply with the applier's owner labels kustomize.toolkit.fluxcd.io/name|namespace), so {changes} hands "
            f"on every reconcile, {consequence}. Keep each object in one Kustomization",
            kustomization=first_tier,
            object=first.ref,
            location=ctx.locate(first),
        )
