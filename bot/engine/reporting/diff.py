"""Object-level diff of two renders of one cluster, per tier, keyed the way Flux's inventory keys objects.

Pure functions over already-rendered `ClusterRender`s: no I/O, no cluster access.

Identity. kustomize-controller records every applied object in `status.inventory` as
`<namespace>_<name>_<group>_<kind>` and detects stale objects on that key only, version excluded
(flux-semantics §3, KS-INV). So an apiVersion bump within a group is a CHANGE, while a namespace or
group change is a different object: the old one is pruned and a new one created (REMOVED + ADDED).

Duplicates. Each tier is diffed on its own, because each Kustomization keeps its own inventory and
prunes from it independently: an identity applied by two tiers on one side is two entries, one per
tier. An entry that leaves tier A while the identity is still (or newly) applied by another tier on
head is MOVED, never REMOVED: A's prune is what endangers it. When several tiers could be the
destination, the pairing is deterministic: tiers that newly gained the identity first (each taken
once, in TierId order), then any of those again, then a tier that applied it on both sides. Inside
one tier a repeated identity (kustomize allows two apiVersions of one object) keeps the last in
build order, as the later apply is what ends up on the cluster.

Tiers that are not rendered (another source) or whose build failed on either side are not compared
(`ClusterDiff.uncompared`): a partial build would show spurious removals. A tier that failed on a side
after its build (an object kustomize-controller would reject, a SOPS Secret it cannot decrypt) still has
its objects there: the objects present on both sides are diffed (`ClusterDiff.partial`), so a change to
such a tier is shown, and nothing is reported added, removed or moved for it.

Secrets. Values never reach the output: `mask_secret` replaces every Secret data/stringData value
and every SOPS ciphertext with a constant, and key-level changes are computed on the raw values
internally and reported by key name only (`SecretKeyChanges`).
"""

from __future__ import annotations

import base64
import binascii
import difflib
import enum
import re
from dataclasses import dataclass
from typing import Any, Iterable, Literal, Mapping, overload

import yaml

from bot.engine.tiergraph.graph import TierGraph
from bot.engine.core.model import Finding, Manifest, ObjectRef, Severity, TierId, TierSpec, plural
from bot.engine.render.rendered import ClusterRender, RenderedTier

CHECK_PRUNE_TRANSIENT = "prune-transient"

SECRET_VALUE_MASK = "**masked**"
SOPS_VALUE_MASK = "ENC[**masked**]"
# SOPS writes every encrypted leaf as `ENC[AES256_GCM,data:…,iv:…,tag:…,type:…]` (getsops/sops aes cipher).
SOPS_VALUE = re.compile(r"ENC\[AES256_GCM,[^\]]*\]")

FLUX_GROUP = "kustomize.toolkit.fluxcd.io"
# Flux honours these on the live object when pruning (KS-CTRL/SSA-DEL; values compared case-insensitively).
PRUNE_EXCLUSIONS = ((f"{FLUX_GROUP}/prune", "disabled"), (f"{FLUX_GROUP}/reconcile", "disabled"), (f"{FLUX_GROUP}/ssa", "ignore"))

LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
_METADATA_NOISE = ("generation", "resourceVersion", "uid", "creationTimestamp", "managedFields", "selfLink")
# kustomize's own build annotations (origin, path/index, id, legacy config.kubernetes.io/* and kustomize.config.k8s.io/*).
_ANNOTATION_NOISE_PREFIXES = ("config.kubernetes.io/", "internal.config.kubernetes.io/", "kustomize.config.k8s.io/", "checksum/")
_LABEL_NOISE = ("helm.sh/chart",)


class ChangeKind(str, enum.Enum):
    """What happened to one inventory entry between base and head."""

    ADDED = "added"
    REMOVED = "removed"
    CHANGED = "changed"
    MOVED = "moved"


@dataclass(frozen=True)
class SecretKeyChanges:
    """Names (never values) of the Secret keys added, removed or changed; data and stringData merged."""

    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    changed: tuple[str, ...] = ()

    @property
    def empty(self) -> bool:
        return not (self.added or self.removed or self.changed)


