"""A cluster's live state (frozen models, no I/O) and the merge preconditions judged against it.

`bot.adapters.kube` reads the cluster and builds a `LiveState`; everything here is pure, so the rules are
tested with plain data. What is checked (flux-semantics §1, §3, §5, implications 11–13):

* every tier a change touches (changed tiers, tiers losing or gaining moved objects, tiers the
  repository marks always-required) must exist on the cluster, not be suspended, be `Ready=True`,
  have `observedGeneration == generation` and not be failing on a newer revision
  (`lastAttemptedRevision != lastAppliedRevision`); so must the tiers they `dependsOn`, since Flux
  applies nothing of a tier while a dependency is not ready (`DependencyNotReady`);
* a `dependsOn` on the same source as its dependent is revision-gated (kustomize-controller PR521):
  the dependency must have applied the source's current artifact revision;
* every moved object must, live, carry the source tier's ownership labels and be in its inventory —
  otherwise the prune-transient reasoning does not hold (absent, or owned by someone else);
* CRDs on the cluster are classified by who made them (a Flux Kustomization, a Helm release, an
  operator) and become providers, so `second-order-crd` and `crd-not-ordered` also see operators and
  charts the knowledge base does not know.

Failures are `precondition-failed` errors; anything that could not be read is a
`precondition-unknown` error (never a silent pass).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterable, Mapping, Sequence

from bot.engine.render.facts import TierFacts
from bot.engine.render.knowledge import KnowledgeBase
from bot.engine.core.model import Finding, GroupKind, ObjectRef, Severity, SourceRef, TierId, TierSpec, plural
from bot.engine.tiergraph.providers import Provider, ProviderIndex, ProviderKind
from bot.engine.render.rendered import ClusterRender

CHECK_FAILED = "precondition-failed"
CHECK_UNKNOWN = "precondition-unknown"
CHECK_LIVE_PROVIDERS = "live-providers"
CHECK_CHECKED = "precondition-checked"

KS_LABEL_NAME = "kustomize.toolkit.fluxcd.io/name"
KS_LABEL_NAMESPACE = "kustomize.toolkit.fluxcd.io/namespace"
HELM_RELEASE_NAME = "meta.helm.sh/release-name"
HELM_RELEASE_NAMESPACE = "meta.helm.sh/release-namespace"
HELM_CONTROLLER_NAME = "helm.toolkit.fluxcd.io/name"
HELM_CONTROLLER_NAMESPACE = "helm.toolkit.fluxcd.io/namespace"
MANAGED_BY = "app.kubernetes.io/managed-by"
CRD_API_VERSION = "apiextensions.k8s.io/v1"


# --------------------------------------------------------------------------------------------- models


@dataclass(frozen=True)
class Condition:
    """One `status.conditions` entry."""

    type: str
    status: str  # True | False | Unknown
    reason: str = ""
    message: str = ""
    last_transition_time: str = field(default="", compare=False)  # RFC 3339, when `status` last changed (drift: "since")

    @classmethod
    def from_object(cls, raw: Mapping[str, Any]) -> "Condition":
        return cls(
            str(raw.get("type", "")),
            str(raw.get("status", "Unknown")),
            str(raw.get("reason") or ""),
            str(raw.get("message") or ""),
            str(raw.get("lastTransitionTime") or ""),
        )


def _conditions(status: Mapping[str, Any]) -> tuple[Condition, ...]:
    return tuple(Condition.from_object(c) for c in status.get("conditions") or () if isinstance(c, Mapping))


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


@dataclass(frozen=True)
class LiveKustomization:
    """What `kubectl get ks -o yaml` says about one Flux Kustomization."""

    id: TierId
    suspend: bool = False
    generation: int | None = None
    observed_generation: int | None = None
    last_applied_revision: str = ""
    last_attempted_revision: str = ""
    conditions: tuple[Condition, ...] = ()
    inventory: frozenset[str] = frozenset()  # entry ids: <namespace>_<name>_<group>_<kind>
    source: SourceRef | None = None

    @classmethod
    def from_object(cls, body: Mapping[str, Any]) -> "LiveKustomization":
        meta = body.get("metadata") or {}
        spec = body.get("spec") or {}
        status = body.get("status") or {}
        namespace = str(meta.get("namespace") or "default")
        ref = spec.get("sourceRef") or {}
        source = (
            SourceRef(str(ref.get("kind", "GitRepository")), str(ref["name"]), str(ref.get("namespace") or namespace))
            if ref.get("name")
            else None
        )
        entries = (status.get("inventory") or {}).get("entries") or ()
        return cls(
            id=TierId(namespace, str(meta.get("name", ""))),
            suspend=bool(spec.get("suspend", False)),
            generation=_int(meta.get("generation")),
            observed_generation=_int(status.get("observedGeneration")),
            last_applied_revision=str(status.get("lastAppliedRevision") or ""),
            last_attempted_revision=str(status.get("lastAttemptedRevision") or ""),
            conditions=_conditions(status),
            inventory=frozenset(str(e["id"]) for e in entries if isinstance(e, Mapping) and e.get("id")),
            source=source,
        )

    def condition(self, type_: str) -> Condition | None:
        return next((c for c in self.conditions if c.type == type_), None)

    @property
    def ready(self) -> Condition | None:
        return self.condition("Ready")

    def flux_get(self) -> str:
        """The row `flux get ks` prints for it: NAME REVISION SUSPENDED READY MESSAGE."""
        ready = self.ready
        status, message = (ready.status, ready.message) if ready else ("False", "waiting to be reconciled")
        return (
            f"`flux get ks {self.id.name} -n {self.id.namespace}` shows NAME={self.id.name} "
            f"REVISION={self.last_applied_revision or '-'} SUSPENDED={self.suspend} READY={status} "
            f"MESSAGE=\"{_one_line(message)}\""
        )

    def problems(self) -> list[str]:
        """Why Flux would not (yet) apply a change through this tier; empty when it is Ready and current."""
        out = []
        if self.suspend:
            out.append(f"it is suspended (Flux applies and prunes nothing until `flux resume ks {self.id.name} -n {self.id.namespace}`)")
        ready = self.ready
        if ready is None:
            out.append("it has not been reconciled yet (no Ready condition)")
        elif ready.status != "True":
            reason = f" ({ready.reason})" if ready.reason else ""
            what = "it is waiting on a dependency" if ready.reason == "DependencyNotReady" else "it is not Ready"
            out.append(f"{what}: Ready={ready.status}{reason}")
        stalled = self.condition("Stalled")
        if stalled is not None and stalled.status == "True":
            out.append(f"it is stalled ({stalled.reason or 'terminal error'}): Flux will not retry until its spec changes")
        if self.generation is not None and (self.observed_generation is None or self.observed_generation < self.generation):
            observed = "none" if self.observed_generation is None else str(self.observed_generation)
            out.append(f"its latest spec is not applied (observedGeneration {observed} < generation {self.generation})")
        if self.last_attempted_revision and self.last_attempted_revision != self.last_applied_revision:
            out.append(
                f"it is failing on a newer revision (lastAttemptedRevision {self.last_attempted_revision}, "
                f"lastAppliedRevision {self.last_applied_revision or 'none'})"
            )
        return out


@dataclass(frozen=True)
class LiveSource:
    """A GitRepository/OCIRepository/Bucket and the revision of the artifact it serves now."""

    ref: SourceRef
    revision: str | None  # status.artifact.revision; None: no artifact yet
    ready: Condition | None = None
    updated: str = field(default="", compare=False)  # status.artifact.lastUpdateTime (RFC 3339): when this revision arrived

    @classmethod
    def from_object(cls, ref: SourceRef, body: Mapping[str, Any]) -> "LiveSource":
        status = body.get("status") or {}
        artifact = status.get("artifact") or {}
        ready = next((c for c in _conditions(status) if c.type == "Ready"), None)
        return cls(ref, str(artifact["revision"]) if artifact.get("revision") else None, ready, str(artifact.get("lastUpdateTime") or ""))


@dataclass(frozen=True)
class OwnerReference:
    """One `metadata.ownerReferences` entry."""

    api_version: str
    kind: str
    name: str
    controller: bool = False

    @property
    def group(self) -> str:
        return GroupKind.of(self.api_version, self.kind).group


def _owners(meta: Mapping[str, Any]) -> tuple[OwnerReference, ...]:
    return tuple(
        OwnerReference(str(o.get("apiVersion", "")), str(o.get("kind", "")), str(o.get("name", "")), bool(o.get("controller", False)))
        for o in meta.get("ownerReferences") or ()
        if isinstance(o, Mapping)
    )


def _str_map(raw: Any) -> dict[str, str]:
    return {str(k): str(v) for k, v in raw.items()} if isinstance(raw, Mapping) else {}


@dataclass(frozen=True)
class LiveCrd:
    """A CustomResourceDefinition on the cluster, reduced to what says which kind it serves and who made it."""

    name: str
    group: str
    kind: str
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    owners: tuple[OwnerReference, ...] = ()

    @classmethod
    def from_object(cls, body: Mapping[str, Any]) -> "LiveCrd":
        meta = body.get("metadata") or {}
        spec = body.get("spec") or {}
        return cls(
            name=str(meta.get("name", "")),
            group=str(spec.get("group", "")),
            kind=str((spec.get("names") or {}).get("kind", "")),
            labels=_str_map(meta.get("labels")),
            annotations=_str_map(meta.get("annotations")),
            owners=_owners(meta),
        )

    @property
    def group_kind(self) -> GroupKind:
        return GroupKind(self.group, self.kind)

    @property
    def ref(self) -> ObjectRef:
        return ObjectRef(CRD_API_VERSION, "CustomResourceDefinition", "", self.name)


@dataclass(frozen=True)
class LiveObject:
    """A moved object as it is on the cluster: who owns it, by Flux's labels."""

    ref: ObjectRef
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_object(cls, ref: ObjectRef, body: Mapping[str, Any]) -> "LiveObject":
        meta = body.get("metadata") or {}
        return cls(ref, _str_map(meta.get("labels")), _str_map(meta.get("annotations")))

    @property
    def owner(self) -> TierId | None:
        """The Kustomization whose ownership labels it carries."""
        name = self.labels.get(KS_LABEL_NAME)
        return TierId(self.labels.get(KS_LABEL_NAMESPACE, ""), name) if name else None


