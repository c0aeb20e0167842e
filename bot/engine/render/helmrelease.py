"""Read Flux HelmReleases into ReleaseSpecs and plan where each chart comes from, as helm-controller and
source-controller do.

A `ChartPlan` says which archive to fetch (the chart fetcher executes it); a `ChartUnavailable` says why
none can be (a Bucket, a source defined only on the cluster, another repository). Nothing here fetches.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import urlsplit

from bot.engine.render.flux import DEFAULT_NAMESPACE, HELM_RELEASE_GROUP
from bot.engine.core.model import Finding, Manifest, ObjectRef, Severity, SourceLocation, SourceRef, TierId, plural
from bot.engine.core.tree import normalise_repo_path

HELM_RELEASE_VERSIONS = ("v2", "v2beta2", "v2beta1")
SOURCE_GROUP = "source.toolkit.fluxcd.io"
CRD_POLICIES = ("Skip", "Create", "CreateReplace")
# helm-controller internal/release/name.go ShortenName: Helm's own limit on release names.
MAX_RELEASE_NAME = 53
_SHORT_HASH = 12
INVALID_CHECK = "helmrelease-invalid"
NOT_RENDERED_CHECK = "chart-not-rendered"

# (kind, namespace, name) → the rendered source object
Sources = Mapping[tuple[str, str, str], Manifest]


class ReleaseSpecError(ValueError):
    """A HelmRelease whose spec helm-controller (or the API server) would reject."""


@dataclass(frozen=True)
class ValuesReference:
    """One `spec.valuesFrom` entry (fluxcd/pkg apis/meta ValuesReference)."""

    kind: str  # ConfigMap | Secret
    name: str
    values_key: str = "values.yaml"
    target_path: str = ""
    optional: bool = False
    literal: bool = False  # with a target path: set as written, no `--set` syntax (helm --set-literal)


@dataclass(frozen=True)
class ChartPlan:
    """Where a release's chart archive comes from: what the chart fetcher fetches."""

    kind: str  # http | oci | git | git-remote
    source: SourceRef  # the source object (HelmRepository, OCIRepository, GitRepository)
    chart: str  # chart name (http, oci HelmRepository) or the chart's path in the source (git)
    url: str = ""  # repository URL; oci://host/path[/chart]; the Git URL for git-remote; "" for git
    reference: tuple[str, str] = ("semver", "*")  # (semver|tag|digest|branch|commit|name|none, value)
    values_files: tuple[str, ...] = ()
    secret_ref: str | None = None  # "namespace/name" of the source's spec.secretRef
    insecure: bool = False
    layer_media_type: str | None = None  # OCIRepository spec.layerSelector.mediaType
    via: str | None = None  # "HelmChart ns/name" when a chartRef names a HelmChart
    ignore_missing_values_files: bool = False  # a missing values file is skipped (source-controller v1.3)

    @property
    def host(self) -> str:
        """The registry or repository host (empty for a chart in this repository)."""
        try:
            return urlsplit(self.url).hostname or ""
        except ValueError:
            return ""

    @property
    def version(self) -> str:
        """The semver constraint, tag or digest that picks the chart version."""
        return self.reference[1]

    def cache_key(self) -> str:
        """A stable key of everything that decides the archive (for git, with the commit the caller adds).

        Credentials and `insecure` change how it is fetched, not what: they are left out.
        """
        parts = [self.kind, self.url, self.chart, *self.reference, self.layer_media_type or "", *self.values_files, self.ignore_missing_values_files]
        return hashlib.sha256(json.dumps(parts).encode()).hexdigest()

    def describe(self) -> str:
        """`chart podinfo 6.x from HelmRepository flux-system/podinfo`."""
        what = f"chart {self.chart}" if self.kind != "git" else f"chart at {self.chart or '.'}"
        kind, value = self.reference
        if kind == "semver" and value not in ("", "*"):
            what += f" {value}"
        elif kind in ("tag", "digest"):
            what += f" {value}" if kind == "tag" else f"@{value[:19]}"
        return f"{what} from {self.source.kind} {self.source.namespace}/{self.source.name}"