@dataclass(frozen=True)
class ObjectChange:
    """One object's change; for MOVED, `tier` is the destination and `from_tier` the source."""

    kind: ChangeKind
    ref: ObjectRef  # head ref (base ref for REMOVED)
    tier: TierId  # head tier (base tier for REMOVED); for MOVED the destination
    from_tier: TierId | None  # MOVED only
    diff: str  # unified diff of the normalised, masked YAML (base → head); "" when none
    secret_keys: SecretKeyChanges | None  # Secrets only
    lines_changed: int
    fields: tuple[str, ...] = ()  # CHANGED: the names of the first leaf fields that differ (`image`, `ports`)

    def sort_key(self) -> tuple:
        return (self.ref.kind, self.ref.namespace, self.ref.name, self.ref.group, _KIND_ORDER[self.kind], str(self.from_tier or ""))


_KIND_ORDER = {ChangeKind.MOVED: 0, ChangeKind.REMOVED: 1, ChangeKind.CHANGED: 2, ChangeKind.ADDED: 3}


@dataclass(frozen=True)
class TierDiff:
    """The changes of one tier (moves are listed under their destination)."""

    tier: TierId
    changes: tuple[ObjectChange, ...]

    @property
    def size(self) -> int:
        """Lines changed; reports put the largest tier last."""
        return sum(c.lines_changed for c in self.changes)


@dataclass(frozen=True)
class ClusterDiff:
    """Every tier's changes for one cluster, smallest first."""

    cluster: str
    tiers: tuple[TierDiff, ...]  # only tiers with changes, by size ascending, ties by TierId
    added_tiers: tuple[TierId, ...] = ()
    removed_tiers: tuple[TierId, ...] = ()
    uncompared: tuple[TierId, ...] = ()  # not rendered or failed on a side: content not compared
    partial: tuple[TierId, ...] = ()  # failed on a side with its objects: only objects on both sides compared

    def changed_tiers(self) -> frozenset[TierId]:
        """Tiers whose build or existence changed, including the sources of moves."""
        out = {t.tier for t in self.tiers} | set(self.added_tiers) | set(self.removed_tiers)
        out |= {c.from_tier for c in self.moves if c.from_tier is not None}
        return frozenset(out)

    @property
    def moves(self) -> tuple[ObjectChange, ...]:
        return tuple(c for t in self.tiers for c in t.changes if c.kind is ChangeKind.MOVED)

    @property
    def empty(self) -> bool:
        return not (self.tiers or self.added_tiers or self.removed_tiers)


# -- normalising and masking ---------------------------------------------------------------------


def normalise(body: Mapping) -> dict:
    """Copy of `body` without server-set fields, status, kustomize/Helm build noise and empty label/annotation maps."""
    out = _plain(body)
    out.pop("status", None)
    meta = out.get("metadata")
    if isinstance(meta, dict):
        for key in _METADATA_NOISE:
            meta.pop(key, None)
        _clean_metadata(meta)
    # Helm stamps helm.sh/chart and checksum/* into pod templates too; they change on every chart bump.
    for template_meta in _template_metadata(out.get("spec")):
        template_meta.pop("creationTimestamp", None)
        _clean_metadata(template_meta)
    return out


def mask_secret(body: Mapping) -> dict:
    """Copy of `body` with Secret values, SOPS ciphertexts and the `sops:` block's mac/data keys replaced by constants."""
    # Constant masks only: a hash or length would let a reader confirm a guess or see a value change.
    out = _mask_sops(_plain(body))
    if _is_secret(out):
        for field in ("data", "stringData"):
            values = out.get(field)
            if isinstance(values, dict):
                out[field] = dict.fromkeys(values, SECRET_VALUE_MASK)
        annotations = (out.get("metadata") or {}).get("annotations")
        if isinstance(annotations, dict) and LAST_APPLIED in annotations:
            annotations[LAST_APPLIED] = SECRET_VALUE_MASK  # kubectl's copy of the whole object, values included
    sops = out.get("sops")
    if isinstance(sops, dict):
        out["sops"] = _mask_sops_block(sops)
    return out


def secret_key_changes(base: Mapping | None, head: Mapping | None) -> SecretKeyChanges:
    """Key names added/removed/changed between two Secret bodies (values compared here, never returned)."""
    old, new = _secret_values(base), _secret_values(head)
    return SecretKeyChanges(
        added=tuple(sorted(new.keys() - old.keys())),
        removed=tuple(sorted(old.keys() - new.keys())),
        changed=tuple(sorted(k for k in old.keys() & new.keys() if old[k] != new[k])),
    )


