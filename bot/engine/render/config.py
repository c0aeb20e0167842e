"""`.fluxwarden.yaml`: where each cluster starts, which source is this repo, the tier order file."""

from __future__ import annotations

import fnmatch
import hashlib
import json
import posixpath
import re
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Mapping

from bot.engine.core.errors import ConfigError, InputError
from bot.engine.render.flux import TierSpecError, is_flux_kustomization, operator_sync, tier_spec
from bot.engine.render.generate import KustomizationIndex
from bot.engine.render.helmvalues import DEFAULT_KUBE_VERSION
from bot.engine.core.model import Manifest, ObjectRef, SourceRef, SubstituteFrom, TierId
from bot.engine.core.tree import RepoTree
from bot.engine.core.tree import CONFIG_FILE, KUSTOMIZATION_FILES, normalise_repo_path
from bot.engine.render.yamlio import load_all, load_one

CLUSTERS_DIR = "clusters"


@dataclass(frozen=True)
class TierOrderConfig:
    """Where the bootstrap script keeps its tier order list."""

    file: str
    variable: str


@dataclass(frozen=True)
class BootstrapConfig:
    """`bootstrap:`: what is on the cluster before Flux's first reconcile that discovery cannot see."""

    helmreleases: tuple[str, ...] = ()  # `namespace/name` of HelmReleases in git installed before Flux
    crds: tuple[str, ...] = ()  # `group/Kind` of CRDs present before Flux
    manifests: tuple[str, ...] = ()  # repo paths applied before Flux
    namespaces: tuple[str, ...] = ()  # namespaces created before Flux (a script's `kubectl create namespace`)


DRIFT_FIELDS = ("dependsOn", "wait", "prune")


@dataclass(frozen=True)
class DriftIgnore:
    """One intended difference between clusters' graphs (`graph_drift.ignore` entry)."""

    tier: str  # `name` or `namespace/name`, shell-style globs allowed
    field: str | None = None  # dependsOn | wait | prune; None: every field
    depends_on: str | None = None  # with field dependsOn: only edges to this tier (same pattern rules)
    clusters: tuple[str, ...] = ()  # only when one of the compared clusters is listed; empty: any

    def covers(self, tier: TierId, field: str, clusters: tuple[str, str], depends_on: TierId | None = None) -> bool:
        """Whether this entry declares that difference intended."""
        if self.clusters and not set(clusters) & set(self.clusters):
            return False
        if self.field is not None and self.field != field:
            return False
        if not _matches(self.tier, tier):
            return False
        return self.depends_on is None or (depends_on is not None and _matches(self.depends_on, depends_on))


def _matches(pattern: str, tier: TierId) -> bool:
    return fnmatch.fnmatchcase(str(tier) if "/" in pattern else tier.name, pattern)


@dataclass(frozen=True)
class RepoConfig:
    """Settings read from the repository's `.fluxwarden.yaml` (all optional)."""

    clusters: Mapping[str, str] = field(default_factory=dict)  # name -> entry path
    sources: tuple[SourceRef, ...] = (SourceRef("GitRepository", "flux-system", "flux-system"),)
    tier_order: TierOrderConfig | None = None
    runtime_crds: tuple[Mapping[str, Any], ...] = ()
    strict_substitution: bool = False
    # cluster -> tiers (`name` or `namespace/name`) every change must find Ready there (live preconditions)
    required_tiers: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    graph_drift_ignore: tuple[DriftIgnore, ...] = ()  # differences between clusters that are meant
    bootstrap: BootstrapConfig = BootstrapConfig()  # declared presence before Flux (see bot/engine/tiergraph/bootstrap.py)
    # cluster -> the Kubernetes version its charts render against (`.Capabilities.KubeVersion`)
    kube_versions: Mapping[str, str] = field(default_factory=dict)
    # `charts: {aliases: {fork: known-chart}}`: a fork or mirror published under another name
    chart_aliases: tuple[tuple[str, str], ...] = ()
    # a source that is an artifact of this repository's SUBDIR (`source: {kind: OCIRepository, name: N, path: SUBDIR}`,
    # as flux-local's `--sources N=SUBDIR`): CI pushes it (`flux push artifact --path=./SUBDIR`)
    source_paths: tuple[tuple[SourceRef, str], ...] = ()
    # cluster -> what it substitutes into every Kustomization (`clusters.<name>.substitute_from: [ConfigMap/ns/name]`)
    cluster_substitutes: Mapping[str, tuple[SubstituteFrom, ...]] = field(default_factory=dict)
    # cluster -> repo files/directories of ConfigMaps and Secrets only that cluster has (`clusters.<name>.cluster_objects`)
    cluster_objects: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    # cluster -> the Flux version it runs (`clusters.<name>.flux_version`), over what the manifests say
    flux_versions: Mapping[str, str] = field(default_factory=dict)
    # `strict_substitution` as written; None: not set, so the cluster's Flux version decides (strict from 2.9)
    strict_setting: bool | None = None

    def kube_version(self, cluster: str) -> str:
        """The Kubernetes version `cluster`'s charts see: `clusters.<name>.kube_version`, else a recent release."""
        return self.kube_versions.get(cluster, DEFAULT_KUBE_VERSION)

    def is_this_repo(self, source: SourceRef) -> bool:
        """Whether a Kustomization's sourceRef is the repository being checked."""
        return source in self.sources

    def repo_path(self, source: SourceRef, path: str) -> str:
        """The repository path a source's `path` names: under SUBDIR for an artifact of this repository's SUBDIR."""
        subdir = next((sub for ref, sub in self.source_paths if ref == source), "")
        return posixpath.join(subdir, path) if subdir and path else subdir or path

    def source_root(self, source: SourceRef) -> str | None:
        """The repository directory at the root of a source's artifact; None when it is not this repository."""
        return self.repo_path(source, "") if self.is_this_repo(source) else None

    def digest(self) -> str:
        """A hash of every setting: cached results of a commit are keyed by it, since the
        configuration need not come from that commit (`--config`, the working tree's in a review)."""
        return hashlib.sha256(json.dumps(asdict(self), sort_keys=True, default=str).encode()).hexdigest()