@dataclass(frozen=True)
class ObjectRead:
    """The outcome of reading one object: found, absent (`object` None, no error), or unreadable."""

    ref: ObjectRef
    object: LiveObject | None = None
    error: str | None = None


ObjectFetcher = Callable[[Sequence[ObjectRef]], Sequence[ObjectRead]]

LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


@dataclass(frozen=True)
class LiveBody:
    """An object's whole live body, for drift (bot/engine/livestate/drift.py): absent (`body` None), unreadable (`error`), or found.

    Built with `LiveBody.of`, which never keeps a Secret's values (only its keys) nor the
    last-applied-configuration annotation (it can hold them too).
    """

    ref: ObjectRef
    body: Mapping[str, Any] | None = None
    error: str | None = None
    kind_served: bool = True  # False: the cluster does not serve the kind at all (its CRD is missing)

    @classmethod
    def of(cls, ref: ObjectRef, body: Mapping[str, Any] | None) -> "LiveBody":
        return cls(ref, without_secret_values(body) if body is not None else None)


def without_secret_values(body: Mapping[str, Any]) -> dict[str, Any]:
    """A copy fit to keep in memory: a Secret's `data`/`stringData` values blanked (keys kept), and the
    last-applied-configuration annotation dropped from every kind."""
    out = dict(body)
    meta = dict(out.get("metadata") or {})
    annotations = meta.get("annotations")
    if isinstance(annotations, Mapping) and LAST_APPLIED in annotations:
        meta["annotations"] = {k: v for k, v in annotations.items() if k != LAST_APPLIED}
    out["metadata"] = meta
    if str(out.get("kind")) == "Secret" and "/" not in str(out.get("apiVersion", "v1")):
        for key in ("data", "stringData"):
            if isinstance(out.get(key), Mapping):
                out[key] = {str(k): "" for k in out[key]}
    return out