def render_yaml(body: Mapping) -> str:
    """The normalised, masked YAML the diffs are made of."""
    return yaml.safe_dump(mask_secret(normalise(body)), sort_keys=True, default_flow_style=False, allow_unicode=True, width=4096)


def unified_diff(base: Manifest | None, head: Manifest | None) -> str:
    """Unified diff (n=3) of the normalised, masked YAML; `/dev/null` stands for the missing side."""
    a = render_yaml(base.body).splitlines() if base else []
    b = render_yaml(head.body).splitlines() if head else []
    if a == b:
        return ""
    lines = difflib.unified_diff(
        a,
        b,
        fromfile=f"a/{base.ref}" if base else "/dev/null",
        tofile=f"b/{head.ref}" if head else "/dev/null",
        n=3,
        lineterm="",
    )
    return "\n".join(lines) + "\n"


# -- diffing ---------------------------------------------------------------------------------------


def diff_clusters(base: ClusterRender | None, head: ClusterRender) -> ClusterDiff:
    """Object-level diff per tier; moves between tiers are MOVED, keyed by Flux's inventory identity."""
    base_tiers: Mapping[TierId, RenderedTier] = base.tiers if base is not None else {}
    uncompared = sorted(
        {t for t, r in base_tiers.items() if not _comparable(r)} | {t for t, r in head.tiers.items() if not _comparable(r)}
    )
    partial = [t for t in uncompared if t in base_tiers and t in head.tiers and base_tiers[t].rendered and head.tiers[t].rendered]
    # A tier the review finished once for both sides (same build, same variables) shares its manifests, and
    # one finished under the same key (bot/engine/render/finish.py finish_key: its build's content and its
    # variables) has the same ones: nothing in it changed, and none of its objects can be the end of a move.
    # Judged by key first, so a side read back from the cache loads none of its unchanged tiers' objects.
    same = {
        t for t, r in head.tiers.items()
        if t in base_tiers and t not in uncompared
        and ((r.finish_key is not None and r.finish_key == base_tiers[t].finish_key) or (r.manifests and base_tiers[t].manifests is r.manifests))
    }
    skip = set(uncompared) | same
    old = _entries(base_tiers, skip)
    new = _entries(head.tiers, skip)

    changes: list[ObjectChange] = []
    for key in sorted(old.keys() & new.keys()):
        change = _object_change(ChangeKind.CHANGED, key[0], None, old[key], new[key])
        if change is not None:
            changes.append(change)

    # identity → the head tiers holding it, unchanged tiers included; built only when a removal needs it
    holders: dict[tuple, list[TierId]] = {}
    held = dict(new)

    def holders_of(identity: tuple) -> list[TierId]:
        if not holders:
            held.update(_entries({t: head.tiers[t] for t in same}, set()))
            for tier, kept in sorted(held):
                holders.setdefault(kept, []).append(tier)
        return holders.get(identity, [])

    gained: dict[tuple, list[TierId]] = {}
    for tier, identity in sorted(new.keys() - old.keys()):
        gained.setdefault(identity, []).append(tier)
    consumed: set[tuple[TierId, tuple]] = set()
    for source, identity in sorted(old.keys() - new.keys(), key=lambda k: (k[1], k[0])):
        candidates = gained.get(identity, [])
        fresh = [t for t in candidates if (t, identity) not in consumed]
        choices = fresh or candidates or holders_of(identity)
        destination = choices[0] if choices else None
        base_manifest = old[(source, identity)]
        if destination is None:
            changes.append(_object_change(ChangeKind.REMOVED, source, None, base_manifest, None))
            continue
        consumed.add((destination, identity))
        changes.append(_object_change(ChangeKind.MOVED, destination, source, base_manifest, held[(destination, identity)]))
    for key in sorted(new.keys() - old.keys()):
        if key not in consumed:
            changes.append(_object_change(ChangeKind.ADDED, key[0], None, None, new[key]))

    for tier in partial:
        old_objects, new_objects = _entries({tier: base_tiers[tier]}, set()), _entries({tier: head.tiers[tier]}, set())
        for key in sorted(old_objects.keys() & new_objects.keys()):
            change = _object_change(ChangeKind.CHANGED, tier, None, old_objects[key], new_objects[key])
            if change is not None:
                changes.append(change)

    by_tier: dict[TierId, list[ObjectChange]] = {}
    for change in changes:
        by_tier.setdefault(change.tier, []).append(change)
    tier_diffs = [TierDiff(t, tuple(sorted(cs, key=ObjectChange.sort_key))) for t, cs in by_tier.items()]
    tier_diffs.sort(key=lambda d: (d.size, d.tier))
    return ClusterDiff(
        cluster=head.cluster,
        tiers=tuple(tier_diffs),
        added_tiers=tuple(sorted(head.tiers.keys() - base_tiers.keys())),
        removed_tiers=tuple(sorted(base_tiers.keys() - head.tiers.keys())),
        uncompared=tuple(t for t in uncompared if t not in partial),
        partial=tuple(partial),
    )