def snapshot_config(snapshot: RepoTree) -> RepoConfig:
    """The configuration a snapshot carries (its `.fluxwarden.yaml`, read whatever `.sourceignore` says)."""
    return load_repo_config(snapshot.read_config())


def with_artifact_sources(config: RepoConfig, snapshot: RepoTree) -> RepoConfig:
    """`config` plus the OCIRepositories the repository shows to be artifacts of one of its subdirectories.

    Only when the configuration names neither clusters nor a source (it is the discovery's inference; a
    declared `source:`/`sources:` is the user's word).
    """
    if config.clusters or config.source_paths or config.sources != RepoConfig.sources:
        return config
    inferred = _discovery(config, snapshot).artifact_sources
    if not inferred:
        return config
    return replace(config, sources=(*config.sources, *(ref for ref, _ in inferred)), source_paths=inferred)



def load_repo_config(text: str | None) -> RepoConfig:
    """Parse `.fluxwarden.yaml`; a missing file gives the defaults."""
    if text is None:
        return RepoConfig()
    try:
        doc = load_one(text, CONFIG_FILE) or {}
    except InputError as exc:
        raise ConfigError(str(exc)) from None
    if not isinstance(doc, dict):
        raise ConfigError(f"{CONFIG_FILE} must be a mapping")
    unknown = set(doc) - {"clusters", "source", "sources", "tier_order", "runtime_crds", "strict_substitution", "graph_drift", "bootstrap", "charts"}
    if unknown:
        raise ConfigError(f"{CONFIG_FILE}: unknown key(s) {', '.join(sorted(unknown))}")
    return RepoConfig(
        clusters=_clusters(doc.get("clusters") or {}),
        sources=_sources(doc),
        tier_order=_tier_order(doc.get("tier_order")),
        runtime_crds=tuple(_list(doc, "runtime_crds")),
        strict_substitution=bool(doc.get("strict_substitution", False)),
        strict_setting=None if doc.get("strict_substitution") is None else bool(doc["strict_substitution"]),
        required_tiers=_required_tiers(doc.get("clusters") or {}),
        graph_drift_ignore=_graph_drift(doc.get("graph_drift")),
        bootstrap=_bootstrap(doc.get("bootstrap")),
        kube_versions=_kube_versions(doc.get("clusters") or {}),
        chart_aliases=_chart_aliases(doc.get("charts")),
        source_paths=_source_paths(doc),
        cluster_substitutes=_cluster_substitutes(doc.get("clusters") or {}),
        cluster_objects=_cluster_objects(doc.get("clusters") or {}),
        flux_versions=_flux_versions(doc.get("clusters") or {}),
    )


def _cluster_objects(raw: Any) -> dict[str, tuple[str, ...]]:
    """`clusters: {prod: {path: ..., cluster_objects: [clusters/prod/cluster-only.yaml]}}`: ConfigMaps and Secrets
    that only the cluster has (Terraform or an operator made them), declared so that substituteFrom finds them."""
    out = {}
    for name, spec in raw.items() if isinstance(raw, dict) else ():
        paths = spec.get("cluster_objects") if isinstance(spec, dict) else None
        if paths is None:
            continue
        if not isinstance(paths, list) or not all(isinstance(p, str) and p.strip() for p in paths):
            raise ConfigError(f"{CONFIG_FILE}: cluster {name!r} `cluster_objects` must be a list of repository paths (files or directories)")
        normal = []
        for path in paths:
            found = normalise_repo_path(path.strip())
            if found is None:
                raise ConfigError(f"{CONFIG_FILE}: cluster {name!r} `cluster_objects` path {path!r} climbs out of the repository")
            normal.append(found)
        out[str(name)] = tuple(normal)
    return out