@dataclass(frozen=True)
class LiveState:
    """Everything read from one cluster; `error` set when it could not be read at all."""

    cluster: str
    where: str = ""  # how it was reached ("context prod"); never a secret, a path or a URL
    kustomizations: Mapping[TierId, LiveKustomization] = field(default_factory=dict)
    sources: Mapping[SourceRef, LiveSource] = field(default_factory=dict)
    source_errors: Mapping[SourceRef, str] = field(default_factory=dict)
    crds: tuple[LiveCrd, ...] = ()
    crd_error: str | None = None
    objects: Mapping[tuple[str, str, str, str], ObjectRead] = field(default_factory=dict)
    error: str | None = None

    @classmethod
    def unavailable(cls, cluster: str, reason: str, where: str = "") -> "LiveState":
        return cls(cluster, where, error=reason)

    def with_objects(self, reads: Iterable[ObjectRead]) -> "LiveState":
        objects = dict(self.objects)
        objects.update((r.ref.identity, r) for r in reads)
        return replace(self, objects=objects)

    @property
    def label(self) -> str:
        return f"cluster {self.cluster}" + (f" ({self.where})" if self.where else "")


def inventory_id(ref: ObjectRef) -> str:
    """Flux's inventory id: `<namespace>_<name>_<group>_<kind>` (flux-semantics §3)."""
    return "_".join(ref.identity)