@dataclass(frozen=True)
class ChartUnavailable:
    """A chart that is not fetched, and why; grouped per source in `not_rendered_findings`."""

    reason: str
    source: SourceRef | None = None
    severity: Severity = Severity.INFO


@dataclass(frozen=True)
class ReleaseSpec:
    """The parts of a HelmRelease that decide what helm-controller installs, and where."""

    ref: ObjectRef
    release_name: str  # after ShortenName
    namespace: str  # targetNamespace, else the HelmRelease's
    storage_namespace: str
    chart: ChartPlan | ChartUnavailable
    values_from: tuple[ValuesReference, ...] = ()
    values: Mapping[str, Any] = field(default_factory=dict)
    install_crds: str = "Create"
    upgrade_crds: str = "Create"
    create_namespace: bool = False
    post_renderers: tuple[Mapping[str, Any], ...] = ()  # `kustomize` mappings (patches, images) as written
    depends_on: tuple[TierId, ...] = ()  # (namespace, name) of other HelmReleases
    test_enabled: bool = False
    disable_hooks: bool = False  # install.disableHooks
    suspend: bool = False
    origin: SourceLocation | None = None  # where the HelmRelease is written

    @property
    def id(self) -> TierId:
        """The HelmRelease's `namespace/name`."""
        return TierId(self.ref.namespace, self.ref.name)


def is_helm_release(manifest: Manifest) -> bool:
    """Whether an object is a Flux HelmRelease of a version we read."""
    return manifest.ref.kind == "HelmRelease" and manifest.ref.api_version in {
        f"{HELM_RELEASE_GROUP}/{v}" for v in HELM_RELEASE_VERSIONS
    }


def shorten_name(name: str) -> str:
    """A release name Helm accepts: past 53 characters, its first 40, `-`, and 12 hex of its sha256.

    helm-controller internal/release/name.go ShortenName, applied to GetReleaseName() by every action.
    """
    if len(name) <= MAX_RELEASE_NAME:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:_SHORT_HASH]
    return f"{name[: MAX_RELEASE_NAME - _SHORT_HASH - 1]}-{digest}"


def release_name(name: str, release_name_field: str = "", target_namespace: str = "") -> str:
    """`spec.releaseName`, else `[targetNamespace-]name`, shortened (helm-controller api/v2 GetReleaseName)."""
    if release_name_field:
        return shorten_name(release_name_field)
    return shorten_name(f"{target_namespace}-{name}" if target_namespace else name)


def parse_release(
    manifest: Manifest,
    sources: Sources | None = None,
    is_this_repo: Callable[[SourceRef], bool] = lambda _source: False,
) -> ReleaseSpec | Finding:
    """Interpret one HelmRelease and plan its chart; a malformed one gives a finding, never an exception."""
    namespace = manifest.ref.namespace or DEFAULT_NAMESPACE
    try:
        return _parse(manifest, namespace, sources or {}, is_this_repo)
    except (ReleaseSpecError, AttributeError, TypeError, ValueError, KeyError) as exc:
        kind = "unsafe-path" if isinstance(exc, _UnsafePath) else INVALID_CHECK
        message = str(exc) if isinstance(exc, ReleaseSpecError) else f"a field has the wrong type ({type(exc).__name__})"
        return Finding(
            kind,
            Severity.ERROR,
            f"HelmRelease {namespace}/{manifest.ref.name}: {message}",
            object=manifest.ref,
            location=manifest.origin,
        )


class _UnsafePath(ReleaseSpecError):
    """A chart path that climbs out of its source."""


