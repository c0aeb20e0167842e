"""Drift: where a live cluster differs from the render of the default branch (pure: no I/O).

`build_drift_report` compares one cluster's render (bot/pipeline/renderer.py) with what was read from the
cluster (bot/engine/livestate/live.py `LiveState` plus `LiveBody` of every object git defines) and returns a typed
`DriftReport`. What counts as drift (flux-semantics §3, §5, §7, §8):

* tiers: missing on the cluster, suspended, not Ready, stuck (`DependencyNotReady`, or still
  `Progressing`, for longer than `DriftOptions.stuck_after`, timed from the Ready condition's
  lastTransitionTime), or behind (Ready, but `lastAppliedRevision` is not the source's current
  artifact revision, `behind_after` after the source got it);
* inventory: objects git puts in a tier that its `status.inventory` does not list (not applied), and
  inventory entries git no longer defines there (pruned on the next apply, or orphaned);
* objects: absent on the cluster; live owner labels (`kustomize.toolkit.fluxcd.io/name`/`namespace`)
  naming another tier, or none; fields git sets that differ live — compared recursively over the keys
  git sets only, so defaults a controller adds are not drift, but a StorageProfile a controller
  recreated with `spec: {}` is (the seed's prune transient);
* CRDs: kinds the graph uses that no CRD on the cluster serves, with the tier that would create them.

A Secret is compared by key presence only; its values are never read into a report (and `LiveBody`
never holds them). Items carry a stable `key`, so a caller can remember when each was first seen
(handlers/drift.py keeps that in the issue), and `since` when the cluster itself says (a condition's
lastTransitionTime, an object's creationTimestamp, a source's artifact time).

Formats: `format_text`, `report_to_json`, `format_markdown` (the issue body: hidden marker first line).
"""

from __future__ import annotations

import enum
import json
import re
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone
from decimal import Decimal, InvalidOperation
from typing import Any, Iterable, Mapping, Sequence

from bot.engine.core import markdown as md
from bot.engine.livestate.live import KS_LABEL_NAME, KS_LABEL_NAMESPACE, LiveBody, LiveKustomization, LiveState, inventory_id
from bot.engine.core.model import GroupKind, Manifest, ObjectRef, TierId, plural
from bot.engine.tiergraph.providers import Provider, ProviderIndex, ProviderKind
from bot.engine.render.rendered import ClusterRender, RenderedTier

MARKER = "fluxwarden:drift:{cluster}"
FLUX_KUSTOMIZATION = GroupKind("kustomize.toolkit.fluxcd.io", "Kustomization")
CRD_KIND = GroupKind("apiextensions.k8s.io", "CustomResourceDefinition")
_FLUX_PREFIX = "kustomize.toolkit.fluxcd.io/"
_SKIPPED_META_PREFIXES = (_FLUX_PREFIX, "config.kubernetes.io/", "internal.config.kubernetes.io/", "kubectl.kubernetes.io/")
_NOT_COMPARED_TOP = frozenset({"apiVersion", "kind", "metadata", "status", "sops"})
MAX_FIELDS = 6  # field paths named per object
MAX_USERS = 4  # objects named per missing CRD
MAX_BODY = 60000  # a margin under GitHub's cap on an issue body (github_limits.MAX_COMMENT)


class DriftKind(str, enum.Enum):
    """What kind of difference an item is (the order is the report's)."""

    TIER_MISSING = "tier-missing"
    TIER_SUSPENDED = "tier-suspended"
    TIER_NOT_READY = "tier-not-ready"
    TIER_STUCK = "tier-stuck"
    TIER_BEHIND = "tier-behind"
    CRD_MISSING = "crd-missing"
    OBJECT_MISSING = "object-missing"
    NOT_IN_INVENTORY = "not-in-inventory"
    STALE_INVENTORY = "stale-inventory"
    WRONG_OWNER = "wrong-owner"
    FIELDS_DIFFER = "fields-differ"

    @property
    def rank(self) -> int:
        return list(DriftKind).index(self)

    @property
    def section(self) -> str:
        if self.value.startswith("tier-"):
            return "Tiers"
        if self is DriftKind.CRD_MISSING:
            return "CRDs"
        return "Objects"

    @property
    def label(self) -> str:
        return _LABELS[self]


_LABELS = {
    DriftKind.TIER_MISSING: "missing",
    DriftKind.TIER_SUSPENDED: "suspended",
    DriftKind.TIER_NOT_READY: "not ready",
    DriftKind.TIER_STUCK: "stuck",
    DriftKind.TIER_BEHIND: "behind",
    DriftKind.CRD_MISSING: "CRD missing",
    DriftKind.OBJECT_MISSING: "absent",
    DriftKind.NOT_IN_INVENTORY: "not applied",
    DriftKind.STALE_INVENTORY: "no longer in git",
    DriftKind.WRONG_OWNER: "owner",
    DriftKind.FIELDS_DIFFER: "fields differ",
}


