"""Build a `ClusterRender` and a `CheckContext` from in-memory manifests: no kustomize, no pipeline, no disk.

A repository is a mapping of repo paths to text (as tests/fluxrepo.py writes them). Each tier's build is
the objects of the files its `kustomization.yaml` lists under `resources`, in kustomize's legacy output
order, with kustomize's origin annotation; anything else a build would need kustomize for (patches,
images, a name prefix or suffix, a target namespace, components, generators, directories as resources,
a path with no kustomization file) raises `NeedsKustomize`: such a case belongs to the end-to-end tests.

From there the engine's own rules run as the pipeline runs them: the renderer's own pass over the cluster
(bot/engine/render/clusterpass.py: substitution, ResourceSets, discovery, render limits, the entry's own spec), the
facts, the providers, the bootstrap, the checks and `cluster_findings`. tests/pipeline/test_checks_e2e.py shows that a render made here and
one made through kustomize agree.
"""

from __future__ import annotations

import hashlib
import posixpath
import textwrap
from typing import Any, Callable, Hashable, Iterable, Mapping

import yaml

from bot.engine.tiergraph.bootstrap import Bootstrap, discover_bootstrap
from bot.engine.tiergraph.checks import CheckContext
from bot.engine.render.clusterpass import ClusterPass, PassResult, cluster_settings, settle_entry
from bot.engine.render.config import RepoConfig, cluster_entry, known_clusters, snapshot_config, with_artifact_sources
from bot.engine.render.discovery import RenderLimits
from bot.engine.render.facts import ObjectStub, TierFacts, tier_facts
from bot.engine.render.finish import parse_output
from bot.engine.render.flux import OperatorSync, entry_tier
from bot.engine.tiergraph.graph import TierGraph
from bot.engine.render.knowledge import KnowledgeBase, default_knowledge
from bot.engine.core.model import Finding, Manifest, SourceLocation, TierId, TierSpec
from bot.engine.tiergraph.providers import ProviderIndex
from bot.engine.render.rendered import ORIGIN_ANNOTATION, ClusterRender, DocumentIndex, RawTier, RenderedRelease, render_failed
from bot.engine.reporting.report import CheckReport
from bot.engine.core.tree import KUSTOMIZATION_FILES, RefusedPath, blob_id, normalise_repo_path
from bot.engine.reporting.verdict import build_report, cluster_findings
from bot.engine.render.yamlio import FastSafeLoader, document_heads

Files = Mapping[str, str]


class NeedsKustomize(AssertionError):
    """The case asks for something only a real kustomize build gives: test it end to end."""


# kustomize's legacy output order (kustomize api/resid/gvk.go `orderFirst`, `orderLast`): these kinds first,
# in this order, then every other kind, then webhooks; within a kind by apiVersion, namespace and name.
_ORDER_FIRST = (
    "Namespace", "ResourceQuota", "StorageClass", "CustomResourceDefinition", "ServiceAccount", "PodSecurityPolicy", "Role",
    "ClusterRole", "RoleBinding", "ClusterRoleBinding", "ConfigMap", "Secret", "Endpoints", "Service", "LimitRange",
    "PriorityClass", "PersistentVolume", "PersistentVolumeClaim", "Deployment", "StatefulSet", "CronJob", "PodDisruptionBudget",
)
_ORDER_LAST = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
_KUSTOMIZE_KEYS = {"apiVersion", "kind", "resources"}
_SPEC_FIELDS_FOR_KUSTOMIZE = ("patches", "images", "name_prefix", "name_suffix", "target_namespace", "components")


class MemoryTree:
    """A repository held in memory (implements engine/core/tree.RepoTree): no symlinks, nothing refused."""

    def __init__(self, files: Files) -> None:
        self.files = {path: textwrap.dedent(text).lstrip("\n") for path, text in files.items()}
        self.dirs: set[str] = {""}
        for path in self.files:
            while (path := posixpath.dirname(path)) and path not in self.dirs:
                self.dirs.add(path)
        self._identity = hashlib.sha256(repr(sorted(self.files.items())).encode()).hexdigest()
        self.memo: dict[Hashable, Any] = {}

    refused: tuple[RefusedPath, ...] = ()
    has_symlinks = False

    @property
    def identity(self) -> str:
        return self._identity

    def read_config(self) -> str | None:
        return self.files.get(".fluxwarden.yaml")

    def read_bytes(self, rel: str) -> bytes | None:
        text = self.files.get(rel)
        return text.encode() if text is not None else None

    def read_text(self, rel: str) -> str | None:
        return self.files.get(rel)

    def is_dir(self, rel: str) -> bool:
        return rel in self.dirs

    def is_file(self, rel: str) -> bool:
        return rel in self.files

    def exists(self, rel: str) -> bool:
        return rel in self.files or rel in self.dirs

    def list_dir(self, rel: str) -> tuple[list[str], list[str]]:
        prefix = f"{rel}/" if rel else ""
        subdirs = sorted({d[len(prefix):] for d in self.dirs if d and d.startswith(prefix) and "/" not in d[len(prefix):]})
        names = sorted({f[len(prefix):] for f in self.files if f.startswith(prefix) and "/" not in f[len(prefix):]})
        return subdirs, names

    def has_kustomization(self, rel: str) -> bool:
        return any(posixpath.join(rel, name) in self.files for name in KUSTOMIZATION_FILES)

    def file_digest(self, rel: str) -> str | None:
        data = self.read_bytes(rel)
        return blob_id(data) if data is not None else None

    def entries(self, rel: str) -> list[str]:
        subdirs, names = self.list_dir(rel)
        return sorted(subdirs + names)

    def real_path(self, rel: str) -> str | None:
        return normalise_repo_path(rel)

    def bootstrap_view(self) -> "MemoryTree":
        return self  # nothing is ignored in memory