def _map(value: Any, where: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ReleaseSpecError(f"{where} must be a mapping")
    return value


def _text(value: Any, where: str, default: str = "") -> str:
    if value is None or value == "":
        return default
    if not isinstance(value, str):  # the API server rejects a number or a mapping for a string field
        raise ReleaseSpecError(f"{where} must be a string")
    return str(value)


def _flag(value: Any, where: str) -> bool:
    if value is None:
        return False
    if not isinstance(value, bool):
        raise ReleaseSpecError(f"{where} must be true or false")
    return value


def _list(value: Any, where: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise ReleaseSpecError(f"{where} must be a list")
    return value


def _policy(value: Any, where: str, default: str) -> str:
    policy = _text(value, where, default)
    if policy not in CRD_POLICIES:
        # helm-controller internal/action/crds.go crdPolicyOrDefault refuses any other value.
        raise ReleaseSpecError(f"{where} {policy!r} is not one of {', '.join(CRD_POLICIES)}")
    return policy


def _parse(manifest: Manifest, namespace: str, sources: Sources, is_this_repo: Callable[[SourceRef], bool]) -> ReleaseSpec:
    if not is_helm_release(manifest):
        raise ReleaseSpecError(f"not a HelmRelease of {', '.join(HELM_RELEASE_VERSIONS)}")
    spec = _map(manifest.body.get("spec"), "spec")
    target = _text(spec.get("targetNamespace"), "spec.targetNamespace")
    install = _map(spec.get("install"), "spec.install")
    upgrade = _map(spec.get("upgrade"), "spec.upgrade")
    # v2beta1's deprecated `skipCRDs` counts only when `crds` is not set (helm-controller PR #261).
    install_default = "Skip" if _flag(install.get("skipCRDs"), "spec.install.skipCRDs") else "Create"
    values = spec.get("values")
    if values is not None and not isinstance(values, Mapping):
        raise ReleaseSpecError("spec.values must be a mapping")
    test = _map(spec.get("test"), "spec.test")
    return ReleaseSpec(
        ref=ObjectRef(manifest.ref.api_version, manifest.ref.kind, namespace, manifest.ref.name),
        release_name=release_name(manifest.ref.name, _text(spec.get("releaseName"), "spec.releaseName"), target),
        namespace=target or namespace,
        storage_namespace=_text(spec.get("storageNamespace"), "spec.storageNamespace") or namespace,
        chart=plan_chart(spec, namespace, sources, is_this_repo),
        values_from=tuple(_values_reference(raw, i) for i, raw in enumerate(_list(spec.get("valuesFrom"), "spec.valuesFrom"))),
        values=dict(values or {}),
        install_crds=_policy(install.get("crds"), "spec.install.crds", install_default),
        # The API documents Skip, but since Nov 2023 (commit 4c439b7, "action/upgrade: use correct CRD policy")
        # internal/action/upgrade.go passes upgrade.crds through crdPolicyOrDefault, whose default is Create.
        upgrade_crds=_policy(upgrade.get("crds"), "spec.upgrade.crds", "Create"),
        # internal/action/install.go newInstall: createNamespace counts only with a targetNamespace.
        create_namespace=bool(target) and _flag(install.get("createNamespace"), "spec.install.createNamespace"),
        post_renderers=tuple(
            _map(_map(raw, f"spec.postRenderers[{i}]").get("kustomize"), f"spec.postRenderers[{i}].kustomize")
            for i, raw in enumerate(_list(spec.get("postRenderers"), "spec.postRenderers"))
            if _map(raw, f"spec.postRenderers[{i}]").get("kustomize") is not None
        ),
        depends_on=tuple(_dependency(raw, i, namespace) for i, raw in enumerate(_list(spec.get("dependsOn"), "spec.dependsOn"))),
        test_enabled=_flag(test.get("enable"), "spec.test.enable"),
        disable_hooks=_flag(install.get("disableHooks"), "spec.install.disableHooks"),
        suspend=_flag(spec.get("suspend"), "spec.suspend"),
        origin=manifest.origin,
    )


def _values_reference(raw: Any, index: int) -> ValuesReference:
    where = f"spec.valuesFrom[{index}]"
    entry = _map(raw, where)
    kind = _text(entry.get("kind"), f"{where}.kind")
    name = _text(entry.get("name"), f"{where}.name")
    if kind not in ("ConfigMap", "Secret"):
        raise ReleaseSpecError(f"{where}.kind must be ConfigMap or Secret")
    if not name:
        raise ReleaseSpecError(f"{where}.name is required")
    return ValuesReference(
        kind,
        name,
        _text(entry.get("valuesKey"), f"{where}.valuesKey", "values.yaml"),
        _text(entry.get("targetPath"), f"{where}.targetPath"),
        _flag(entry.get("optional"), f"{where}.optional"),
        _flag(entry.get("literal"), f"{where}.literal"),
    )


def _dependency(raw: Any, index: int, namespace: str) -> TierId:
    entry = _map(raw, f"spec.dependsOn[{index}]")
    name = _text(entry.get("name"), f"spec.dependsOn[{index}].name")
    if not name:
        raise ReleaseSpecError(f"spec.dependsOn[{index}].name is required")
    return TierId(_text(entry.get("namespace"), f"spec.dependsOn[{index}].namespace") or namespace, name)


def _source_ref(raw: Any, where: str, namespace: str, *, cross_namespace: bool = True) -> SourceRef:
    ref = _map(raw, where)
    kind, name = _text(ref.get("kind"), f"{where}.kind"), _text(ref.get("name"), f"{where}.name")
    if not kind or not name:
        raise ReleaseSpecError(f"{where} needs kind and name")
    ns = _text(ref.get("namespace"), f"{where}.namespace") if cross_namespace else ""
    return SourceRef(kind, name, ns or namespace)


def plan_chart(
    spec: Mapping[str, Any], namespace: str, sources: Sources, is_this_repo: Callable[[SourceRef], bool]
) -> ChartPlan | ChartUnavailable:
    """Plan the chart of a HelmRelease spec: `spec.chart` (a HelmChart template) or `spec.chartRef`."""
    chart_ref, template = spec.get("chartRef"), spec.get("chart")
    if chart_ref is not None and template is not None:
        raise ReleaseSpecError("spec.chart and spec.chartRef are mutually exclusive")
    if chart_ref is not None:
        ref = _source_ref(chart_ref, "spec.chartRef", namespace)
        if ref.kind == "OCIRepository":
            return _from_oci_repository(ref, sources)
        if ref.kind == "HelmChart":
            found = _lookup(sources, ref)
            if isinstance(found, ChartUnavailable):
                return found
            chart_spec = _map(found.body.get("spec"), f"HelmChart {ref.namespace}/{ref.name} spec")
            # A HelmChart's sourceRef is local to its own namespace (source-controller LocalHelmChartSourceReference).
            plan = _from_chart_spec(chart_spec, ref.namespace, sources, is_this_repo, cross_namespace=False)
            return plan if isinstance(plan, ChartUnavailable) else _with_via(plan, ref)
        if ref.kind == "ExternalArtifact":
            return ChartUnavailable(
                f"ExternalArtifact {ref.namespace}/{ref.name} is produced by a controller at run time (not fetched)", ref
            )
        raise ReleaseSpecError(f"spec.chartRef.kind {ref.kind!r} is not OCIRepository, HelmChart or ExternalArtifact")
    if template is None:
        raise ReleaseSpecError("spec.chart or spec.chartRef is required")
    chart_spec = _map(_map(template, "spec.chart").get("spec"), "spec.chart.spec")
    return _from_chart_spec(chart_spec, namespace, sources, is_this_repo, cross_namespace=True)


def _with_via(plan: ChartPlan, ref: SourceRef) -> ChartPlan:
    return replace(plan, via=f"HelmChart {ref.namespace}/{ref.name}")


def _lookup(sources: Sources, ref: SourceRef) -> Manifest | ChartUnavailable:
    found = sources.get((ref.kind, ref.namespace, ref.name))
    if found is None:
        return ChartUnavailable(f"{ref.kind} {ref.namespace}/{ref.name} is not in the render (defined on the cluster only?)", ref)
    return found


def _secret_ref(source_spec: Mapping[str, Any], namespace: str, where: str) -> str | None:
    ref = _map(source_spec.get("secretRef"), f"{where}.secretRef")
    name = _text(ref.get("name"), f"{where}.secretRef.name")
    return f"{namespace}/{name}" if name else None


def _from_chart_spec(
    chart_spec: Mapping[str, Any],
    namespace: str,
    sources: Sources,
    is_this_repo: Callable[[SourceRef], bool],
    *,
    cross_namespace: bool,
) -> ChartPlan | ChartUnavailable:
    chart = _text(chart_spec.get("chart"), "chart.spec.chart")
    if not chart:
        raise ReleaseSpecError("chart.spec.chart is required")
    ref = _source_ref(chart_spec.get("sourceRef"), "chart.spec.sourceRef", namespace, cross_namespace=cross_namespace)
    # Empty means the latest (api/v2 HelmChartTemplateSpec `+kubebuilder:default:=*`).
    version = _text(chart_spec.get("version"), "chart.spec.version", "*")
    # v1beta2/v2beta1's deprecated `valuesFile` goes first (source-controller api/v1beta2 GetValuesFiles).
    values_files = [_text(v, "chart.spec.valuesFiles") for v in _list(chart_spec.get("valuesFiles"), "chart.spec.valuesFiles")]
    legacy = _text(chart_spec.get("valuesFile"), "chart.spec.valuesFile")
    values_files = ([legacy] if legacy else []) + values_files
    ignore_missing = _flag(chart_spec.get("ignoreMissingValuesFiles"), "chart.spec.ignoreMissingValuesFiles")
    if ref.kind == "Bucket":
        return ChartUnavailable("Bucket sources are not fetched", ref)
    if ref.kind not in ("HelmRepository", "GitRepository"):
        raise ReleaseSpecError(f"chart.spec.sourceRef.kind {ref.kind!r} is not HelmRepository, GitRepository or Bucket")
    if ref.kind == "GitRepository" and is_this_repo(ref):
        # The version is ignored for charts from a GitRepository (api/v2 HelmChartTemplateSpec.Version).
        path = normalise_repo_path(chart)
        if path is None:
            raise _UnsafePath(f"chart path {chart!r} climbs out of the repository")
        return ChartPlan("git", ref, path, reference=("none", ""), values_files=tuple(values_files), ignore_missing_values_files=ignore_missing)
    found = _lookup(sources, ref)
    if isinstance(found, ChartUnavailable):
        return found
    where = f"{ref.kind} {ref.namespace}/{ref.name}"
    source_spec = _map(found.body.get("spec"), f"{where} spec")
    url = _text(source_spec.get("url"), f"{where} spec.url")
    secret = _secret_ref(source_spec, ref.namespace, f"{where} spec")
    if ref.kind == "GitRepository":
        path = normalise_repo_path(chart)
        if path is None:
            raise _UnsafePath(f"chart path {chart!r} climbs out of {where}")
        return ChartPlan(
            "git-remote", ref, path, url, _git_reference(source_spec, where), tuple(values_files), secret, ignore_missing_values_files=ignore_missing
        )
    insecure = _flag(source_spec.get("insecure"), f"{where} spec.insecure")
    if _text(source_spec.get("type"), f"{where} spec.type") == "oci":
        # source-controller helmchart_controller.go buildFromHelmRepository: the chart is `<url>/<name>`.
        return ChartPlan(
            "oci", ref, chart, f"{url.rstrip('/')}/{chart}", ("semver", version), tuple(values_files), secret, insecure,
            ignore_missing_values_files=ignore_missing,
        )
    return ChartPlan("http", ref, chart, url, ("semver", version), tuple(values_files), secret, insecure, ignore_missing_values_files=ignore_missing)


def _git_reference(source_spec: Mapping[str, Any], where: str) -> tuple[str, str]:
    """The GitRepository ref that wins: commit > name > semver > tag > branch, else branch master (api/v1 GitRepositoryRef)."""
    ref = _map(source_spec.get("ref"), f"{where} spec.ref")
    for key in ("commit", "name", "semver", "tag", "branch"):
        value = _text(ref.get(key), f"{where} spec.ref.{key}")
        if value:
            return (key, value)
    return ("branch", "master")


def _from_oci_repository(ref: SourceRef, sources: Sources) -> ChartPlan | ChartUnavailable:
    found = _lookup(sources, ref)
    if isinstance(found, ChartUnavailable):
        return found
    where = f"OCIRepository {ref.namespace}/{ref.name}"
    spec = _map(found.body.get("spec"), f"{where} spec")
    url = _text(spec.get("url"), f"{where} spec.url")
    reference = _map(spec.get("ref"), f"{where} spec.ref")
    # source-controller ocirepository_controller.go getArtifactRef: digest, then semver, then tag, else `latest`.
    picked = ("tag", "latest")
    for key in ("tag", "semver", "digest"):
        value = _text(reference.get(key), f"{where} spec.ref.{key}")
        if value:
            picked = (key, value)
    layer = _map(spec.get("layerSelector"), f"{where} spec.layerSelector")
    return ChartPlan(
        "oci",
        ref,
        url.rstrip("/").rsplit("/", 1)[-1],
        url,
        picked,
        secret_ref=_secret_ref(spec, ref.namespace, f"{where} spec"),
        insecure=_flag(spec.get("insecure"), f"{where} spec.insecure"),
        layer_media_type=_text(layer.get("mediaType"), f"{where} spec.layerSelector.mediaType") or None,
    )


def not_rendered_findings(unavailable: Sequence[tuple[ReleaseSpec, str, bool]]) -> list[Finding]:
    """One `chart-not-rendered` finding per reason (an unreachable registry, a host not allowed, …), listing its
    sources and HelmReleases; those a change touches apart, as a warning. A home-lab whose 80 apps each have an
    OCIRepository on one registry reads one line, not 80."""
    groups: dict[tuple[str, bool], list[tuple[ReleaseSpec, str, bool]]] = {}
    for entry in unavailable:
        groups.setdefault((entry[1], entry[2]), []).append(entry)
    findings = []
    for (reason, touched), entries in sorted(groups.items()):
        severity = max((_severity(spec) for spec, _, _ in entries), key=lambda s: -s.rank)
        if touched and severity == Severity.INFO:
            severity = Severity.WARNING
        ids = sorted(str(spec.id) for spec, _, _ in entries)
        names = ", ".join(ids[:_LISTED]) + (f" and {len(ids) - _LISTED} more" if len(ids) > _LISTED else "")
        sources = sorted({_source_of(spec) for spec, _, _ in entries})
        where = sources[0] if len(sources) == 1 else f"{len(sources)} sources ({', '.join(sources[:3])}{', …' if len(sources) > 3 else ''})"
        changed = "(changed by this PR) " if touched else ""
        findings.append(
            Finding(
                NOT_RENDERED_CHECK,
                severity,
                f"{plural(len(entries), 'HelmRelease')} {changed}from {where} not rendered: {reason}; their CRDs come from the knowledge base ({names})",
                object=entries[0][0].ref if len(entries) == 1 else None,
                location=entries[0][0].origin if len(entries) == 1 else None,
            )
        )
    return findings


_LISTED = 10  # HelmReleases named in a not-rendered finding before "and N more"


def _source_of(spec: ReleaseSpec) -> str:
    source = spec.chart.source
    return f"{source.kind} {source.namespace}/{source.name}" if source else "an unknown source"


def _severity(spec: ReleaseSpec) -> Severity:
    return spec.chart.severity if isinstance(spec.chart, ChartUnavailable) else Severity.INFO