def _flux_versions(raw: Any) -> dict[str, str]:
    """`clusters: {prod: {path: ..., flux_version: "2.3"}}`: the Flux release prod runs, where rules differ by version."""
    out = {}
    for name, spec in raw.items() if isinstance(raw, dict) else ():
        version = spec.get("flux_version") if isinstance(spec, dict) else None
        if version is None:
            continue
        text = str(version).strip()
        if not re.fullmatch(r"v?2\.\d{1,3}(?:\.\d{1,3})?", text):
            raise ConfigError(f"{CONFIG_FILE}: cluster {name!r} `flux_version` must look like 2.3 or v2.3.1 (got {text!r})")
        out[str(name)] = text.lstrip("v")
    return out


def _cluster_substitutes(raw: Any) -> dict[str, tuple[SubstituteFrom, ...]]:
    """`clusters: {main: {path: ..., substitute_from: [ConfigMap/flux-system/cluster-config]}}`: variables an admission
    webhook or the Flux Operator's cluster-wide substitution gives every Kustomization of the cluster."""
    out = {}
    for name, spec in raw.items() if isinstance(raw, dict) else ():
        entries = spec.get("substitute_from") if isinstance(spec, dict) else None
        if entries is None:
            continue
        sources = []
        for entry in entries if isinstance(entries, list) else [None]:
            parts = entry.split("/") if isinstance(entry, str) else []
            if len(parts) != 3 or parts[0] not in ("ConfigMap", "Secret") or not all(_NAME.fullmatch(p) for p in parts[1:]):
                raise ConfigError(f"{CONFIG_FILE}: cluster {name!r} `substitute_from` entries are Kind/namespace/name of a ConfigMap or Secret (got {entry!r})")
            sources.append(SubstituteFrom(parts[0], parts[2], namespace=parts[1]))
        out[str(name)] = tuple(sources)
    return out


def _chart_aliases(raw: Any) -> tuple[tuple[str, str], ...]:
    """`charts: {aliases: {volsync-perfectra1n: volsync}}`: each alias is judged as the chart it names."""
    if raw is None:
        return ()
    where = f"{CONFIG_FILE}: `charts`"
    if not isinstance(raw, dict) or set(raw) - {"aliases"}:
        raise ConfigError(f"{where} must be a mapping with `aliases`")
    aliases = raw.get("aliases") or {}
    if not isinstance(aliases, dict) or not all(isinstance(k, str) and isinstance(v, str) and k.strip() and v.strip() for k, v in aliases.items()):
        raise ConfigError(f"{where}.aliases must map chart names to known chart names (fork: chart)")
    return tuple(sorted((k.strip(), v.strip()) for k, v in aliases.items()))


def _list(doc: Mapping[str, Any], key: str) -> list[Any]:
    value = doc.get(key) or []
    if not isinstance(value, list):
        raise ConfigError(f"{CONFIG_FILE}: `{key}` must be a list")
    return value


def _clusters(raw: Any) -> dict[str, str]:
    if not isinstance(raw, dict):
        raise ConfigError(f"{CONFIG_FILE}: `clusters` must map a cluster name to {{path: DIR}}")
    out = {}
    for name, spec in raw.items():
        path = spec.get("path") if isinstance(spec, dict) else spec
        if not isinstance(path, str):
            raise ConfigError(f"{CONFIG_FILE}: cluster {name!r} needs `path: DIR`")
        normal = normalise_repo_path(path)
        if normal is None:
            raise ConfigError(f"{CONFIG_FILE}: cluster {name!r} path {path!r} climbs out of the repository")
        out[str(name)] = normal
    return out


def _required_tiers(raw: Any) -> dict[str, tuple[str, ...]]:
    """`clusters: {prod: {path: ..., required_tiers: [platform-config]}}`: tiers checked live on every change."""
    out = {}
    for name, spec in raw.items() if isinstance(raw, dict) else ():
        tiers = spec.get("required_tiers") if isinstance(spec, dict) else None
        if tiers is None:
            continue
        if not isinstance(tiers, list) or not all(isinstance(t, str) and t.strip() for t in tiers):
            raise ConfigError(f"{CONFIG_FILE}: cluster {name!r} `required_tiers` must be a list of tier names")
        out[str(name)] = tuple(t.strip() for t in tiers)
    return out