@dataclass(frozen=True)
class DriftOptions:
    """Thresholds: how long a tier may wait on a dependency (or reconcile), and lag behind its source."""

    stuck_after: timedelta = timedelta(minutes=30)
    behind_after: timedelta = timedelta(minutes=15)


@dataclass(frozen=True)
class DriftItem:
    """One difference between git and the cluster."""

    kind: DriftKind
    key: str  # stable across runs: the same difference has the same key
    message: str  # one line, plain text (commands in backticks)
    tier: TierId | None = None  # the tier concerned (for a missing CRD: the tier that would create it)
    object: ObjectRef | None = None
    since: datetime | None = None  # when it started, when the cluster says so
    details: tuple[str, ...] = ()

    def sort_key(self) -> tuple:
        return (self.kind.rank, str(self.tier or ""), str(self.object or ""), self.key)

    def to_json(self, first_seen: datetime | None = None) -> dict[str, Any]:
        return {
            "kind": self.kind.value,
            "key": self.key,
            "tier": str(self.tier) if self.tier else None,
            "object": self.object.to_json() if self.object else None,
            "since": _iso(self.since) if self.since else None,
            "first_seen": _iso(first_seen) if first_seen else None,
            "message": self.message,
            "details": list(self.details),
        }


@dataclass(frozen=True)
class DriftReport:
    """Everything found on one cluster at `checked_at`; `error` when the cluster could not be read at all."""

    cluster: str
    checked_at: datetime
    where: str = ""
    branch: str | None = None
    revision: str | None = None  # the default branch commit rendered
    items: tuple[DriftItem, ...] = ()
    notes: tuple[str, ...] = ()  # what could not be compared, and why
    error: str | None = None

    @classmethod
    def failed(cls, cluster: str, error: str, checked_at: datetime, *, where: str = "", branch: str | None = None, revision: str | None = None) -> "DriftReport":
        return cls(cluster, checked_at, where, branch, revision, error=error)

    @property
    def clean(self) -> bool:
        return self.error is None and not self.items

    @property
    def marker(self) -> str:
        return MARKER.format(cluster=md.comment(self.cluster))

    def keys(self) -> list[str]:
        return [i.key for i in self.items]


# --------------------------------------------------------------------------------------------- times


def parse_time(text: str | None) -> datetime | None:
    """An RFC 3339 timestamp (as Kubernetes writes them) as an aware UTC datetime; None when absent or bad."""
    if not text:
        return None
    try:
        value = datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    except ValueError:
        return None
    return (value if value.tzinfo else value.replace(tzinfo=timezone.utc)).astimezone(timezone.utc)


