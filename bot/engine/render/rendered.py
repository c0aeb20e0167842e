"""What a render produces: kustomize's output per tier, finished tiers, a cluster's render (pure models)."""

from __future__ import annotations

import dataclasses
import enum
import json
import re
from dataclasses import dataclass, field, replace
from typing import Any, Mapping, NamedTuple, Sequence

import yaml

from bot.engine.render.artifacts import is_artifact_generator
from bot.engine.core.errors import InputError
from bot.engine.render.flux import (
    FLUX_INSTANCE_GROUP as OPERATOR_GROUP, KUSTOMIZATION_GROUP, SUBSTITUTE_ANNOTATION, is_flux_instance_release, is_flux_kustomization, operator_sync,
)
from bot.engine.render.generate import EmptyKustomization, RemoteEntry
from bot.engine.core.model import Cause, Finding, GroupKind, Manifest, ObjectRef, Severity, SourceLocation, TierId, TierSpec
from bot.engine.core.tree import RepoTree
from bot.engine.render.yamlio import FastSafeLoader

ORIGIN_ANNOTATION = "config.kubernetes.io/origin"
# The owner labels kustomize-controller stamps on every object it applies (its API group + /name, /namespace).
OWNER_NAME_LABEL = f"{KUSTOMIZATION_GROUP}/name"
OWNER_NAMESPACE_LABEL = f"{KUSTOMIZATION_GROUP}/namespace"
# Values that come from a Secret are never shown; they render as this marker instead.
# (No leading `*`: kustomize emits `${S}` unquoted, and `**…` would then parse as a YAML alias.)
SECRET_MASK = "<masked:{name}>"
# A document substitution may change: a reference, or `$$`, which collapses to `$`.
MAY_SUBSTITUTE = re.compile(r"\$\{|\$\$")
CONFIG_KIND = re.compile(r"^kind: (?:ConfigMap|Secret)[ \t]*$", re.MULTILINE)
# What a graph-only render keeps of a build: Flux Kustomizations, the ArtifactGenerators and
# FluxInstances that say where some of them read and how the entry is built, and the Flux Operator's
# ResourceSets (and their input providers) that create Kustomizations.
_FLUX_KUSTOMIZATION = re.compile(
    r"^apiVersion: (?:kustomize\.toolkit\.fluxcd\.io/[^\n]*\n(?:[^\n]*\n)*?kind: Kustomization"
    r"|source\.extensions\.fluxcd\.io/[^\n]*\n(?:[^\n]*\n)*?kind: ArtifactGenerator"
    r"|fluxcd\.controlplane\.io/[^\n]*\n(?:[^\n]*\n)*?kind: (?:FluxInstance|ResourceSet|ResourceSetInputProvider))[ \t]*$",
    re.MULTILINE,
)
_SUBSTITUTE_DISABLED = re.compile(rf"{re.escape(SUBSTITUTE_ANNOTATION)}: ['\"]?disabled")


@dataclass(frozen=True)
class RawDocument:
    """One object of kustomize's output, before substitution.

    `body` is None for a document that substitution may change: it is parsed once, after
    substitution, instead of twice (the YAML parse is most of the Python time of a render).
    """

    text: str
    body: Mapping[str, Any] | None
    origin: SourceLocation | None

    @property
    def substitution_disabled(self) -> bool:
        """`kustomize.toolkit.fluxcd.io/substitute: disabled` as a label or an annotation
        (fluxcd/pkg kustomize/kustomize_varsub.go SubstituteVariables)."""
        if not _SUBSTITUTE_DISABLED.search(self.text):
            return False
        body = self.body
        if body is None:
            try:
                body = yaml.load(self.text, Loader=FastSafeLoader)
            except (yaml.YAMLError, InputError):
                return True  # (kustomize wrote it: it parses; the text says disabled; a bound is reported when it is parsed)
        meta = body.get("metadata") if isinstance(body, dict) else None
        if not isinstance(meta, dict):
            return False
        return any(isinstance(m, dict) and m.get(SUBSTITUTE_ANNOTATION) == "disabled" for m in (meta.get("labels"), meta.get("annotations")))


class DocumentIndex(NamedTuple):
    """Positions in a build's documents: ConfigMaps and Secrets by (kind, namespace, name), first wins;
    Flux Kustomizations (what a graph-only render keeps)."""

    config: Mapping[tuple[str, str, str], int]
    kustomizations: tuple[int, ...]

    @classmethod
    def of(cls, documents: Sequence[RawDocument]) -> "DocumentIndex":
        config: dict[tuple[str, str, str], int] = {}
        kustomizations = []
        for position, doc in enumerate(documents):
            if doc.body is not None and CONFIG_KIND.search(doc.text):
                ref = object_ref(doc.body)
                if ref and ref.kind in ("ConfigMap", "Secret"):
                    config.setdefault((ref.kind, ref.namespace, ref.name), position)
            if _FLUX_KUSTOMIZATION.search(doc.text):
                kustomizations.append(position)
        return cls(config, tuple(kustomizations))