_KUBE_VERSION = re.compile(r"v?1\.\d{1,3}(?:\.\d{1,3})?")


def _kube_versions(raw: Any) -> dict[str, str]:
    """`clusters: {prod: {path: ..., kube_version: "1.31"}}`: the version prod's charts render against."""
    out = {}
    for name, spec in raw.items() if isinstance(raw, dict) else ():
        version = spec.get("kube_version") if isinstance(spec, dict) else None
        if version is None:
            continue
        text = str(version).strip()
        if not _KUBE_VERSION.fullmatch(text):
            raise ConfigError(f"{CONFIG_FILE}: cluster {name!r} `kube_version` must look like 1.31 or v1.31.2 (got {text!r})")
        text = text if text.startswith("v") else f"v{text}"
        out[str(name)] = text if text.count(".") == 2 else f"{text}.0"
    return out


def _graph_drift(raw: Any) -> tuple[DriftIgnore, ...]:
    """`graph_drift: {ignore: [{tier, field?, dependsOn?, clusters?}]}`: differences that are meant."""
    if raw is None:
        return ()
    where = f"{CONFIG_FILE}: `graph_drift`"
    if not isinstance(raw, dict) or set(raw) - {"ignore"}:
        raise ConfigError(f"{where} must be a mapping with one key, `ignore`")
    entries = raw.get("ignore") or []
    if not isinstance(entries, list):
        raise ConfigError(f"{where}.ignore must be a list")
    out = []
    for entry in entries:
        if not isinstance(entry, dict) or set(entry) - {"tier", "field", "dependsOn", "clusters"}:
            raise ConfigError(f"{where}.ignore: each entry is a mapping of `tier` and optional `field`, `dependsOn`, `clusters`")
        tier, fld, dep, clusters = entry.get("tier"), entry.get("field"), entry.get("dependsOn"), entry.get("clusters") or []
        if not isinstance(tier, str) or not tier.strip():
            raise ConfigError(f"{where}.ignore: each entry needs `tier` (a name or namespace/name; globs allowed)")
        if fld is not None and fld not in DRIFT_FIELDS:
            raise ConfigError(f"{where}.ignore: `field` is one of {', '.join(DRIFT_FIELDS)} (got {fld!r})")
        if dep is not None and (not isinstance(dep, str) or not dep.strip() or fld not in (None, "dependsOn")):
            raise ConfigError(f"{where}.ignore: `dependsOn` names one tier (and implies field dependsOn)")
        if not isinstance(clusters, list) or not all(isinstance(c, str) for c in clusters):
            raise ConfigError(f"{where}.ignore: `clusters` must be a list of cluster names")
        out.append(DriftIgnore(tier.strip(), "dependsOn" if dep is not None else fld, dep.strip() if dep else None, tuple(clusters)))
    return tuple(out)


_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?")


def _bootstrap(raw: Any) -> BootstrapConfig:
    """`bootstrap: {helmreleases: [ns/name], crds: [group/Kind], manifests: [path], namespaces: [name]}`."""
    if raw is None:
        return BootstrapConfig()
    where = f"{CONFIG_FILE}: `bootstrap`"
    if not isinstance(raw, dict) or set(raw) - {"helmreleases", "crds", "manifests", "namespaces"}:
        raise ConfigError(f"{where} must be a mapping of `helmreleases`, `crds`, `manifests` and `namespaces` (lists)")
    lists = {}
    for key in ("helmreleases", "crds", "manifests", "namespaces"):
        value = raw.get(key) or []
        if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
            raise ConfigError(f"{where}.{key} must be a list of strings")
        lists[key] = [v.strip() for v in value]
    for ref in lists["helmreleases"]:
        namespace, _, name = ref.partition("/")
        if not (_NAME.fullmatch(namespace) and _NAME.fullmatch(name)):
            raise ConfigError(f"{where}.helmreleases: {ref!r} is not `namespace/name` of a HelmRelease")
    for ref in lists["crds"]:
        group, _, kind = ref.rpartition("/")
        if not group or "." not in group or "/" in group or not re.fullmatch(r"[A-Za-z][A-Za-z0-9]*", kind):
            raise ConfigError(f"{where}.crds: {ref!r} is not `group/Kind` (e.g. cert-manager.io/ClusterIssuer)")
    manifests = []
    for path in lists["manifests"]:
        normal = normalise_repo_path(path)
        if normal is None:
            raise ConfigError(f"{where}.manifests: {path!r} climbs out of the repository")
        manifests.append(normal)
    for namespace in lists["namespaces"]:
        if not re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", namespace):
            raise ConfigError(f"{where}.namespaces: {namespace!r} is not a namespace name")
    return BootstrapConfig(tuple(lists["helmreleases"]), tuple(lists["crds"]), tuple(manifests), tuple(lists["namespaces"]))