def _comparable(tier: RenderedTier) -> bool:
    return tier.rendered and not tier.failed


def _entries(tiers: Mapping[TierId, RenderedTier], skip: set[TierId]) -> dict[tuple[TierId, tuple], Manifest]:
    """(tier, identity) → manifest; a repeated identity inside one tier keeps the last in build order."""
    out: dict[tuple[TierId, tuple], Manifest] = {}
    for tid, tier in tiers.items():
        if tid in skip:
            continue
        for manifest in tier.manifests:
            out[(tid, manifest.ref.identity)] = manifest
    return out


@overload
def _object_change(
    kind: Literal[ChangeKind.ADDED, ChangeKind.REMOVED, ChangeKind.MOVED], tier: TierId, from_tier: TierId | None,
    base: Manifest | None, head: Manifest | None,
) -> ObjectChange: ...
@overload
def _object_change(
    kind: ChangeKind, tier: TierId, from_tier: TierId | None, base: Manifest | None, head: Manifest | None
) -> ObjectChange | None: ...
def _object_change(
    kind: ChangeKind, tier: TierId, from_tier: TierId | None, base: Manifest | None, head: Manifest | None
) -> ObjectChange | None:
    """The change between two versions of one object; None for a CHANGED whose difference is only noise."""
    secret = (base is not None and _is_secret(base.body)) or (head is not None and _is_secret(head.body))
    keys = secret_key_changes(base.body if base else None, head.body if head else None) if secret else None
    if kind is ChangeKind.CHANGED:
        assert base is not None and head is not None
        # A tier the review renderers finished once for both sides shares its bodies: nothing changed.
        if base.body is head.body or base.body == head.body:
            return None
        # Compare unmasked (internally) so a Secret or SOPS value change is still a change.
        if normalise(base.body) == normalise(head.body):
            return None
    text = unified_diff(base, head)
    lines = sum(1 for line in text.splitlines() if line[:1] in "+-" and not line.startswith(("+++ ", "--- ")))
    if keys is not None:
        lines += 2 * len(keys.changed)  # a masked value change is the -/+ pair the diff cannot show
    ref = head.ref if head is not None else base.ref  # type: ignore[union-attr]
    fields = changed_fields(base.body, head.body) if kind is ChangeKind.CHANGED and base is not None and head is not None and not secret else ()
    return ObjectChange(kind, ref, tier, from_tier, text, keys, lines, fields)


def changed_fields(base: Mapping, head: Mapping, limit: int = 4) -> tuple[str, ...]:
    """The names of the first leaf fields that differ (`image`, `ports`), for a one-line summary of a change."""
    found: list[str] = []
    _differing_leaves(normalise(base), normalise(head), "", found, limit, 0)
    return tuple(found)


def _differing_leaves(a: Any, b: Any, name: str, found: list[str], limit: int, depth: int) -> None:
    # Iterative depth is bounded by the objects' own (parsed documents are depth-limited); 40 is plenty.
    if len(found) >= limit or a == b:
        return
    if isinstance(a, Mapping) and isinstance(b, Mapping) and depth < 40:
        for key in sorted(set(a) | set(b), key=str):
            _differing_leaves(a.get(key), b.get(key), str(key), found, limit, depth + 1)
        return
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b) and depth < 40:
        for x, y in zip(a, b):
            _differing_leaves(x, y, name, found, limit, depth + 1)
        return
    if name and name not in found:
        found.append(name)