@dataclass(frozen=True)
class RawTier:
    """kustomize's output for one tier, or why there is none."""

    spec: TierSpec
    documents: Sequence[RawDocument] = ()
    inputs: frozenset[str] = frozenset()
    findings: tuple[Finding, ...] = ()
    failed: bool = False
    content_key: str | None = None  # the build cache key: equal keys, equal output
    index: DocumentIndex | None = None  # see `document_index`; None: read the documents
    # Its kustomization file holds nothing as the controller writes it back: some Flux releases fail the build
    # (fluxversion.empty_kustomization_fails). Such a build is not cached: the rule needs it.
    empty: EmptyKustomization | None = None
    remote: tuple[RemoteEntry, ...] = ()  # remote entries its build left out: never fetched, their objects not checked

    @property
    def document_index(self) -> DocumentIndex:
        """Where its ConfigMaps, Secrets and Flux Kustomizations are, known for a cached build without
        unpickling its documents: only a tier's actual substituteFrom sources are read, and a graph-only
        render skips builds with no Kustomization."""
        return self.index if self.index is not None else DocumentIndex.of(self.documents)

    def for_spec(self, spec: TierSpec) -> "RawTier":
        """This build, made for an equal build key, as the build of `spec` (its findings name that tier)."""
        if self.spec == spec:
            return self
        return replace(self, spec=spec, findings=tuple(replace(f, kustomization=spec.id) for f in self.findings))


# (kind, namespace, name) → (documents of the build that has it, index there): looked up lazily.
SourceIndex = Mapping[tuple[str, str, str], tuple[Sequence[RawDocument], int]]


@dataclass(frozen=True)
class RenderedTier:
    """One tier after kustomize, postBuild substitution and commonMetadata."""

    spec: TierSpec
    manifests: Sequence[Manifest] = ()
    rendered: bool = False  # False: another source, unsafe input or a failed build
    failed: bool = False
    substituted: bool = False  # postBuild substitution ran (at least one variable loaded)
    variables_open: bool = False  # some substituteFrom source is not in git, so the set is not known
    variables: frozenset[str] = frozenset()
    undefined: Mapping[str, tuple[Manifest, ...]] = field(default_factory=dict)
    inputs: frozenset[str] = frozenset()  # repo paths the build read
    token_candidates: frozenset[int] | None = None  # indices of manifests whose text has `${`; None: unknown
    finish_key: str | None = None  # the finish cache key: equal keys, equal objects; None when not cacheable
    # Its discovery objects when known apart from `manifests` (a tier read back from its summary, whose
    # other objects load on first use); None: read them from `manifests`.
    discovery: tuple[Manifest, ...] | None = None
    remote: tuple[str, ...] = ()  # the remote resources (URLs) its build left out, which kustomize-controller fetches

    def flux_kustomizations(self) -> Sequence[Manifest]:
        """Its Flux Kustomizations (known without loading a cached tier's other objects)."""
        return [m for m in self.discovery_objects() if is_flux_kustomization(m)]

    def discovery_objects(self) -> Sequence[Manifest]:
        """Its Flux Kustomizations, ArtifactGenerators, FluxInstances and ResourceSets (see `is_discovery_object`), known
        without loading a cached tier's other objects."""
        if self.discovery is not None:
            return self.discovery
        return [m for m in self.manifests if is_discovery_object(m)]


# A finished tier as cached: the tier without its objects, their count, its discovery objects.
TierSummary = tuple[RenderedTier, int, tuple[Manifest, ...]]


def summarise(tier: RenderedTier) -> TierSummary:
    """A finished tier without its objects (see `TierSummary`)."""
    return replace(tier, manifests=(), discovery=None), len(tier.manifests), tuple(tier.discovery_objects())


class Outcome(str, enum.Enum):
    """What became of one HelmRelease's chart."""

    RENDERED = "rendered"
    NOT_RENDERED = "not-rendered"  # its chart could not be had (unreachable, not allowed, credentials, too large)
    FAILED = "failed"  # the chart rendered with an error helm-controller would fail the install with