def _sources(doc: Mapping[str, Any]) -> tuple[SourceRef, ...]:
    raw = doc.get("sources") or ([doc["source"]] if doc.get("source") else None)
    if not raw:
        return RepoConfig.sources
    out = []
    for entry in raw:
        if not isinstance(entry, dict) or not entry.get("name"):
            raise ConfigError(f"{CONFIG_FILE}: each source needs `name` (and optional `kind`, `namespace`)")
        out.append(SourceRef(entry.get("kind", "GitRepository"), entry["name"], entry.get("namespace", "flux-system")))
    return tuple(out)


def _source_paths(doc: Mapping[str, Any]) -> tuple[tuple[SourceRef, str], ...]:
    """The `path:` of each configured source that is an artifact of a subdirectory of this repository."""
    out = []
    for entry, ref in zip(doc.get("sources") or ([doc["source"]] if doc.get("source") else []), _sources(doc)):
        path = entry.get("path") if isinstance(entry, dict) else None
        if path is None:
            continue
        normal = normalise_repo_path(str(path))
        if normal is None:
            raise ConfigError(f"{CONFIG_FILE}: source {ref.name!r} path {path!r} climbs out of the repository")
        if normal:
            out.append((ref, normal))
    return tuple(out)


def _tier_order(raw: Any) -> TierOrderConfig | None:
    if raw is None:
        return None
    if not isinstance(raw, dict) or not isinstance(raw.get("file"), str) or not isinstance(raw.get("variable"), str):
        raise ConfigError(f"{CONFIG_FILE}: `tier_order` needs `file` and `variable`")
    path = normalise_repo_path(raw["file"])
    if path is None:
        raise ConfigError(f"{CONFIG_FILE}: tier_order file {raw['file']!r} climbs out of the repository")
    return TierOrderConfig(file=path, variable=raw["variable"])


def cluster_entry(config: RepoConfig, name: str, snapshot: RepoTree) -> str:
    """The entry path of a cluster: from config, else as discovered (see `known_clusters`), else `clusters/<name>`."""
    if name in config.clusters:
        return config.clusters[name]
    if config.clusters:  # named in the configuration: no guess at another folder (a spoke renders false errors)
        raise ConfigError(f"unknown cluster {name!r} (known: {', '.join(sorted(config.clusters))}): the configuration names every cluster")
    discovery = _discovery(config, snapshot) if not config.clusters else None
    if discovery is not None and name in discovery.clusters:
        return discovery.clusters[name]
    if "/" not in name and name not in ("", ".", "..") and snapshot.is_dir(f"{CLUSTERS_DIR}/{name}"):
        if discovery is not None and (applied_by := discovery.spokes.get(f"{CLUSTERS_DIR}/{name}")):
            known = ", ".join(sorted(discovery.clusters)) or "none found"
            raise ConfigError(f"{CLUSTERS_DIR}/{name} is not a cluster entry: {applied_by} (known clusters: {known})")
        return f"{CLUSTERS_DIR}/{name}"
    known = ", ".join(sorted(known_clusters(config, snapshot))) or "none found"
    raise ConfigError(f"unknown cluster {name!r} (known: {known})")


def known_clusters(config: RepoConfig, snapshot: RepoTree) -> dict[str, str]:
    """Every cluster of the repo: the configured ones, else the entries found in it.

    Found: each `clusters/<name>` that no sibling includes and no Kustomization outside it applies
    (a hub's spoke); the path of a FluxInstance's `sync` (an object, a flux-instance HelmRelease, or
    the chart's values file); a Kustomization that applies the directory it is written in (gotk-sync);
    a directory holding `flux-system/gotk-sync.yaml` (`flux bootstrap`'s layout); else a `…/flux/cluster`
    directory. Named `<name>` for `…/clusters/<name>`, `default` for the only entry of the repository,
    else after the path's telling parts (`kubernetes/main/flux/cluster` → `main`).
    """
    if config.clusters:
        return dict(config.clusters)
    return dict(_discovery(config, snapshot).clusters)


@dataclass(frozen=True)
class ClusterEntry:
    """One cluster of a repository: its name, its entry path and how it was found."""

    name: str
    path: str
    how: str


def cluster_entries(config: RepoConfig, snapshot: RepoTree) -> list[ClusterEntry]:
    """`known_clusters`, each with how it was found (`fluxwarden clusters`), sorted by name."""
    if config.clusters:
        return [ClusterEntry(n, p, f"configured in {CONFIG_FILE}") for n, p in sorted(config.clusters.items())]
    found = _discovery(config, snapshot)
    return [ClusterEntry(n, p, found.how.get(p, "found")) for n, p in sorted(found.clusters.items())]