# -- prune transient -------------------------------------------------------------------------------

# Kinds whose delete-then-recreate loses data or state, with why (flux-semantics §3 check 4, §7 CDI).
_ESCALATE: dict[tuple[str, str], str] = {
    ("", "PersistentVolumeClaim"): "a deleted PVC takes its volume (and, under a Delete reclaim policy, the data) with it",
    ("", "PersistentVolume"): "a deleted PV releases or deletes the backing storage",
    ("", "Namespace"): "deleting a Namespace deletes everything in it",
    ("apps", "StatefulSet"): "a deleted StatefulSet takes its pods down",
    ("apiextensions.k8s.io", "CustomResourceDefinition"): "deleting a CRD deletes every custom resource of that kind",
    ("cdi.kubevirt.io", "StorageProfile"): (
        "CDI re-creates a pruned StorageProfile from its StorageClass with an empty spec, so DataVolumes created in "
        "the window get CDI's inferred defaults (e.g. ReadWriteOnce where the profile set ReadWriteMany, leaving "
        "VM disks permanently non-live-migratable)"
    ),
    ("cdi.kubevirt.io", "CDI"): "deleting the CDI CR uninstalls CDI (per its uninstallStrategy)",
    ("kubevirt.io", "KubeVirt"): "deleting the KubeVirt CR uninstalls KubeVirt (per its uninstallStrategy)",
}


def escalation(manifest: Manifest) -> str | None:
    """Why deleting and recreating this object is worse than a blip, or None."""
    ref = manifest.ref
    reason = _ESCALATE.get((ref.group, ref.kind))
    if reason:
        return reason
    if ref.group.endswith("kubevirt.io"):
        return "KubeVirt/CDI objects lose their runtime state (VMs stop, DataVolumes re-import)"
    if ref.group == "" and ref.kind == "Service" and (manifest.body.get("spec") or {}).get("type") == "LoadBalancer":
        return "a LoadBalancer Service loses its external address"
    return None


def prune_exempt(manifest: Manifest) -> bool:
    """Whether Flux skips pruning this object (prune: disabled, reconcile: disabled or ssa: ignore, label or annotation)."""
    for source in (manifest.annotations, manifest.labels):
        for key, value in PRUNE_EXCLUSIONS:
            if str(source.get(key, "")).lower() == value:
                return True
    return False


def prune_transient_findings(diff: ClusterDiff, base: ClusterRender | None, head: ClusterRender) -> list[Finding]:
    """`prune-transient` warnings: objects moving out of a prune: true tier may be deleted before the new tier applies them."""
    if base is None:
        return []
    graph = TierGraph(r.spec for r in head.tiers.values())
    pairs: dict[tuple[TierId, TierId], list[ObjectChange]] = {}
    for change in diff.moves:
        assert change.from_tier is not None
        pairs.setdefault((change.from_tier, change.tier), []).append(change)
    findings = []
    for (source, destination), changes in sorted(pairs.items()):
        source_base = base.tiers.get(source)
        if source_base is None or not source_base.spec.prune:
            continue  # without prune the old tier only forgets the object (flux-semantics §3)
        # The live object carries the labels/annotations the source applied last, i.e. the base manifest's.
        at_risk = []
        for change in changes:
            old = _manifest(base, source, change.ref)
            new = _manifest(head, destination, change.ref)
            if old is not None and not prune_exempt(old) and new is not None:
                at_risk.append((change, old, new))
        if not at_risk:
            continue
        at_risk.sort(key=lambda item: item[0].sort_key())
        finding = _prune_finding(source_base.spec, head.tiers.get(source), head.tiers[destination].spec, at_risk, graph)
        if finding is not None:
            findings.append(finding)
    return findings


def _manifest(render: ClusterRender, tier: TierId, ref: ObjectRef) -> Manifest | None:
    rendered = render.tiers.get(tier)
    found = None
    for manifest in rendered.manifests if rendered else ():
        if manifest.ref.identity == ref.identity:
            found = manifest  # last wins, as in _entries
    return found