def _one_line(text: str, limit: int = 300) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


# --------------------------------------------------------------------------------------------- preconditions


@dataclass(frozen=True)
class Move:
    """An object leaving `source` for `destination` (a MOVED change of the diff)."""

    ref: ObjectRef
    source: TierId
    destination: TierId


def evaluate_preconditions(
    state: LiveState,
    specs: Mapping[TierId, TierSpec],
    tiers: Iterable[TierId],
    *,
    moves: Iterable[Move] = (),
    expected_absent: Iterable[TierId] = (),
) -> list[Finding]:
    """`precondition-failed`/`precondition-unknown` findings for a change touching `tiers` (and making `moves`).

    `specs` are the tier specs after the change (their dependsOn and sourceRef decide the gates);
    `expected_absent` are tiers the change adds or removes, which may rightly be missing live.
    """
    touched = sorted(set(tiers))
    moves = sorted(set(moves), key=lambda m: (str(m.source), str(m.destination), m.ref))
    if state.error is not None:
        names = _names(touched) or "the tiers this change touches"
        return [Finding(
            CHECK_UNKNOWN,
            Severity.ERROR,
            f"could not read the live state of {state.label}: {state.error}. The merge preconditions of {names} "
            f"are unknown: do not merge until `flux get ks` shows them Ready on the current revision",
        )]
    absent_ok = set(expected_absent)
    findings: list[Finding] = []
    failing: set[TierId] = set()
    for tier in touched:
        finding = _tier_state(state, tier, absent_ok)
        if finding is not None:
            failing.add(tier)
            findings.append(finding)
    for tier in touched:
        spec = specs.get(tier)
        if spec is None:
            continue
        for dep in spec.depends_on:
            findings += _dependency(state, specs, tier, spec, dep, dep in failing or dep in touched, absent_ok)
    for move in moves:
        findings += _moved_object(state, move)
    if state.crd_error is not None:
        findings.append(_unknown(
            f"the CRDs of {state.label} could not be listed: {state.crd_error}. Providers were not learned from the "
            f"cluster, so kinds only the cluster knows may be reported as unknown",
            None,
        ))
    names = _names(touched) or "none"
    outcome = f"{len(findings)} not met" if findings else "all met"
    moved = f" and {plural(len(moves), 'moved object')}" if moves else ""
    findings.append(Finding(
        CHECK_CHECKED,
        Severity.INFO,
        f"live preconditions read from {state.label} for {plural(len(touched), 'tier')} ({names}){moved}: {outcome}",
    ))
    return findings