@dataclass(frozen=True)
class _Discovery:
    """The cluster entries found in a repository, and the `clusters/<x>` folders that are another cluster's spokes."""

    clusters: Mapping[str, str]  # name -> entry path
    spokes: Mapping[str, str]  # clusters/<x> -> what applies it
    how: Mapping[str, str] = field(default_factory=dict)  # entry path -> how it was found
    # OCIRepositories inferred to be artifacts of a subdirectory of this repository (see `_artifact_sources`)
    artifact_sources: tuple[tuple[SourceRef, str], ...] = ()


@dataclass(frozen=True)
class _FoundKustomization:
    file: str
    name: str
    path: str  # repository path (under the source's subdirectory for an artifact of one)
    kube_config: str | None
    source: SourceRef | None = None


_MAX_SCANNED_FILES = 50_000
_GENERIC_PARTS = frozenset({"kubernetes", "k8s", "kube", "flux", "flux-system", "cluster", "clusters", "gitops", "deploy"})


def _discovery(config: RepoConfig, snapshot: RepoTree) -> _Discovery:
    """What `known_clusters` finds, read once per snapshot (in its memo, which goes with it)."""
    key = ("cluster-discovery", config.sources, config.source_paths)
    found = snapshot.memo.get(key)
    if not isinstance(found, _Discovery):
        found = snapshot.memo[key] = _discover(config, snapshot)
    return found


def _discover(config: RepoConfig, snapshot: RepoTree) -> _Discovery:
    scanned, syncs, bootstrap_dirs, flux_cluster_dirs = _scan(snapshot)
    inferred = () if config.source_paths or config.sources != RepoConfig.sources else (
        *_self_sources(scanned, snapshot, config), *_artifact_sources(scanned, syncs, snapshot)
    )
    if inferred:
        config = replace(config, sources=(*config.sources, *(ref for ref, _ in inferred)), source_paths=inferred)
    kustomizations = [
        replace(k, path=config.repo_path(k.source, k.path)) for k in scanned if k.source is not None and config.is_this_repo(k.source)
    ]
    sync_paths = [config.repo_path(k.source, k.path) for k in syncs if k.source is not None and config.is_this_repo(k.source)]
    dirs = snapshot.list_dir(CLUSTERS_DIR)[0]  # sorted; symlinked directories left out
    included: set[str] = set()
    for name in dirs:
        for kfile in KUSTOMIZATION_FILES:
            text = snapshot.read_text(f"{CLUSTERS_DIR}/{name}/{kfile}")
            if text is not None:
                included.update(d for d in dirs if d != name and f"../{d}" in text)
    spokes: dict[str, str] = {}
    for name in dirs:
        folder = f"{CLUSTERS_DIR}/{name}"
        for k in kustomizations:
            if _within(k.path, folder) and not _within(k.file, folder):
                target = f" to the cluster of {k.kube_config}" if k.kube_config else ""
                spokes[folder] = f"Kustomization {k.name} in {k.file} applies {k.path}{target}"
                break
    # Written sync objects name an entry even inside a folder that looks like a spoke.
    # A Kustomization that applies itself is a root unless another one applies its directory (an app that lists its own ks.yaml).
    roots = [
        k.path for k in kustomizations
        if not any(o.file != k.file and _within(k.file, o.path) for o in kustomizations) and _applies_itself(k, snapshot)
    ]
    # inferred, or declared (`source: {kind: OCIRepository, name: N, path: SUBDIR}`); the root's has a sync in git
    artifacts = tuple((ref, sub) for ref, sub in config.source_paths if sub)
    artifact_roots = _artifact_roots(kustomizations, {ref for ref, _ in artifacts}, sync_paths)
    found = [*sync_paths, *roots, *artifact_roots, *bootstrap_dirs]
    entries = [f"{CLUSTERS_DIR}/{d}" for d in dirs if d not in included and f"{CLUSTERS_DIR}/{d}" not in spokes]
    how = dict.fromkeys(entries, f"a folder of {CLUSTERS_DIR}/ that no other includes or applies")
    entries += [p for p in dict.fromkeys(found) if snapshot.is_dir(p) and p not in entries]
    entries = [p for p in entries if not _scaffold(p, kustomizations)]
    for path in sync_paths:  # the first reason wins, in the order of `found`
        how.setdefault(path, "the sync path of a FluxInstance")
    for k in kustomizations:
        if k.path in roots:
            how.setdefault(k.path, f"Kustomization {k.name} in {k.file} applies its own directory (a sync)")
    for path in artifact_roots:
        ref, subdir = next((ref, sub) for ref, sub in artifacts if _within(path, sub))
        how.setdefault(path, f"its Kustomizations on OCIRepository {ref.name} (an artifact pushed from {subdir}/) are applied by none in git")
    for path in bootstrap_dirs:
        how.setdefault(path, "holds flux-system/gotk-sync.yaml (flux bootstrap's layout)")
    if not entries:
        entries = flux_cluster_dirs[:1]
        how.update(dict.fromkeys(entries, "a …/flux/cluster directory (no other entry found)"))
    names: dict[str, str] = {}
    for path in entries:
        parts = path.split("/") if path else []
        if len(parts) >= 2 and parts[-2] == CLUSTERS_DIR:
            name = parts[-1]
        elif len(entries) == 1:
            name = "default"
        else:
            name = "-".join(p for p in parts if p not in _GENERIC_PARTS) or "default"
        if name in names:
            name = path.replace("/", "-") or "root"
        base, n = name, 2
        while name in names:
            name, n = f"{base}-{n}", n + 1
        names[name] = path
    return _Discovery(names, spokes, {p: how.get(p) or "found" for p in entries}, inferred)