def _iso(value: datetime) -> str:
    return value.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def format_time(value: datetime) -> str:
    return value.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def format_duration(delta: timedelta) -> str:
    """`12h 36m`, `3d 4h`, `5m`, `<1m`."""
    minutes = int(delta.total_seconds() // 60)
    if minutes < 1:
        return "<1m"
    days, rest = divmod(minutes, 24 * 60)
    hours, mins = divmod(rest, 60)
    if days:
        return f"{days}d {hours}h"
    if hours:
        return f"{hours}h {mins}m"
    return f"{mins}m"


def _short_rev(revision: str) -> str:
    """`main@sha1:0123456789ab` for a long revision; anything else as is."""
    match = re.match(r"^(.*?)([0-9a-f]{40}|[0-9a-f]{64})$", revision)
    return f"{match.group(1)}{match.group(2)[:12]}" if match else revision


def _one_line(text: str, limit: int = 240) -> str:
    flat = " ".join(str(text).split()).replace("`", "'")
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


# --------------------------------------------------------------------------------------------- what to read


def _disabled(*sources: Mapping[str, Any] | None) -> bool:
    """Flux applies nothing of an object marked `reconcile: disabled` or `ssa: ignore` (manifest or live)."""
    for meta in sources:
        if not meta:
            continue
        for bag in (meta.get("labels") or {}, meta.get("annotations") or {}):
            if str(bag.get(_FLUX_PREFIX + "reconcile", "")).lower() == "disabled" or str(bag.get(_FLUX_PREFIX + "ssa", "")).lower() == "ignore":
                return True
    return False


def _create_only(meta: Mapping[str, Any] | None) -> bool:
    """`ssa: IfNotPresent`: Flux creates the object and never updates it, so its live fields are not git's to judge."""
    annotations = (meta or {}).get("annotations") or {}
    return str(annotations.get(_FLUX_PREFIX + "ssa", "")).lower() == "ifnotpresent"


def _meta(body: Mapping[str, Any] | None) -> Mapping[str, Any]:
    meta = (body or {}).get("metadata") if body else None
    return meta if isinstance(meta, Mapping) else {}


def objects_to_read(render: ClusterRender, state: LiveState) -> list[ObjectRef]:
    """Every object of a rendered tier that exists on the cluster (one read each), in render order."""
    seen: dict[tuple[str, str, str, str], ObjectRef] = {}
    for tid, tier in render.tiers.items():
        if not tier.rendered or tid not in state.kustomizations:
            continue
        for manifest in tier.manifests:
            if not _disabled(_meta(manifest.body)):
                seen.setdefault(manifest.ref.identity, manifest.ref)
    return list(seen.values())


# --------------------------------------------------------------------------------------------- the comparison


def build_drift_report(
    render: ClusterRender,
    providers: ProviderIndex,
    state: LiveState,
    objects: Iterable[LiveBody],
    *,
    now: datetime,
    options: DriftOptions = DriftOptions(),
    branch: str | None = None,
    revision: str | None = None,
) -> DriftReport:
    """Compare the render with the cluster (see the module docstring); `now` is when the cluster was read."""
    if state.error is not None:
        return DriftReport.failed(render.cluster, f"could not read {state.label}: {state.error}", now, where=state.where, branch=branch, revision=revision)
    bodies = {b.ref.identity: b for b in objects}
    builder = _Builder(render, providers, state, bodies, now, options)
    builder.run()
    items = tuple(sorted({i.key: i for i in builder.items}.values(), key=DriftItem.sort_key))
    return DriftReport(render.cluster, now, state.where, branch, revision, items, tuple(builder.notes))


class _Builder:
    def __init__(self, render: ClusterRender, providers: ProviderIndex, state: LiveState, bodies: Mapping[tuple, LiveBody], now: datetime, options: DriftOptions) -> None:
        self.render, self.providers, self.state, self.bodies, self.now, self.options = render, providers, state, bodies, now, options
        self.items: list[DriftItem] = []
        self.notes: list[str] = []
        self.tier_ids = set(render.tiers)
        self.placed: dict[tuple[str, str, str, str], tuple[TierId, ObjectRef]] = {}  # identity -> (the tier git puts it in, its ref)
        for tid, tier in render.tiers.items():
            for manifest in tier.manifests:
                self.placed.setdefault(manifest.ref.identity, (tid, manifest.ref))
        self.unread: dict[str, list[str]] = {}
        self.waiting: set[TierId] = set()  # tiers stuck on a dependency: they have not tried to apply
        self.pending: dict[TierId, list[ObjectRef]] = {}  # their objects not applied (listed on the tier item)

    def add(self, kind: DriftKind, key: str, message: str, **kw: Any) -> None:
        self.items.append(DriftItem(kind, f"{kind.value}:{key}", message, **kw))

    def run(self) -> None:
        for tid, tier in self.render.tiers.items():
            live = self.state.kustomizations.get(tid)
            if live is None:
                self.tier_missing(tier)
                continue
            self.tier_state(tier, live)
            if not tier.rendered:
                why = "its build failed" if tier.failed else "another source, or unsafe input"
                self.notes.append(f"{tid} was not rendered ({why}): its objects and inventory were not compared")
                continue
            self.inventory(tier, live)
            for manifest in tier.manifests:
                self.object(tid, tier, manifest, live)
            self.fold_pending(tid)
        self.crds()
        if self.state.source_errors:
            for ref, error in sorted(self.state.source_errors.items(), key=lambda kv: str(kv[0])):
                self.notes.append(f"source {ref} could not be read ({_one_line(error, 160)}): tiers using it were not checked for lag")
        groups: dict[str, list[tuple[str, str]]] = {}
        for error, names in self.unread.items():
            groups.setdefault(_error_class(error), []).extend((name, error) for name in names)
        for cls, found in sorted(groups.items()):
            names = [n for n, _ in found]
            shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
            self.notes.append(f"{plural(len(names), 'object')} could not be read ({cls}; e.g. {_one_line(found[0][1], 200)}): {shown}")

    # -- tiers ----------------------------------------------------------------------------------

    def tier_missing(self, tier: RenderedTier) -> None:
        spec = tier.spec
        where = f"`Kustomization {spec.id.name}` in {spec.defined_in}" if spec.defined_in else "the cluster's entry point"
        count = f"; none of its {plural(len(tier.manifests), 'object')} {'is' if len(tier.manifests) == 1 else 'are'} applied through it" if tier.manifests else ""
        self.add(
            DriftKind.TIER_MISSING, str(spec.id),
            f"git defines it ({where}), but the cluster has no such Kustomization{count}. "
            f"`flux get ks {spec.id.name} -n {spec.id.namespace}` shows it not found",
            tier=spec.id,
        )

    def tier_state(self, tier: RenderedTier, live: LiveKustomization) -> None:
        tid = tier.spec.id
        if live.suspend:
            self.add(DriftKind.TIER_SUSPENDED, str(tid), f"suspended: Flux applies and prunes nothing of it until `flux resume ks {tid.name} -n {tid.namespace}`", tier=tid)
        behind = self._behind(live)
        lag = (f"it has applied {_short_rev(live.last_applied_revision) if live.last_applied_revision else 'no revision'}; "
               f"its source serves {_short_rev(behind[0])}",) if behind else ()
        ready = live.ready
        if ready is None:
            self.add(DriftKind.TIER_NOT_READY, str(tid), "never reconciled: it has no Ready condition (is kustomize-controller running?)", tier=tid, details=lag)
            return
        since = parse_time(ready.last_transition_time)
        age = f" for {format_duration(self.now - since)}" if since else ""
        what = f"{ready.reason}: {_one_line(ready.message)}" if ready.message else ready.reason or "no reason given"
        if ready.status == "True":
            if behind is not None:
                revision, arrived = behind
                if arrived is not None and self.now - arrived < self.options.behind_after:
                    return  # the source got it moments ago: Flux is on its way
                applied = _short_rev(live.last_applied_revision) if live.last_applied_revision else "no revision"
                self.add(
                    DriftKind.TIER_BEHIND, str(tid),
                    f"Ready, but it has applied {applied} while its source {live.source} serves {_short_rev(revision)}"
                    + (f" (since {format_time(arrived)})" if arrived else ""),
                    tier=tid, since=arrived,
                )
            return
        long_enough = since is None or self.now - since >= self.options.stuck_after
        if ready.reason == "DependencyNotReady" or (ready.status == "Unknown" and not long_enough):
            self.waiting.add(tid)  # it has not tried to apply yet (or is applying now): its absent objects are not items
        if ready.reason == "DependencyNotReady":
            if long_enough:
                self.add(DriftKind.TIER_STUCK, str(tid), f"stuck waiting on a dependency{age} ({what}); Flux applies nothing of it meanwhile", tier=tid, since=since, details=lag)
            return
        if ready.status == "Unknown" and not long_enough:
            return  # a reconcile in progress
        stalled = live.condition("Stalled")
        stall = " It is stalled: Flux will not retry until its spec changes." if stalled is not None and stalled.status == "True" else ""
        state = "still reconciling" if ready.status == "Unknown" else "not Ready"
        self.add(DriftKind.TIER_NOT_READY, str(tid), f"{state}{age}: Ready={ready.status} ({what}).{stall}", tier=tid, since=since, details=lag)

    def _behind(self, live: LiveKustomization) -> tuple[str, datetime | None] | None:
        """(the source's revision, when it arrived) when the tier has not applied it."""
        if live.source is None:
            return None
        source = self.state.sources.get(live.source)
        if source is None or source.revision is None or source.revision == live.last_applied_revision:
            return None
        return source.revision, parse_time(source.updated)

    def fold_pending(self, tid: TierId) -> None:
        """A tier stuck on a dependency lists the objects it has not applied on its own item."""
        refs = self.pending.get(tid)
        if not refs:
            return
        shown = ", ".join(str(r) for r in refs[:8]) + (f" and {len(refs) - 8} more" if len(refs) > 8 else "")
        line = f"{plural(len(refs), 'object')} git puts here {'is' if len(refs) == 1 else 'are'} not applied yet: {shown}"
        self.items = [replace(i, details=(*i.details, line)) if i.kind is DriftKind.TIER_STUCK and i.tier == tid else i for i in self.items]

    # -- inventory ------------------------------------------------------------------------------

    def inventory(self, tier: RenderedTier, live: LiveKustomization) -> None:
        """Entries git no longer defines in the tier (those git defines but the inventory lacks: `object`)."""
        tid = tier.spec.id
        git_ids = {inventory_id(m.ref) for m in tier.manifests if not _disabled(_meta(m.body))}
        for entry in sorted(live.inventory - git_ids):
            ref = _ref_of_entry(entry)
            placed = self.placed.get(ref.identity) if ref else None
            elsewhere = placed[0] if placed else None
            if placed is not None:
                ref = placed[1]
            if elsewhere is not None and elsewhere != tid:
                fate = f"git now puts it in {elsewhere}"
            elif tier.spec.prune:
                fate = f"git no longer defines it; {tid.name} has prune: true, so Flux deletes it on its next successful apply"
            else:
                fate = f"git no longer defines it; {tid.name} has prune: false, so it stays on the cluster, orphaned"
            self.add(
                DriftKind.STALE_INVENTORY, f"{tid}:{entry}",
                f"{tid}'s status.inventory lists {entry}, but {fate}",
                tier=tid, object=ref,
            )

    # -- objects --------------------------------------------------------------------------------

    def object(self, tid: TierId, tier: RenderedTier, manifest: Manifest, live_tier: LiveKustomization) -> None:
        ref = manifest.ref
        git_meta = _meta(manifest.body)
        if _disabled(git_meta):
            return
        entry = inventory_id(ref)
        listed = entry in live_tier.inventory
        read = self.bodies.get(ref.identity)
        if tid in self.waiting and not listed and (read is None or read.error is not None or read.body is None):
            self.pending.setdefault(tid, []).append(ref)  # a consequence of the wait, not drift of its own
            return
        if read is None or read.error is not None:
            self.unread.setdefault(read.error if read is not None and read.error else "not read", []).append(str(ref))
        if (read is None or read.error is not None or read.body is not None) and not listed:
            self.add(
                DriftKind.NOT_IN_INVENTORY, f"{tid}:{entry}",
                f"git puts it in {tid}, whose status.inventory does not list it ({entry}): {tid.name} has not applied it",
                tier=tid, object=ref,
            )
        if read is None or read.error is not None:
            return
        if read.body is None:
            if ref.group_kind == FLUX_KUSTOMIZATION and TierId(ref.namespace, ref.name) in self.tier_ids:
                return  # reported as a missing tier
            served = "" if read.kind_served else f"; the cluster does not serve {ref.api_version} {ref.kind}"
            how = (f"{tid.name}'s status.inventory still lists it: it was deleted behind Flux's back" if listed
                   else f"{tid.name} has not applied it (its status.inventory does not list it)")
            self.add(
                DriftKind.OBJECT_MISSING, f"{tid}:{entry}",
                f"git puts it in {tid}, but it is not on the cluster: {how}{served}",
                tier=tid, object=ref,
            )
            return
        live_meta = _meta(read.body)
        if _disabled(live_meta):
            return
        labels = live_meta.get("labels") or {}
        owner = TierId(str(labels.get(KS_LABEL_NAMESPACE, "")), str(labels[KS_LABEL_NAME])) if labels.get(KS_LABEL_NAME) else None
        created = parse_time(live_meta.get("creationTimestamp"))
        if owner != tid:
            if owner is None:
                message = (f"git puts it in {tid}, but the live object carries no Flux ownership labels ({KS_LABEL_NAME}/namespace): "
                           f"Flux did not create it — a controller or a person did" + (f", at {format_time(created)}" if created else ""))
                since = created
            else:
                message = (f"git puts it in {tid}, but the live object carries {owner}'s ownership labels: {owner.name} applied it last, "
                           f"and whichever Kustomization holds the labels may prune it")
                since = None
            self.add(DriftKind.WRONG_OWNER, f"{tid}:{entry}", message, tier=tid, object=ref, since=since)
        if _create_only(git_meta) or _create_only(live_meta):
            return
        if _undefined_in(tier, manifest):
            return  # it uses a variable the render could not know (substituteFrom a cluster-only source)
        diffs = compare_fields(manifest.body, read.body)
        if not diffs:
            return
        unset = all(d.live is None for d in diffs)
        shown = [d.describe(secret=_is_secret(ref)) for d in diffs[:MAX_FIELDS]]
        more = f" and {len(diffs) - MAX_FIELDS} more" if len(diffs) > MAX_FIELDS else ""
        paths = ", ".join(d.path for d in diffs[:MAX_FIELDS]) + more
        if unset and owner is None:
            message = (f"recreated with defaults: git sets {paths}, which the live object lacks, and it carries no Flux labels — "
                       f"a controller recreated it" + (f" at {format_time(created)}" if created else "")
                       + f"; Flux restores git's fields only when {tid.name} applies again")
            since = created
        elif unset:
            message = f"git sets {paths}, which the live object lacks"
            since = None
        else:
            message = f"git sets {paths} differently from the live object"
            since = None
        self.add(DriftKind.FIELDS_DIFFER, f"{tid}:{entry}", message, tier=tid, object=ref, since=since, details=tuple(shown))

    # -- CRDs -----------------------------------------------------------------------------------

    def crds(self) -> None:
        if self.state.crd_error is not None:
            self.notes.append(f"the CRDs could not be listed ({_one_line(self.state.crd_error, 160)}): missing CRDs were not checked")
            return
        live = {crd.group_kind for crd in self.state.crds}
        git_crds = set()
        users: dict[GroupKind, list[tuple[TierId, ObjectRef]]] = {}
        for tid, tier in self.render.tiers.items():
            for manifest in tier.manifests:
                gk = manifest.ref.group_kind
                users.setdefault(gk, []).append((tid, manifest.ref))
                if gk == CRD_KIND:
                    git_crds.add(manifest.ref.name)
        knowledge = self.providers.knowledge
        served = {b.ref.group_kind for b in self.bodies.values() if b.kind_served and b.error is None}
        for gk, used in sorted(users.items()):
            if gk in live or knowledge.is_builtin(gk) or knowledge.is_preinstalled(gk) or knowledge.is_builtin_group(gk.group):
                continue
            if gk in served:
                continue  # served without a CRD (an aggregated API)
            found = [p for p in self.providers.resolve(gk) if p.kind != ProviderKind.LIVE]
            maker = next((p for p in found if p.tier is not None), None)
            tiers = sorted({t for t, _ in used}, key=str)
            names = ", ".join(str(r) for _, r in used[:MAX_USERS]) + (f" and {len(used) - MAX_USERS} more" if len(used) > MAX_USERS else "")
            needed = f"{', '.join(t.name for t in tiers)} appl{'y' if len(tiers) > 1 else 'ies'} {names}"
            self.add(
                DriftKind.CRD_MISSING, f"{gk.group}/{gk.kind}",
                f"no CRD on the cluster serves {gk}; {needed}. " + _would_create(gk, maker, found),
                tier=maker.tier if maker else None,
                details=tuple(_provider_line(p) for p in found),
            )


def _would_create(gk: GroupKind, maker: Provider | None, found: Sequence[Provider]) -> str:
    if maker is None:
        if found:
            return f"It would be created by {found[0].description}, but no tier of this cluster applies what triggers it"
        return "Nothing git applies to this cluster provides it"
    via = f"{maker.via.kind} {maker.via.name}" if maker.via else "it"
    if maker.kind == ProviderKind.CRD:
        return f"Tier {maker.tier} would create it: it applies {maker.description}"
    if maker.kind == ProviderKind.CHART:
        return f"Tier {maker.tier} would create it: helm-controller installs it with {maker.description}"
    return f"Tier {maker.tier} would create it: it applies {via}, and {maker.description.split(',')[0]} creates the CRD when it reconciles that"


def _provider_line(p: Provider) -> str:
    return f"{p.kind.value}: {p.description}" + (f" (tier {p.tier})" if p.tier else "")


def _ref_of_entry(entry: str) -> ObjectRef | None:
    """An inventory id `<namespace>_<name>_<group>_<kind>` as an ObjectRef (apiVersion: group only)."""
    parts = entry.split("_")
    if len(parts) != 4:
        return None
    namespace, name, group, kind = parts
    return ObjectRef(f"{group}/" if group else "v1", kind, namespace, name)  # the inventory id has no version


_ERROR_CLASSES = (
    (re.compile(r"403 Forbidden"), "403 Forbidden: extend the read-only ClusterRole (deploy/rbac.yaml)"),
    (re.compile(r"401 Unauthorized"), "401 Unauthorized"),
    (re.compile(r"did not answer within"), "timed out"),
    (re.compile(r"cannot reach the API server"), "unreachable"),
    (re.compile(r"HTTP (\d{3})"), "HTTP {0}"),
)


def _error_class(error: str) -> str:
    """What kind of failure a read error is, so that one note covers every object it hit."""
    for pattern, label in _ERROR_CLASSES:
        match = pattern.search(error)
        if match:
            return label.format(*match.groups())
    return "not read" if error == "not read" else "error"


def _is_secret(ref: ObjectRef) -> bool:
    return ref.kind == "Secret" and ref.group == ""


def _undefined_in(tier: RenderedTier, manifest: Manifest) -> bool:
    if not tier.variables_open:
        return False
    return any(m.ref == manifest.ref for used in tier.undefined.values() for m in used)


# --------------------------------------------------------------------------------------------- fields


@dataclass(frozen=True)
class FieldDiff:
    """A field git sets whose live value differs (`live` None: the live object lacks it)."""

    path: str
    git: Any
    live: Any

    def describe(self, *, secret: bool = False) -> str:
        if secret:
            return f"{self.path}: git sets this key; the live Secret lacks it"
        if self.live is None:
            return f"{self.path}: git sets {_value(self.git)}; unset live"
        return f"{self.path}: git sets {_value(self.git)}; live has {_value(self.live)}"


def _value(value: Any, limit: int = 60) -> str:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    return "`" + (text if len(text) <= limit else text[: limit - 1] + "…").replace("`", "'") + "`"


def compare_fields(git: Mapping[str, Any], live: Mapping[str, Any]) -> list[FieldDiff]:
    """The fields git sets that the live object lacks or holds differently.

    Only keys git sets are compared (defaults a controller or the API server adds are not drift);
    metadata is compared for labels and annotations git sets (Flux's own and kustomize's are skipped).
    A Secret is compared by its keys only: a value is never looked at.
    """
    diffs: list[FieldDiff] = []
    git_meta, live_meta = _meta(git), _meta(live)
    for bag in ("labels", "annotations"):
        wanted = git_meta.get(bag) or {}
        have = live_meta.get(bag) or {}
        for key in sorted(wanted):
            if any(str(key).startswith(p) for p in _SKIPPED_META_PREFIXES):
                continue
            _compare(wanted[key], have.get(key) if isinstance(have, Mapping) else None, f"metadata.{bag}.{key}", diffs)
    if str(git.get("kind")) == "Secret" and "/" not in str(git.get("apiVersion", "v1")):
        live_keys = set((live.get("data") or {})) | set((live.get("stringData") or {}))
        for section in ("data", "stringData"):
            for key in sorted((git.get(section) or {})):
                if key not in live_keys:
                    diffs.append(FieldDiff(f"data.{key}", "<value>", None))
        if git.get("type") is not None:
            _compare(git.get("type"), live.get("type"), "type", diffs)
        return diffs
    for key in sorted(git):
        if key in _NOT_COMPARED_TOP:
            continue
        _compare(git[key], live.get(key), key, diffs)
    return diffs


def _empty(value: Any) -> bool:
    return value is None or value == {} or value == [] or value == ""


def _compare(git: Any, live: Any, path: str, out: list[FieldDiff]) -> None:
    if live is None:
        if not _empty(git) and not _unknowable(git):
            out.append(FieldDiff(path, git, None))
        return
    if isinstance(git, Mapping):
        if not isinstance(live, Mapping):
            out.append(FieldDiff(path, git, live))
            return
        for key in sorted(git, key=str):
            _compare(git[key], live.get(key), f"{path}.{key}", out)
        return
    if isinstance(git, list):
        if not isinstance(live, list):
            if git:
                out.append(FieldDiff(path, git, live))
            return
        _compare_list(git, live, path, out)
        return
    if not _scalar_equal(git, live):
        out.append(FieldDiff(path, git, live))


def _compare_list(git: list, live: list, path: str, out: list[FieldDiff]) -> None:
    if git and all(isinstance(g, Mapping) for g in git):
        named = all("name" in g for g in git) and all(isinstance(x, Mapping) for x in live)
        if named:
            by_name = {x.get("name"): x for x in live if isinstance(x, Mapping)}
            for g in git:
                _compare(g, by_name.get(g["name"]), f"{path}[name={g['name']}]", out)
            return
        if len(git) == len(live):
            for i, (g, x) in enumerate(zip(git, live)):
                _compare(g, x, f"{path}[{i}]", out)
            return
        for i, g in enumerate(git):  # lengths differ: each of git's elements must match some live one
            if not any(_matches(g, x) for x in live):
                out.append(FieldDiff(f"{path}[{i}]", g, None))
        return
    if len(git) != len(live) or not all(_scalar_equal(g, x) if not isinstance(g, (Mapping, list)) else _matches(g, x) for g, x in zip(git, live)):
        if not any(_unknowable(g) for g in git):
            out.append(FieldDiff(path, git, live))


def _matches(git: Any, live: Any) -> bool:
    found: list[FieldDiff] = []
    _compare(git, live, "", found)
    return not found


def _unknowable(value: Any) -> bool:
    """A value the render could not know: a masked Secret variable or an unsubstituted `${…}`."""
    return isinstance(value, str) and ("<masked:" in value or "${" in value)


_QUANTITY = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+))(?:([eE][+-]?\d+)|(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei))?$")
_SUFFIX = {
    "m": Decimal("0.001"), "k": Decimal(10) ** 3, "M": Decimal(10) ** 6, "G": Decimal(10) ** 9, "T": Decimal(10) ** 12,
    "P": Decimal(10) ** 15, "E": Decimal(10) ** 18, "Ki": Decimal(2) ** 10, "Mi": Decimal(2) ** 20, "Gi": Decimal(2) ** 30,
    "Ti": Decimal(2) ** 40, "Pi": Decimal(2) ** 50, "Ei": Decimal(2) ** 60,
}
_DURATION = re.compile(r"^(?:\d+(?:\.\d+)?(?:ns|us|µs|ms|s|m|h))+$")
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)")
_DURATION_UNIT = {"ns": Decimal("1e-9"), "us": Decimal("1e-6"), "µs": Decimal("1e-6"), "ms": Decimal("0.001"), "s": Decimal(1), "m": Decimal(60), "h": Decimal(3600)}