def locate(tree: MemoryTree) -> Callable[[Manifest | ObjectStub], SourceLocation | None]:
    """The `file:line` of an object's document, found as bot/pipeline/build.py `Locator` finds it."""

    def located(manifest: Manifest | ObjectStub) -> SourceLocation | None:
        origin = manifest.origin
        if origin is None or origin.line is not None:
            return origin
        heads = list(document_heads(tree.read_text(origin.file) or ""))
        exact: dict[tuple[str, ...], int] = {}
        for head in heads:
            exact.setdefault((head.kind, head.name, head.namespace), head.line)
            exact.setdefault((head.kind, head.name), head.line)
        ref = manifest.ref
        line = exact.get((ref.kind, ref.name, ref.namespace)) or exact.get((ref.kind, ref.name, "")) or exact.get((ref.kind, ref.name))
        if line is not None:
            return SourceLocation(origin.file, line)
        return origin

    return located


def build(tree: MemoryTree, spec: TierSpec) -> RawTier:
    """A tier's build as kustomize would print it for a kustomization that only lists files (see the module doc)."""
    unsupported = [name for name in _SPEC_FIELDS_FOR_KUSTOMIZE if getattr(spec, name)]
    if unsupported:
        raise NeedsKustomize(f"{spec.id} sets {', '.join(unsupported)}")
    root = tree.real_path(spec.path)
    if root is None or not tree.is_dir(root):
        return RawTier(spec, failed=True, findings=(render_failed(spec.id, f"path {spec.path or '.'!r} not found in the repository", spec.origin),))
    kfile = next((posixpath.join(root, n) for n in KUSTOMIZATION_FILES if tree.is_file(posixpath.join(root, n))), None)
    if kfile is None:
        raise NeedsKustomize(f"{root} has no kustomization file (Flux generates one)")
    doc = yaml.safe_load(tree.read_text(kfile) or "") or {}
    if set(doc) - _KUSTOMIZE_KEYS:
        raise NeedsKustomize(f"{kfile} uses {', '.join(sorted(set(doc) - _KUSTOMIZE_KEYS))}")
    inputs = {root, kfile}
    bodies: list[tuple[str, Mapping[str, Any]]] = []
    for resource in doc.get("resources") or []:
        path = normalise_repo_path(posixpath.join(root, resource))
        if path is None or tree.is_dir(path):
            raise NeedsKustomize(f"{kfile} lists {resource!r}, not a file in the tier")
        text = tree.read_text(path)
        if text is None:
            message = f"accumulating resources: {resource} not found (as kustomize fails)"
            return RawTier(spec, inputs=frozenset(inputs), failed=True, findings=(render_failed(spec.id, message, spec.origin),))
        inputs.add(path)
        try:
            loaded = [b for b in yaml.safe_load_all(text) if b is not None]
        except yaml.YAMLError as exc:
            message = f"{resource}: not valid YAML ({exc.__class__.__name__}, as kustomize fails)"
            return RawTier(spec, inputs=frozenset(inputs), failed=True, findings=(render_failed(spec.id, message, spec.origin),))
        bodies += [(posixpath.relpath(path, root or "."), b) for b in loaded]
    bodies.sort(key=lambda pair: _legacy_order(pair[1]))
    text = "---\n".join(yaml.dump(_with_origin(body, origin), Dumper=_KustomizeDumper, sort_keys=True) for origin, body in bodies)
    documents = parse_output(text, root)
    return RawTier(spec, documents=tuple(documents), inputs=frozenset(inputs), index=DocumentIndex.of(documents))


class _KustomizeDumper(yaml.SafeDumper):
    """YAML as kustomize writes it for our reader: a string go-yaml v2 would read as another type (`y`, `on`, `1`) is quoted."""


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    try:
        plain = isinstance(yaml.load(value, Loader=FastSafeLoader), str) and "\n" not in value
    except yaml.YAMLError:
        plain = False
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=None if plain else '"')


_KustomizeDumper.add_representer(str, _represent_str)