def _self_sources(scanned: list[_FoundKustomization], snapshot: RepoTree, config: RepoConfig) -> tuple[tuple[SourceRef, str], ...]:
    """GitRepositories that are this repository although not named `flux-system`: one whose Kustomization's
    build includes the file that defines it (a sync applying its own directory, as toboshii/home-ops'
    `flux-cluster` GitRepository and Kustomization on `./cluster/flux`, applied by `kubectl apply -k`)."""
    out: list[tuple[SourceRef, str]] = []
    for k in scanned:
        if k.source is None or k.source.kind != "GitRepository" or config.is_this_repo(k.source) or any(ref == k.source for ref, _ in out):
            continue
        if k.path and snapshot.is_dir(k.path) and _applies_itself(k, snapshot):
            out.append((k.source, ""))
    return tuple(out)


def _artifact_sources(
    scanned: list[_FoundKustomization], syncs: list[_FoundKustomization], snapshot: RepoTree,
) -> tuple[tuple[SourceRef, str], ...]:
    """OCIRepositories that are artifacts of this repository: of its root, or of one subdirectory.

    - The root: a FluxInstance in git syncs an OCIRepository at a path this repository has (CI pushes the
      repository, `flux push artifact --path=./`, as controlplaneio-fluxcd/d2-fleet does).
    - A subdirectory: every path of the OCIRepository's Kustomizations exists under exactly one subdirectory
      and none at the root. CI pushes that directory (`flux push artifact --path=./k8s`, then `flux create
      source oci flux-system` and `flux create kustomization --source=OCIRepository/flux-system`, as
      devantler/homelab does): paths inside the artifact are relative to it.
    Judged from the repository, whatever CI pushes it; flux-local needs `--sources NAME=SUBDIR` for this.
    """
    out: list[tuple[SourceRef, str]] = []
    for sync in syncs:
        if sync.source is not None and sync.source.kind == "OCIRepository" and sync.path and snapshot.is_dir(sync.path):
            if all(ref != sync.source for ref, _ in out):
                out.append((sync.source, ""))
    by_source: dict[SourceRef, list[_FoundKustomization]] = {}
    for k in scanned:
        if k.source is not None and k.source.kind == "OCIRepository" and k.path and all(ref != k.source for ref, _ in out):
            by_source.setdefault(k.source, []).append(k)
    for ref, found in sorted(by_source.items(), key=lambda item: (item[0].namespace, item[0].name)):
        paths = {k.path for k in found}
        if any(snapshot.is_dir(p) for p in paths):
            continue  # a path of the repository root: not an artifact of a subdirectory (or another artifact)
        prefixes: dict[str, None] = {}
        for k in found:
            parts = posixpath.dirname(k.file).split("/")
            prefixes.update(dict.fromkeys("/".join(parts[:i]) for i in range(1, len(parts) + 1)))
        fits = [p for p in prefixes if all(snapshot.is_dir(posixpath.join(p, path)) for path in paths)]
        if len(fits) == 1:  # more than one: which directory CI pushes is not ours to guess
            out.append((ref, fits[0]))
    return tuple(out)


def _artifact_roots(kustomizations: list[_FoundKustomization], sources: set[SourceRef], sync_paths: list[str]) -> list[str]:
    """The directories holding a subdirectory artifact's Kustomizations that nothing in git applies: the entry
    that `flux create kustomization` (outside git) points at."""
    roots = []
    for k in kustomizations:
        applied = any(_within(k.file, o.path) for o in kustomizations if o is not k) or any(_within(k.file, p) for p in sync_paths)
        if k.source in sources and not applied:
            roots.append(posixpath.dirname(k.file))
    return list(dict.fromkeys(roots))