@dataclass(frozen=True)
class RenderedRelease:
    """One HelmRelease's chart as helm-controller would install it, or why it was not rendered."""

    ref: ObjectRef  # the HelmRelease
    tier: TierId  # the Kustomization that applies it
    outcome: Outcome
    chart: str = ""
    version: str | None = None
    source: str = ""  # the source it came from, e.g. "HelmRepository flux-system/podinfo"
    manifests: tuple[Manifest, ...] = ()
    crds: tuple[tuple[GroupKind, ObjectRef], ...] = ()  # (kind defined, CRD) of what it installs
    reason: str = ""  # NOT_RENDERED / FAILED: why
    location: SourceLocation | None = None  # the HelmRelease's file:line
    release_name: str = ""
    namespace: str = ""
    # Not rendered: the values helm-controller would compose (valuesFrom included, Secret values masked), which
    # the knowledge base's CRD switch of the chart reads (`crds.enabled` from a values ConfigMap); None: not composed.
    values: Mapping[str, Any] | None = None

    @property
    def rendered(self) -> bool:
        return self.outcome is Outcome.RENDERED

    def heading(self) -> str:
        """`HelmRelease default/webapp (chart webapp 1.1.0)`, as `fluxwarden build` and the review head it."""
        chart = f" (chart {self.chart} {self.version})" if self.chart and self.version else (f" (chart {self.chart})" if self.chart else "")
        return f"HelmRelease {self.ref.namespace}/{self.ref.name}{chart}"


@dataclass(frozen=True)
class ClusterRender:
    """Every tier of one cluster, in discovery order, and the findings rendering produced."""

    cluster: str
    entry: str
    tiers: Mapping[TierId, RenderedTier]
    findings: tuple[Finding, ...]
    snapshot: RepoTree
    # Its HelmReleases' charts, rendered (bot/pipeline/releases.py); empty until that stage ran.
    releases: Mapping[ObjectRef, RenderedRelease] = field(default_factory=dict)

    def manifests(self) -> list[tuple[TierId, Manifest]]:
        """Every rendered object with the tier that applies it."""
        return [(tid, m) for tid, tier in self.tiers.items() for m in tier.manifests]


def is_discovery_object(manifest: Manifest) -> bool:
    """Objects a render follows: Flux Kustomizations, ArtifactGenerators, FluxInstances (objects or chart values),
    and ResourceSets with their input providers (bot/engine/render/resourceset.py renders what they create)."""
    return (
        is_flux_kustomization(manifest)
        or is_artifact_generator(manifest)
        or (manifest.ref.kind in ("ResourceSet", "ResourceSetInputProvider") and manifest.ref.group == OPERATOR_GROUP)
        or (manifest.ref.kind in ("FluxInstance", "HelmRelease") and operator_sync(manifest) is not None)
        or is_flux_instance_release(manifest)
    )


def build_key(spec: TierSpec) -> str:
    """The spec fields kustomize sees; two tiers with equal keys build identical output."""
    return json.dumps(
        [spec.path, spec.target_namespace, spec.name_prefix, spec.name_suffix, spec.patches, spec.images, spec.components, spec.ignore_missing_components],
        sort_keys=True,
        default=str,
    )


def same_tier(a: TierSpec, b: TierSpec) -> bool:
    """Whether two specs render the same tier (where they are written aside)."""
    return replace(a, origin=None, defined_in=None) == replace(b, origin=None, defined_in=None)


def redefined(first: TierSpec, second: TierSpec) -> str:
    """Why two definitions of one Kustomization fight: both are applied (server-side, by the same field
    manager), so each reconcile of one undoes the fields the other set."""
    fields = [f.name for f in dataclasses.fields(TierSpec) if f.name not in ("defined_in", "origin") and getattr(first, f.name) != getattr(second, f.name)]
    by = " and ".join(str(s.defined_in) if s.defined_in else "the cluster entry" for s in (first, second))
    return (
        f"{first.id} is applied by {by} with different specs ({', '.join(fields)} differ): each apply undoes the other's, "
        "so its spec flips on every reconcile; the first one found is rendered"
    )


def object_ref(body: Mapping[str, Any]) -> ObjectRef | None:
    """The identity of an object body; None when it lacks apiVersion, kind or metadata.name."""
    meta = body.get("metadata")
    if not isinstance(meta, dict):
        return None
    api_version, kind, name = body.get("apiVersion"), body.get("kind"), meta.get("name")
    if not (isinstance(api_version, str) and isinstance(kind, str) and isinstance(name, str) and name):
        return None
    return ObjectRef(api_version, kind, str(meta.get("namespace") or ""), name)


def render_failed(tier: TierId, message: str, location: SourceLocation | None, severity: Severity = Severity.ERROR, cause: Cause | None = None) -> Finding:
    """A `render-failed` finding about a tier."""
    return Finding("render-failed", severity, message, kustomization=tier, location=location, cause=cause)


def render_limit(tier: TierId, message: str, location: SourceLocation | None) -> Finding:
    """A `render-limit` finding: a tier's input past one of Fluxwarden's bounds (see discovery.RenderLimits, yamlio)."""
    return Finding("render-limit", Severity.ERROR, message, kustomization=tier, location=location)


def unsafe_path(tier: TierId, message: str, location: SourceLocation | None) -> Finding:
    """An `unsafe-path` finding about a tier."""
    return Finding("unsafe-path", Severity.ERROR, message, kustomization=tier, location=location)