def _quantity(value: Any) -> Decimal | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return Decimal(str(value))
    match = _QUANTITY.match(str(value).strip())
    if not match:
        return None
    try:
        number = Decimal(match.group(1))
        if match.group(2):
            return number * (Decimal(10) ** int(match.group(2)[1:]))
        return number * _SUFFIX.get(match.group(3) or "", Decimal(1))
    except InvalidOperation:
        return None


def _duration(value: Any) -> Decimal | None:
    text = str(value).strip()
    if not isinstance(value, str) or not _DURATION.match(text):
        return None
    return sum((Decimal(n) * _DURATION_UNIT[u] for n, u in _DURATION_PART.findall(text)), Decimal(0))


def _scalar_equal(git: Any, live: Any) -> bool:
    """Equal as Kubernetes would store them: the same value, its string form, the same quantity or duration."""
    if git == live and type(git) is type(live):
        return True
    if _unknowable(git):
        return True
    if isinstance(git, (Mapping, list)) or isinstance(live, (Mapping, list)):
        return False
    if _text(git) == _text(live):
        return True
    for parse in (_quantity, _duration):
        a, b = parse(git), parse(live)
        if a is not None and b is not None and a == b:
            return True
    return False


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


# --------------------------------------------------------------------------------------------- formats


def since_of(item: DriftItem, report: DriftReport, first_seen: Mapping[str, datetime] | None = None) -> tuple[datetime, bool]:
    """(when the item started, whether that is only when it was first seen)."""
    if item.since is not None:
        return item.since, False
    seen = (first_seen or {}).get(item.key)
    return (seen or report.checked_at), True