def _prune_finding(
    source: TierSpec,
    source_head: RenderedTier | None,
    destination: TierSpec,
    at_risk: list[tuple[ObjectChange, Manifest, Manifest]],
    graph: TierGraph,
) -> Finding | None:
    """One finding for every object moving from `source` to `destination`, or None for a safe hand-over."""
    a, b = source.id, destination.id
    same_source = source_head is not None and source_head.spec.source == destination.source
    a_after_b = source_head is not None and graph.depends_on(a, b)
    b_after_a = source_head is not None and graph.depends_on(b, a)
    if a_after_b and same_source and not b_after_a:
        # A dependsOn B on one source: A waits until B applied this revision (revision-gated, PR521), so B
        # relabels the objects first and A's prune skips them (label mismatch) — the documented safe hand-over.
        return None

    names = [str(change.ref) for change, _, _ in at_risk]
    shown = ", ".join(names[:8]) + (f" and {len(names) - 8} more" if len(names) > 8 else "")
    escalated: dict[str, list[str]] = {}
    for _, _, manifest in at_risk:
        why = escalation(manifest)
        if why:
            escalated.setdefault(why, []).append(str(manifest.ref))
    count = plural(len(names), "object")
    parts = []
    if escalated:
        # One sentence per reason, not per object: ten StorageProfiles share one explanation.
        parts.append("HIGH IMPACT: " + "; ".join(f"{', '.join(refs[:4])}{' …' if len(refs) > 4 else ''}: {why}" for why, refs in escalated.items()) + ".")
    parts.append(f"{count} move{'s' if len(names) == 1 else ''} from {a} (prune: true) to {b}: {shown}.")
    them = "them" if len(names) != 1 else "it"
    # flux-semantics §3: both Kustomizations pick up the revision on their own; the prune only skips objects
    # whose live owner labels already name another Kustomization.
    parts.append(
        f"{a} and {b} reconcile the new revision independently: unless {b} applies {them} first (taking over the "
        f"owner labels), {a} prunes {them} and {b} recreates {them} later, with a new UID and lost state"
        + ("" if escalated else "; a controller may recreate a pruned object with its own defaults in between")
        + "."
    )
    parts.append(_order_sentence(a, b, source, source_head, destination, same_source, a_after_b, b_after_a))
    if source_head is not None and not source_head.spec.prune:
        parts.append(
            f"Setting prune: false on {a} in the same change is not reliable: {a} may reconcile the new revision "
            "before its parent applies the new spec; merge prune: false first."
        )
    if any(prune_exempt(new) for _, _, new in at_risk):
        parts.append(
            "Adding kustomize.toolkit.fluxcd.io/prune: disabled in the same change does not protect them: the live "
            f"object carries the labels {a} applied last."
        )
    if source_head is not None:
        parts.append(
            f"Before merging, check that {a} is Ready on the target cluster "
            f"(`flux get kustomization {a.name} -n {a.namespace}`): if it is failing, whatever waits on it stays "
            "blocked and pruned objects stay missing (or at controller defaults) until it recovers."
        )
    parts.append(
        f"Safe procedure (Flux FAQ): merge prune: false on {a} first, move the objects, confirm {b} owns them "
        f"(`flux tree kustomization {b.name} -n {b.namespace}`), then restore prune: true; or annotate them "
        "kustomize.toolkit.fluxcd.io/prune: disabled before the move."
    )
    first_change, _, first_head = at_risk[0]
    return Finding(
        CHECK_PRUNE_TRANSIENT,
        Severity.WARNING,
        " ".join(parts),
        kustomization=a,
        object=first_change.ref,
        location=first_head.origin or destination.origin,
    )