def _names(tiers: Sequence[TierId], limit: int = 12) -> str:
    shown = ", ".join(t.name for t in tiers[:limit])
    return shown + (f" and {len(tiers) - limit} more" if len(tiers) > limit else "")


def _failed(message: str, tier: TierId | None, obj: ObjectRef | None = None) -> Finding:
    return Finding(CHECK_FAILED, Severity.ERROR, message, kustomization=tier, object=obj)


def _unknown(message: str, tier: TierId | None, obj: ObjectRef | None = None) -> Finding:
    return Finding(CHECK_UNKNOWN, Severity.ERROR, message, kustomization=tier, object=obj)


def _missing(tier: TierId) -> str:
    return f"`flux get ks {tier.name} -n {tier.namespace}` shows ✗ kustomizations.kustomize.toolkit.fluxcd.io \"{tier.name}\" not found"


def _tier_state(state: LiveState, tier: TierId, absent_ok: set[TierId]) -> Finding | None:
    live = state.kustomizations.get(tier)
    if live is None:
        if tier in absent_ok:
            return None  # added (or removed) by this change: not on the cluster yet (any more)
        return _failed(
            f"{tier} is missing on {state.label}: this change assumes it exists and has applied the current "
            f"revision. {_missing(tier)}",
            tier,
        )
    problems = live.problems()
    if not problems:
        return None
    return _failed(f"{tier} is not ready to take this change: {'; '.join(problems)}. {live.flux_get()}", tier)


def _dependency(
    state: LiveState, specs: Mapping[TierId, TierSpec], tier: TierId, spec: TierSpec, dep: TierId, reported: bool, absent_ok: set[TierId]
) -> list[Finding]:
    """Flux's dependsOn check for `tier` on `dep` (kustomize-controller checkDependencies)."""
    live = state.kustomizations.get(dep)
    if live is None:
        if reported or dep in absent_ok:
            return []
        return [_failed(
            f"{tier} dependsOn {dep}, which is missing on {state.label}: Flux applies nothing of {tier} until it "
            f"exists and is Ready (DependencyNotReady). {_missing(dep)}",
            tier,
        )]
    out = []
    problems = live.problems()
    if problems and not reported:
        out.append(_failed(
            f"{tier} dependsOn {dep}, so Flux applies nothing of {tier} (DependencyNotReady) until {dep} is ready, "
            f"and {dep} is not: {'; '.join(problems)}. {live.flux_get()}",
            tier,
        ))
    dep_spec = specs.get(dep)
    dep_source = dep_spec.source if dep_spec else live.source
    if dep_source is None or dep_source != spec.source:
        return out  # different sources: no revision gate, a dependency Ready on an old revision satisfies Flux
    source = state.sources.get(dep_source)
    if dep_source in state.source_errors:
        out.append(_unknown(
            f"{tier} dependsOn {dep} on the same source {dep_source}, whose current artifact revision could not be "
            f"read: {state.source_errors[dep_source]}. Whether {dep} has applied it (Flux's revision gate) is unknown",
            tier,
        ))
    elif source is None:
        out.append(_failed(
            f"{tier} and its dependency {dep} use the source {dep_source}, which is missing on {state.label}: "
            f"neither can fetch an artifact (ArtifactFailed)",
            tier,
        ))
    elif source.revision is None:
        out.append(_failed(
            f"{tier} and its dependency {dep} use the source {dep_source}, which has no artifact yet"
            + (f" ({source.ready.reason}: {_one_line(source.ready.message)})" if source.ready and source.ready.status != "True" else ""),
            tier,
        ))
    elif live.last_applied_revision != source.revision:
        out.append(_failed(
            f"{tier} dependsOn {dep} on the same source {dep_source}, so Flux applies {tier} only once {dep} has "
            f"applied the source's current artifact revision {source.revision} (dependsOn is revision-gated for "
            f"same-source dependencies); {dep} has applied {live.last_applied_revision or 'no revision'}. {live.flux_get()}",
            tier,
        ))
    return out