def _since_text(item: DriftItem, report: DriftReport, first_seen: Mapping[str, datetime] | None) -> str:
    when, observed = since_of(item, report, first_seen)
    age = report.checked_at - when
    if observed and age < timedelta(minutes=1):
        return f"since {format_time(when)} (first seen now)"
    return f"since {format_time(when)} ({format_duration(age)}{', first seen' if observed else ''})"


def _subject(item: DriftItem) -> str:
    if item.object is not None:
        return f"{item.object}" + (f" [{item.tier}]" if item.tier else "")
    if item.kind is DriftKind.CRD_MISSING:
        return item.key.split(":", 1)[1]
    return str(item.tier or "")


def _headline(report: DriftReport) -> str:
    where = f"cluster {report.cluster}" + (f" ({report.where})" if report.where else "")
    ref = ""
    if report.branch or report.revision:
        ref = f" against {report.branch or 'the default branch'}" + (f" at {report.revision[:12]}" if report.revision else "")
    return f"{where}{ref}, {format_time(report.checked_at)}"


def format_text(report: DriftReport, first_seen: Mapping[str, datetime] | None = None) -> str:
    """The terminal report."""
    lines = [f"drift report: {_headline(report)}"]
    if report.error is not None:
        lines.append(f"  could not check: {report.error}")
        return "\n".join(lines) + "\n"
    section = None
    for item in report.items:
        if item.kind.section != section:
            section = item.kind.section
            lines.append(f"{section.lower()}:")
        lines.append(f"  ✗ {item.kind.label}: {_subject(item)}: {item.message} — {_since_text(item, report, first_seen)}")
        lines += [f"      {d}" for d in item.details]
    if report.notes:
        lines.append("not checked:")
        lines += [f"  - {n}" for n in report.notes]
    lines.append(plural(len(report.items), "drift item") if report.items else "no drift: the cluster matches git")
    return "\n".join(lines) + "\n"