def _legacy_order(body: Mapping[str, Any]) -> tuple[int, str, str, str]:
    kind = str(body.get("kind", ""))
    rank = _ORDER_FIRST.index(kind) if kind in _ORDER_FIRST else len(_ORDER_FIRST) + 1 + (_ORDER_LAST.index(kind) if kind in _ORDER_LAST else -1)
    meta = body.get("metadata") or {}
    return rank, f"{body.get('apiVersion', '')}/{kind}", str(meta.get("namespace") or ""), str(meta.get("name") or "")


def _with_origin(body: Mapping[str, Any], origin: str) -> dict[str, Any]:
    meta = dict(body.get("metadata") or {})
    meta["annotations"] = {**(meta.get("annotations") or {}), ORIGIN_ANNOTATION: f"path: {origin}\n"}
    return {**body, "metadata": meta}


class _InMemoryBuilds:
    """A pass's builds (engine/render/clusterpass.py `Builds`), run one at a time when the pass takes them."""

    def __init__(self, tree: MemoryTree) -> None:
        self.tree = tree
        self.started: list[TierSpec] = []

    def start(self, spec: TierSpec) -> None:
        self.started.append(spec)

    def arrived(self) -> list[RawTier]:
        started, self.started = self.started, []
        return [build(self.tree, spec) for spec in started]


def _no_patches(sync: OperatorSync, tier: TierId, origin: SourceLocation | None, findings: list[Finding]) -> Mapping[str, Any]:
    if sync.patches:
        raise NeedsKustomize("a FluxInstance's kustomize.patches")
    return sync.kustomization


def render(
    files: Files | MemoryTree, cluster: str = "dev", *, entry: str | None = None, graph_only: bool = False,
    releases: Iterable[RenderedRelease] = (), limits: RenderLimits = RenderLimits(),
) -> ClusterRender:
    """One cluster of an in-memory repository rendered as the pipeline renders it, kustomize aside (see the module doc).

    `releases` stand for what the chart stage (bot/pipeline/releases.py) rendered of its HelmReleases.
    """
    tree = files if isinstance(files, MemoryTree) else MemoryTree(files)
    config = with_artifact_sources(snapshot_config(tree), tree)  # as bot/pipeline/session.py does
    entry = entry if entry is not None else cluster_entry(config, cluster, tree)
    settings = cluster_settings(tree, config, cluster, entry)

    def run(entry_spec: TierSpec, last: bool) -> PassResult:
        builds = _InMemoryBuilds(tree)
        return ClusterPass(
            tree, config, entry, entry_spec, builds, locate=locate(tree), patch=_no_patches, settings=settings, graph_only=graph_only, limits=limits,
        ).run(last=last)

    result = settle_entry(entry_tier(entry), run)
    return ClusterRender(cluster, entry, result.tiers, tuple(result.findings), tree, releases={r.ref: r for r in releases})


def context(
    cluster_render: ClusterRender, *, config: RepoConfig | None = None, knowledge: KnowledgeBase | None = None,
    bootstrap: Bootstrap | bool = True, other_graphs: Mapping[str, TierGraph] | None = None,
) -> CheckContext:
    """The `CheckContext` bot/pipeline/check.py `analyse` makes for a render.

    `bootstrap`: True discovers it from the render's tree, False is a bare cluster, a `Bootstrap` is taken as given.
    `other_graphs`: None renders the tree's other clusters (graph only) for graph-drift.
    """
    tree = cluster_render.snapshot
    config = config if config is not None else with_artifact_sources(snapshot_config(tree), tree)
    if knowledge is None:
        knowledge = default_knowledge().with_user_rules(list(config.runtime_crds)).with_aliases(config.chart_aliases)
    facts: dict[TierId, TierFacts] = {tid: tier_facts(t.manifests, knowledge) for tid, t in cluster_render.tiers.items()}
    if other_graphs is None:
        assert isinstance(tree, MemoryTree)
        other_graphs = {
            name: TierGraph(t.spec for t in render(tree, name, entry=path, graph_only=True).tiers.values())
            for name, path in sorted(known_clusters(config, tree).items())
            if name != cluster_render.cluster
        }
    if isinstance(bootstrap, bool):
        bootstrap = discover_bootstrap(tree, config, cluster_render, facts, knowledge) if bootstrap else Bootstrap()
    return CheckContext(
        render=cluster_render,
        graph=TierGraph(t.spec for t in cluster_render.tiers.values()),
        providers=ProviderIndex(cluster_render, knowledge, facts),
        facts=facts,
        config=config,
        other_graphs=other_graphs,
        locate=locate(tree) if isinstance(tree, MemoryTree) else (lambda m: m.origin),
        bootstrap=bootstrap,
    )


def check(files: Files, cluster: str = "dev", *, bootstrap: bool = True, releases: Iterable[RenderedRelease] = ()) -> CheckReport:
    """`fluxwarden check` of one cluster of an in-memory repository, kustomize aside: the same findings, in the same order."""
    ctx = context(render(files, cluster, releases=releases), bootstrap=bootstrap)
    return build_report(ctx.render, ctx.graph, cluster_findings(ctx, bootstrap), ctx.cold_start)