def _order_sentence(
    a: TierId,
    b: TierId,
    source: TierSpec,
    source_head: RenderedTier | None,
    destination: TierSpec,
    same_source: bool,
    a_after_b: bool,
    b_after_a: bool,
) -> str:
    """What `dependsOn` says about who reconciles first (flux-semantics §1 dependsOn, §3 moving objects)."""
    if source_head is None:
        return (
            f"{a} itself is removed by this change: when it is deleted its finalizer prunes its whole inventory "
            f"(default deletionPolicy MirrorPrune), typically before {b} has applied them — the Flux FAQ's rename case."
        )
    if a_after_b and b_after_a:
        return f"{a} and {b} depend on each other (a cycle), so neither becomes Ready and the order is undefined."
    if destination.defined_in == a and not a_after_b:
        return (
            f"{a} applies the Kustomization {b} itself and prunes in the same reconcile, before {b} runs: moving "
            "objects down into a child Kustomization deletes and recreates them (kustomize-controller #338)."
        )
    if b_after_a and same_source:
        return (
            f"{b} dependsOn {a} and both use {destination.source}, so {a} applies (and prunes) the new revision first "
            "(revision-gated dependsOn): delete-then-recreate is the expected outcome, not just a risk; only "
            f"{a} dependsOn {b} gives a safe hand-over."
        )
    if b_after_a:
        return (
            f"{b} dependsOn {a}, but they use different sources ({destination.source} vs {source.source}), so the "
            f"dependency is not revision-gated: {a} may be Ready on the old revision and the order is undefined."
        )
    if a_after_b:
        return (
            f"{a} dependsOn {b}, but they use different sources ({source.source} vs {destination.source}), so the "
            "dependency is not revision-gated and does not order this hand-over."
        )
    return (
        f"{b} does not depend on {a} (nor {a} on {b}), so which one reconciles first is undefined; "
        f"{a} dependsOn {b} on the same source would make the hand-over safe."
    )


# -- helpers ---------------------------------------------------------------------------------------


def _plain(value: Any) -> Any:
    """Deep copy into plain dicts and lists."""
    # dict/list first: YAML gives only those, and typing.Mapping's isinstance is slow.
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _clean_metadata(meta: dict) -> None:
    annotations = meta.get("annotations")
    if isinstance(annotations, dict):
        for key in [k for k in annotations if str(k).startswith(_ANNOTATION_NOISE_PREFIXES) or k == LAST_APPLIED]:
            del annotations[key]
        if not annotations:
            del meta["annotations"]
    elif "annotations" in meta and not annotations:
        del meta["annotations"]
    labels = meta.get("labels")
    if isinstance(labels, dict):
        for key in _LABEL_NOISE:
            labels.pop(key, None)
        if not labels:
            del meta["labels"]
    elif "labels" in meta and not labels:
        del meta["labels"]


def _template_metadata(spec: Any) -> Iterable[dict]:
    """Pod and claim template metadata anywhere under `spec` (Deployment, CronJob jobTemplate, volumeClaimTemplates…)."""
    stack = [spec]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            for key, value in node.items():
                if key in ("template", "jobTemplate") and isinstance(value, dict) and isinstance(value.get("metadata"), dict):
                    yield value["metadata"]
                if key == "volumeClaimTemplates" and isinstance(value, list):
                    yield from (v["metadata"] for v in value if isinstance(v, dict) and isinstance(v.get("metadata"), dict))
                if key != "metadata":
                    stack.append(value)
        elif isinstance(node, list):
            stack.extend(node)


def _is_secret(body: Mapping) -> bool:
    api_version = body.get("apiVersion")
    return body.get("kind") == "Secret" and isinstance(api_version, str) and "/" not in api_version


def _mask_sops(value: Any) -> Any:
    if isinstance(value, str):
        return SOPS_VALUE.sub(SOPS_VALUE_MASK, value)
    if isinstance(value, dict):
        return {k: _mask_sops(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_mask_sops(v) for v in value]
    return value


def _mask_sops_block(value: Any) -> Any:
    """The `sops:` metadata: `mac` and every wrapped data key (`enc`) masked; recipients and dates kept."""
    if isinstance(value, dict):
        return {k: (SECRET_VALUE_MASK if k in ("mac", "enc") else _mask_sops_block(v)) for k, v in value.items()}
    if isinstance(value, list):
        return [_mask_sops_block(v) for v in value]
    return value


def _secret_values(body: Mapping | None) -> dict[str, bytes]:
    """The Secret's effective key → bytes, as the API server stores it (stringData overrides data)."""
    out: dict[str, bytes] = {}
    if body is None:
        return out
    for key, value in (body.get("data") or {}).items():
        text = "" if value is None else str(value)
        try:
            out[str(key)] = base64.b64decode(text, validate=True)
        except (binascii.Error, ValueError):
            out[str(key)] = text.encode()  # e.g. a SOPS ciphertext: compared as written
    for key, value in (body.get("stringData") or {}).items():
        out[str(key)] = ("" if value is None else str(value)).encode()
    return out