# A template's placeholders: `${CLUSTER}` (envsubst, flux-local), `<cluster-name>` (docs), `{{ .cluster }}` (Go templates).
_PLACEHOLDER = re.compile(r"\$\{[^}]*\}|<[A-Za-z][\w .-]*>|\{\{[^}]*\}\}")


def _scaffold(path: str, kustomizations: list[_FoundKustomization]) -> bool:
    """A folder of placeholders to copy (`clusters/${CLUSTER}`, or whose Kustomizations all apply `./clusters/<name>/…`): no cluster."""
    if _PLACEHOLDER.search(path):
        return True
    own = [k for k in kustomizations if _within(k.file, path)]
    return bool(own) and all(_PLACEHOLDER.search(k.path) for k in own)


def _applies_itself(kustomization: _FoundKustomization, snapshot: RepoTree) -> bool:
    """Whether a Kustomization's build includes the file that defines it (gotk-sync): a cluster's root.

    An app's `ks.yaml` next to the files it applies is not one: its directory's kustomization leaves it out.
    """
    if not _within(kustomization.file, kustomization.path):
        return False
    return kustomization.file in KustomizationIndex(snapshot).reach(kustomization.path, aliases=False)[1]


def _within(path: str, directory: str) -> bool:
    return directory == "" or path == directory or path.startswith(directory + "/")


def _scan(snapshot: RepoTree) -> tuple[list[_FoundKustomization], list[_FoundKustomization], list[str], list[str]]:
    """Every YAML file of the repository, read for Flux Kustomizations and FluxInstance syncs (on any source)
    and bootstrap directories (text-filtered first: only a few files are parsed)."""
    kustomizations: list[_FoundKustomization] = []
    syncs: list[_FoundKustomization] = []
    bootstrap_dirs: list[str] = []
    flux_cluster_dirs: list[str] = []
    stack = [""]
    seen = 0
    while stack and seen < _MAX_SCANNED_FILES:
        directory = stack.pop()
        subdirs, names = snapshot.list_dir(directory)
        stack.extend(posixpath.join(directory, d) if directory else d for d in reversed(subdirs))
        if posixpath.basename(directory) == "cluster" and posixpath.basename(posixpath.dirname(directory)) == "flux":
            flux_cluster_dirs.append(directory)
        if posixpath.basename(directory) == "flux-system" and "gotk-sync.yaml" in names:
            bootstrap_dirs.append(posixpath.dirname(directory))
        for name in names:
            if not name.endswith((".yaml", ".yml")):
                continue
            seen += 1
            rel = posixpath.join(directory, name) if directory else name
            text = snapshot.read_text(rel) or ""
            if "kustomize.toolkit.fluxcd.io" not in text and "sync:" not in text:
                continue
            try:
                docs = load_all(text, rel)
            except InputError:
                continue
            for doc in docs:
                if isinstance(doc, dict):
                    _read_doc(rel, doc, kustomizations, syncs)
    return kustomizations, syncs, bootstrap_dirs, sorted(flux_cluster_dirs)


def _read_doc(rel: str, doc: dict, kustomizations: list[_FoundKustomization], syncs: list[_FoundKustomization]) -> None:
    """One YAML document of the scan: a Flux Kustomization, or a FluxInstance's sync (an object, a HelmRelease
    of the flux-instance chart, or the chart's values file)."""
    meta = found if isinstance(found := doc.get("metadata"), dict) else {}
    api_version, kind = str(doc.get("apiVersion") or ""), str(doc.get("kind") or "")
    namespace = str(meta.get("namespace") or "flux-system")
    if "kind" not in doc and isinstance(doc.get("instance"), dict):  # the chart's values, read by a helmfile or valuesFrom
        doc = {"apiVersion": "helm.toolkit.fluxcd.io/v2", "kind": "HelmRelease", "metadata": {"name": "values"}, "spec": {"values": doc}}
        api_version, kind = doc["apiVersion"], doc["kind"]
    ref = ObjectRef(api_version, kind, namespace, str(meta.get("name") or ""))
    manifest = Manifest(ref, doc)
    if is_flux_kustomization(manifest):
        try:
            spec = tier_spec(manifest, None)
        except TierSpecError:
            return
        kustomizations.append(_FoundKustomization(rel, str(spec.id), spec.path, spec.kube_config, spec.source))
        return
    sync = operator_sync(manifest)
    if sync is None:
        return
    try:
        spec = tier_spec(Manifest(ref, sync.kustomization), None)
    except TierSpecError:
        return
    syncs.append(_FoundKustomization(rel, str(spec.id), spec.path, None, spec.source))