def _moved_object(state: LiveState, move: Move) -> list[Finding]:
    """The live object must carry the source tier's labels and be in its inventory, or the hand-over reasoning fails."""
    ref, source, destination = move.ref, move.source, move.destination
    read = state.objects.get(ref.identity)
    what = f"{ref} moves from {source} to {destination}"
    if read is None:
        return [_unknown(f"{what}, but its live state was not read", source, ref)]
    if read.error is not None:
        return [_unknown(f"{what}, but it could not be read: {read.error}", source, ref)]
    source_live = state.kustomizations.get(source)
    listed = source_live is not None and inventory_id(ref) in source_live.inventory
    if read.object is None:
        inventory = f"{source}'s inventory {'still lists' if listed else 'does not list'} {inventory_id(ref)}"
        return [_failed(
            f"{what}, but it is not on {state.label}: {source} has not applied it ({inventory}), so there is no "
            f"live object to hand over — check why before merging",
            source,
            ref,
        )]
    owner = read.object.owner
    if owner == destination:
        return []  # already handed over: the source's prune skips an object carrying another tier's labels
    if owner is None:
        return [_failed(
            f"{what}, but the live object carries no {KS_LABEL_NAME}/{KS_LABEL_NAMESPACE} labels: Flux did not apply "
            f"it (by hand or another tool), so {source} does not own it and {destination} will take it over",
            source,
            ref,
        )]
    if owner != source:
        return [_failed(
            f"{what}, but the live object is owned by {owner} ({KS_LABEL_NAME}={owner.name}, "
            f"{KS_LABEL_NAMESPACE}={owner.namespace}), not by {source}: {owner} applies it too, and whichever "
            f"Kustomization last applied it can prune it",
            source,
            ref,
        )]
    if not listed:
        return [_failed(
            f"{what}; the live object carries {source}'s labels but is not in its status.inventory (no entry "
            f"{inventory_id(ref)}): {source} has not recorded applying it, so its live state does not match git",
            source,
            ref,
        )]
    return []


# --------------------------------------------------------------------------------------------- CRD providers


class CrdMaker(str, enum.Enum):
    """Who created a CRD on the cluster."""

    KUSTOMIZATION = "kustomization"
    HELM = "helm"
    OPERATOR = "operator"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class CrdOrigin:
    """Who made a live CRD, and the evidence."""

    maker: CrdMaker
    by: str  # Kustomization ns/name, Helm release ns/name, operator name or owner Kind/name
    evidence: str
    tier: TierId | None = None  # KUSTOMIZATION: the Kustomization
    release: tuple[str, str] | None = None  # HELM: (namespace, name) of the Helm release
    helm_release_object: tuple[str, str] | None = None  # HELM: (namespace, name) of the HelmRelease, when labelled
    owner: OwnerReference | None = None  # OPERATOR: the object it is owned by


_OPERATOR_LABEL_HINTS = ("operator",)