def report_to_json(report: DriftReport, first_seen: Mapping[str, datetime] | None = None) -> dict[str, Any]:
    return {
        "cluster": report.cluster,
        "where": report.where,
        "checked_at": _iso(report.checked_at),
        "branch": report.branch,
        "revision": report.revision,
        "clean": report.clean,
        "error": report.error,
        "items": [i.to_json((first_seen or {}).get(i.key)) for i in report.items],
        "notes": list(report.notes),
    }


def format_markdown(report: DriftReport, first_seen: Mapping[str, datetime] | None = None, *, hidden: str = "") -> str:
    """The issue body: the hidden marker first, then the items by section with since-when, then `hidden`."""
    out = [f"<!-- {report.marker} -->", f"## Drift report: {md.code(report.cluster)}", ""]
    if report.error is not None:
        out += [f"⚠️ The cluster could not be checked ({md.text(_headline(report))}): {md.rich(report.error)}", "",
                "This is not drift: Fluxwarden keeps trying on schedule and updates this issue when a check succeeds.", ""]
    elif not report.items:
        out += [f"✅ No drift: the cluster matches git ({md.text(_headline(report))}).", ""]
    else:
        against = md.code(report.branch or "the default branch") + (f" at {md.code(report.revision[:12])}" if report.revision else "") if (report.branch or report.revision) else "git"
        through = f" through {md.text(report.where)}" if report.where else ""
        out += [f"**{plural(len(report.items), 'item')}** where cluster {md.code(report.cluster)} differs from {against} — checked {format_time(report.checked_at)}{through}.", ""]
        budget = MAX_BODY - len(hidden) - 2000
        size = sum(len(o) + 1 for o in out)
        section = None
        shown = 0
        for item in report.items:
            block = []
            if item.kind.section != section:
                section = item.kind.section
                block += ["", f"### {section}", ""] if shown else [f"### {section}", ""]
            block.append(f"- **{item.kind.label}** {md.code(_subject(item))}: {md.rich(item.message)} — _{_since_text(item, report, first_seen)}_")
            block += [f"  - {md.rich(d)}" for d in item.details]
            grow = sum(len(b) + 1 for b in block)
            if size + grow > budget:
                out += ["", f"… and {plural(len(report.items) - shown, 'more item')}: run {md.code(f'fluxwarden drift --cluster {report.cluster}')} for all of them."]
                break
            out += block
            size += grow
            shown += 1
        out.append("")
    if report.notes:
        out += ["<details><summary>Not checked</summary>", ""]
        out += [f"- {md.rich(n)}" for n in report.notes]
        out += ["", "</details>", ""]
    out.append(
        f"<sub>Updated in place by Fluxwarden on each scheduled run and closed when {md.code(report.cluster)} matches git again. "
        f"{md.code(f'fluxwarden drift --repo . --cluster {report.cluster}')} prints the same report.</sub>"
    )
    if hidden:
        out += ["", hidden]
    return "\n".join(out) + "\n"