def classify_crd(crd: LiveCrd) -> CrdOrigin:
    """A Flux Kustomization (its owner labels), a Helm release (helm annotations/labels), an operator
    (owner references, or labels naming an operator), or unknown."""
    labels, annotations = crd.labels, crd.annotations
    if labels.get(KS_LABEL_NAME):
        tier = TierId(labels.get(KS_LABEL_NAMESPACE, ""), labels[KS_LABEL_NAME])
        return CrdOrigin(CrdMaker.KUSTOMIZATION, str(tier), f"labels {KS_LABEL_NAME}/namespace", tier=tier)
    release = annotations.get(HELM_RELEASE_NAME)
    hr_name = labels.get(HELM_CONTROLLER_NAME)
    if release or hr_name or labels.get(MANAGED_BY, "").lower() == "helm":
        namespace = annotations.get(HELM_RELEASE_NAMESPACE, "")
        hr = (labels.get(HELM_CONTROLLER_NAMESPACE, ""), hr_name) if hr_name else None
        name = release or (hr[1] if hr else "?")
        evidence = f"annotation {HELM_RELEASE_NAME}={release}" if release else (f"label {HELM_CONTROLLER_NAME}={hr_name}" if hr_name else f"label {MANAGED_BY}=Helm")
        return CrdOrigin(CrdMaker.HELM, f"{namespace}/{name}" if namespace else name, evidence, release=(namespace, name) if release else None, helm_release_object=hr)
    if crd.owners:
        owner = next((o for o in crd.owners if o.controller), crd.owners[0])
        return CrdOrigin(CrdMaker.OPERATOR, f"{owner.kind}/{owner.name}", f"ownerReference {owner.kind}/{owner.name}", owner=owner)
    managed = labels.get(MANAGED_BY)
    if managed:
        return CrdOrigin(CrdMaker.OPERATOR, managed, f"label {MANAGED_BY}={managed}")
    for key, value in sorted(labels.items()):
        if any(h in key.lower() for h in _OPERATOR_LABEL_HINTS):
            return CrdOrigin(CrdMaker.OPERATOR, key.split("/", 1)[0] if "/" in key else key, f"label {key}" + (f"={value}" if value else ""))
    return CrdOrigin(CrdMaker.UNKNOWN, "unknown", "no Flux, Helm or operator labels")


def _helm_release_matches(manifest_body: Mapping[str, Any], namespace: str, name: str, release: tuple[str, str] | None) -> bool:
    """Whether a HelmRelease installs the Helm release `release` (helm-controller's default naming)."""
    if release is None:
        return False
    spec = manifest_body.get("spec") or {}
    target = spec.get("targetNamespace")
    release_name = spec.get("releaseName") or (f"{target}-{name}" if target else name)
    release_namespace = target or namespace
    r_namespace, r_name = release
    return r_name == release_name and (not r_namespace or r_namespace == release_namespace)


class _Makers:
    """What the render applies that can make a CRD: Kustomizations, HelmReleases, operators' CRs (indexed once)."""

    def __init__(self, facts: Mapping[TierId, TierFacts]) -> None:
        self.tiers = set(facts)
        self.helm_releases: list[tuple[TierId, Any]] = [(tier, m) for tier, f in facts.items() for m in f.helm_releases]
        self.objects: dict[tuple[str, str, str], tuple[TierId, ObjectRef]] = {}
        for tier, tier_facts in facts.items():
            for stub in sorted((s for stubs in tier_facts.kinds.values() for s in stubs), key=lambda s: s.position):
                ref = stub.ref
                self.objects.setdefault((ref.group, ref.kind, ref.name), (tier, ref))

    def provider(self, crd: LiveCrd, origin: CrdOrigin) -> Provider | None:
        """A provider with a tier, when the render applies whatever made the live CRD."""
        learned = f"learned from the cluster: CRD {crd.name}, {origin.evidence}"
        if origin.maker == CrdMaker.KUSTOMIZATION and origin.tier in self.tiers:
            return Provider(ProviderKind.CRD, origin.tier, crd.ref, f"CRD {crd.name} ({learned})")
        if origin.maker == CrdMaker.HELM:
            for tier, manifest in self.helm_releases:
                ref = manifest.ref
                labelled = origin.helm_release_object == (ref.namespace, ref.name)
                if labelled or _helm_release_matches(manifest.body, ref.namespace, ref.name, origin.release):
                    return Provider(ProviderKind.CHART, tier, ref, f"the chart of HelmRelease {ref.namespace}/{ref.name} ({learned})")
        if origin.maker == CrdMaker.OPERATOR and origin.owner is not None:
            owner = origin.owner
            found = self.objects.get((owner.group, owner.kind, owner.name))
            if found is not None:
                tier, ref = found
                return Provider(ProviderKind.RUNTIME, tier, ref, f"the operator reconciling {ref.kind} {ref.name} ({learned})")
        return None


def _live_description(crd: LiveCrd, origin: CrdOrigin) -> str:
    if origin.maker == CrdMaker.KUSTOMIZATION:
        return f"CRD {crd.name} on the cluster, applied by Kustomization {origin.by}, which this render does not include"
    if origin.maker == CrdMaker.HELM:
        return f"CRD {crd.name} on the cluster, installed by Helm release {origin.by} ({origin.evidence})"
    if origin.maker == CrdMaker.OPERATOR:
        return f"CRD {crd.name} on the cluster, created by an operator ({origin.evidence}) that this render does not apply"
    return f"CRD {crd.name} on the cluster ({origin.evidence})"


class LiveProviderIndex(ProviderIndex):
    """The render's providers plus those learned from the cluster's CRDs.

    A live CRD whose maker the render applies (a Kustomization, a HelmRelease, an operator's CR)
    becomes a provider *with that tier*, so the ordering checks judge it like a known chart or
    operator; any other live CRD is a LIVE provider (it exists now). Kinds git already places on a
    tier keep their static providers: the checks are about a cold cluster, where live presence
    proves nothing.
    """

    def __init__(self, render: ClusterRender, knowledge: KnowledgeBase, state: LiveState, facts: Mapping[TierId, TierFacts] | None = None) -> None:
        super().__init__(render, knowledge, facts)
        self._learned: dict[GroupKind, list[Provider]] = {}
        self.used: dict[GroupKind, Provider] = {}  # kinds a check resolved through a learned provider
        live: dict[GroupKind, str] = {}
        makers = _Makers(self.facts)
        for crd in state.crds:
            gk = crd.group_kind
            if not crd.group or not crd.kind:
                continue
            static = super().resolve(gk)
            if any(p.tier is not None or p.kind in (ProviderKind.BUILTIN, ProviderKind.PREINSTALLED) for p in static):
                continue
            origin = classify_crd(crd)
            tiered = makers.provider(crd, origin)
            if tiered is not None:
                self._learned.setdefault(gk, []).append(tiered)
            else:
                live[gk] = _live_description(crd, origin)
        self.learn_live(live)

    def resolve(self, gk: GroupKind) -> list[Provider]:
        found = super().resolve(gk)
        learned = self._learned.get(gk)
        if learned:
            # A knowledge-base rule whose trigger this cluster never applies is superseded by what the cluster shows.
            found = [p for p in found if not (p.kind == ProviderKind.RUNTIME and p.tier is None)] + learned
        origin = next((p for p in found if p.kind == ProviderKind.LIVE or (learned and p in learned)), None)
        if origin is not None:
            self.used[gk] = origin
        return found


def live_provider_findings(providers: ProviderIndex) -> list[Finding]:
    """One info line saying which providers the checks took from the cluster."""
    used = getattr(providers, "used", None)
    if not used:
        return []
    parts = [f"{gk}: {p.description}" + (f" [{p.tier}]" if p.tier else "") for gk, p in sorted(used.items())]
    return [Finding(CHECK_LIVE_PROVIDERS, Severity.INFO, "providers learned from the cluster: " + "; ".join(parts))]


def required_tier_ids(names: Iterable[str]) -> frozenset[TierId]:
    """`platform-config` or `ns/name` (namespace defaults to flux-system)."""
    return frozenset(TierId.parse(n) for n in names)
