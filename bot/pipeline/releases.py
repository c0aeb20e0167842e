"""Render a cluster's HelmReleases as helm-controller would: sources resolved, charts fetched, rendered by Helm in workers.

After the tiers render (bot/pipeline/renderer.py), each HelmRelease they apply is read
(bot/engine/render/helmrelease.py), its chart source resolved against the objects the render holds, the archive
fetched (bot/adapters/charts.py: allowed hosts only, bounded, cached by content) or packed from this
repository, its values composed (bot/engine/render/helmvalues.py), and the chart rendered by Helm's own engine in
a bounded worker (bot/adapters/helm.py). Renders are cached by everything that decides them. A chart that
cannot be had is `chart-not-rendered` (grouped per source) and falls back to the knowledge base; a chart
that fails at these values is an error, as helm-controller would fail the install.

Who may be fetched from (a PR must not choose; issue 21): the hosts the base branch's HelmRepository and
OCIRepository `spec.url`s name, at public addresses only, plus the operator's `charts.allow_hosts`
(`--allow-chart-host`), the only entries that may open a loopback, private or link-local address. The run's
first `render_releases` (the base side of a review, the only side of a check) fixes those hosts; the head of a
review never adds one, so a HelmRepository only the PR names is "not allowed". A review whose base cannot be
rendered fixes none (bot/pipeline/review.py).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import posixpath
import tarfile
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Sequence

from bot.adapters.cache import BuildCache, versioned_key
from bot.adapters.helm import HelmRenderer
from bot.adapters.kustomize import KustomizeBinary, run_build
from bot.adapters.workers import WorkerPool
from bot.engine.render.chartrender import ChartRenderFailure, ChartRenderRequest, ChartRenderResult, effective_values_files
from bot.engine.render.chartsource import ChartFetchError, FetchedChart, FetchPolicy, source_host
from bot.engine.render.config import RepoConfig
from bot.engine.core.errors import InputError, RenderError
from bot.engine.render.facts import TierFacts
from bot.engine.render.helmignore import HELMIGNORE, HelmIgnore, HelmIgnoreError
from bot.engine.render.helmrelease import ChartPlan, ChartUnavailable, ReleaseSpec, not_rendered_findings, parse_release
from bot.engine.render.helmvalues import (
    DEFAULT_KUBE_VERSION, ReleaseObjects, api_versions, compose_values, mask_secret_values, release_objects, values_without_secrets,
)
from bot.engine.core.model import Finding, GroupKind, Manifest, ObjectRef, Severity, TierId
from bot.engine.render.semver import ConstraintError, resolve_version
from bot.engine.render.rendered import ClusterRender, Outcome, RenderedRelease, RenderedTier
from bot.engine.render.yamlio import load_one
from bot.engine.render.scope import cluster_scoped_kinds
from bot.engine.core.tree import RepoTree
from bot.pipeline.progress import Progress

if TYPE_CHECKING:  # imported on first fetch: HTTP, TLS and email parsing are for remote charts only
    from bot.adapters.charts import ChartFetcher

# The objects valuesFrom reads (the chart sources come with the tiers' facts: bot/engine/render/facts.py).
VALUES_KINDS = frozenset({"ConfigMap", "Secret"})
VALUES_GROUP_KINDS = tuple(GroupKind("", kind) for kind in sorted(VALUES_KINDS))
CRD = GroupKind("apiextensions.k8s.io", "CustomResourceDefinition")
MAX_CHART_FILES = 5000  # a chart packed from this repository: as the fetcher bounds an archive
MAX_CHART_BYTES = 100 * 1024 * 1024
MAX_DEPENDENCY_DEPTH = 5  # file:// dependencies of file:// dependencies …
NAMING_KINDS = frozenset({"HelmRepository", "OCIRepository"})  # the sources whose spec.url names a host to fetch from
# A fetch failure's reason, as the chart-not-rendered line says it.
PLAIN_REASONS = {
    "not-allowed": "not allowed", "unreachable": "unreachable", "needs-credentials": "needs credentials",
    "too-large": "too large", "not-found": "not found", "invalid": "invalid", "not-vendored": "a dependency is not vendored",
}


@dataclass(frozen=True)
class ChartOptions:
    """How HelmReleases are rendered: whether at all, where charts may come from, and the workers' bounds."""

    render: bool = True
    policy: FetchPolicy = field(default_factory=FetchPolicy)
    workers: int = 2
    timeout: float = 30.0  # seconds one chart may render
    max_rss: int = 1 << 30  # a worker's memory, in bytes
    recycle_after: int = 200  # renders before a worker is replaced (keeps the bot's tree small)


class ChartStage:
    """One run's chart fetcher (an index is read once per run) and Helm workers, made on first use, closed with the run."""

    def __init__(
        self, options: ChartOptions, cache_dir: Path | None, cache: BuildCache | None, kustomize: KustomizeBinary | None = None, work: Path | None = None,
    ) -> None:
        self.options = options
        self.kustomize = kustomize  # for postRenderers (a kustomize build, bounded as every other)
        self.work = work
        self.cache = cache
        self._cache_dir = cache_dir
        self._fetcher: ChartFetcher | None = None
        self._pool: WorkerPool | None = None
        self._helm: HelmRenderer | None = None
        self._lock = threading.Lock()
        self._source_hosts: frozenset[str] | None = None
        self.memo: dict[Any, Any] = {}  # this run's packed charts and renders by key (both sides of a review share them)
        self.keep_warm = 0  # Helm workers kept after a release stage: 1 while another side of a review is to come

    @property
    def source_hosts(self) -> frozenset[str] | None:
        """The hosts the base branch's sources name (None: not fixed yet)."""
        return self._source_hosts

    def fix_source_hosts(self, hosts: Iterable[str]) -> None:
        """Fix the run's source hosts on its first call (the base side); later calls (the head) change nothing."""
        with self._lock:
            if self._source_hosts is None:
                self._source_hosts = frozenset(h.lower() for h in hosts)

    @property
    def fetcher(self) -> ChartFetcher:
        """The run's fetcher: the policy's hosts plus the source hosts, fixed before its first use."""
        self.fix_source_hosts(())  # fetching before any render fixed them: no source host at all
        with self._lock:
            if self._fetcher is None:
                from bot.adapters.charts import ChartFetcher

                policy = replace(self.options.policy, source_hosts=self.options.policy.source_hosts | (self._source_hosts or frozenset()))
                self._fetcher = ChartFetcher(policy, self._cache_dir)
            return self._fetcher

    @property
    def helm(self) -> HelmRenderer:
        with self._lock:
            if self._helm is None:
                opts = self.options
                self._pool = WorkerPool(
                    opts.workers, task_timeout=opts.timeout, max_task_rss=opts.max_rss, recycle_after=opts.recycle_after, recycle_rss=opts.max_rss // 2
                )
                self._helm = HelmRenderer(self._pool, timeout=opts.timeout, max_rss=opts.max_rss)
            return self._helm

    def saw(self, facts: TierFacts) -> None:
        """A tier finished: when it holds a HelmRelease, a Helm worker starts now, while the other tiers settle and
        the cache is read (the Go runtime takes a few hundred ms to start), not when the first render needs it."""
        if facts.helm_releases and self.options.render and self._helm is None:
            self.helm.prewarm()

    def close(self) -> None:
        """Stop the workers (the run is over)."""
        if self._pool is not None:
            self._pool.close()
            self._pool = self._helm = None


@dataclass(frozen=True)
class KeptRelease:
    """A rendered release's objects as kept by the build cache, with the chart name and version they came from."""

    chart: str
    version: str
    objects: ReleaseObjects


@dataclass(frozen=True)
class _Job:
    """One HelmRelease to render: where it is, its spec, and what its render is keyed by."""

    tier: TierId
    manifest: Manifest
    spec: ReleaseSpec


def render_releases(
    render: ClusterRender,
    facts: Mapping[TierId, TierFacts],
    stage: ChartStage,
    config: RepoConfig,
    snapshot: RepoTree,
    *,
    kube_version: str = DEFAULT_KUBE_VERSION,
    changed: frozenset[str] = frozenset(),
    progress: Progress | None = None,
) -> ClusterRender:
    """The render with its HelmReleases' charts rendered (`ClusterRender.releases`) and the findings that produced."""
    if not stage.options.render:
        return render
    if stage.source_hosts is None:
        stage.fix_source_hosts(_named_hosts(facts))
    located = [(tid, m) for tid, f in facts.items() for m in f.helm_releases if not render.tiers[tid].spec.kube_config]
    if not located:
        return render
    objects = _objects(render, facts, located, stage)
    findings: list[Finding] = []
    jobs: list[_Job] = []
    seen: set[ObjectRef] = set()
    for tid, manifest in located:
        if manifest.ref in seen:  # applied by two tiers: the first's (the tiers say it is redefined)
            continue
        seen.add(manifest.ref)
        spec = parse_release(manifest, objects, config.is_this_repo)
        if isinstance(spec, Finding):
            findings.append(replace(spec, kustomization=tid))
            continue
        jobs.append(_Job(tid, manifest, spec))
    if any(job.spec.chart.kind != "git-remote" for job in jobs if not isinstance(job.spec.chart, ChartUnavailable)):
        stage.helm.prewarm()  # a worker starts while the cache is read: a render that misses does not wait for it
    crd_bodies = [m for key, m in objects.items() if key[0] == "CustomResourceDefinition"]
    capabilities = api_versions(kube_version, crd_bodies)
    scoped = cluster_scoped_kinds(crd_bodies)
    scope_key = _scope_key(crd_bodies)

    if progress is not None:
        progress.charts_known(len(jobs))

    def cached(job: _Job) -> tuple[RenderedRelease, list[Finding]] | None:
        out = _render_one(job, objects, stage, snapshot, kube_version, capabilities, scoped, cached_only=True, scope_key=scope_key)
        if out is not None and progress is not None:
            progress.chart_done()
        return out

    def rendered(i: int) -> tuple[RenderedRelease, list[Finding]]:
        out = _render_one(jobs[i], objects, stage, snapshot, kube_version, capabilities, scoped, scope_key=scope_key)
        assert out is not None  # only a cached_only call gives None
        if progress is not None:
            progress.chart_done()
        return out

    # A cached render of a chart of this repository is pure Python: done here, since threads would only contend
    # for the GIL; what Helm must render (or a fetch must bring) runs in parallel.
    done: dict[int, tuple[RenderedRelease, list[Finding]]] = {}
    for i, job in enumerate(jobs):
        if isinstance(job.spec.chart, ChartPlan) and job.spec.chart.kind == "git" and (out := cached(job)) is not None:
            done[i] = out
    rest = [i for i in range(len(jobs)) if i not in done]
    with ThreadPoolExecutor(max_workers=max(1, stage.options.workers * 2), thread_name_prefix="chart") as pool:
        done.update(zip(rest, pool.map(rendered, rest)))
    outcomes = [done[i] for i in range(len(jobs))]
    if stage._pool is not None:
        # What follows builds with kustomize (other clusters' graphs): idle workers would only add to the tree's peak.
        stage._pool.trim(stage.keep_warm)
    releases: dict[ObjectRef, RenderedRelease] = {}
    unavailable: list[tuple[ReleaseSpec, str, bool]] = []
    for job, (release, release_findings) in zip(jobs, outcomes):
        releases[job.manifest.ref] = release
        findings.extend(replace(f, kustomization=f.kustomization or job.tier) for f in release_findings)
        if release.outcome is Outcome.NOT_RENDERED:
            # A HelmRelease the change edits (its file, or anything its tier reads) is judged blind: a warning.
            touched = bool(changed) and (render.tiers[job.tier].inputs & changed or (job.spec.origin is not None and job.spec.origin.file in changed))
            unavailable.append((job.spec, release.reason, bool(touched)))
    findings.extend(replace(f, kustomization=f.kustomization) for f in not_rendered_findings(unavailable))
    return replace(render, releases=releases, findings=(*render.findings, *findings))


def _objects(
    render: ClusterRender, facts: Mapping[TierId, TierFacts], located: Sequence[tuple[TierId, Manifest]], stage: ChartStage
) -> dict[tuple[str, str, str], Manifest]:
    """The chart sources and CRDs (from the tiers' facts) and the valuesFrom ConfigMaps/Secrets (read only from the
    tiers that have them): a commit checked before loads no other tier's objects."""
    wanted = _values_names(m for _, m in located)
    out: dict[tuple[str, str, str], Manifest] = {}
    for tid, tier_facts in facts.items():
        for manifest in (*tier_facts.chart_sources, *tier_facts.crd_outlines):
            out.setdefault((manifest.ref.kind, manifest.ref.namespace, manifest.ref.name), manifest)
        has_values = wanted and any(
            (stub.ref.kind, stub.ref.namespace, stub.ref.name) in wanted for kind in VALUES_GROUP_KINDS for stub in tier_facts.kinds.get(kind, ())
        )
        if not has_values:
            continue
        for manifest in _values_objects(stage, render.tiers[tid]):
            key = (manifest.ref.kind, manifest.ref.namespace, manifest.ref.name)
            if key in wanted:
                out.setdefault(key, manifest)
    return out


def _values_objects(stage: ChartStage, tier: RenderedTier) -> Sequence[Manifest]:
    """A tier's ConfigMaps and Secrets, in render order, kept (this run, then the build cache) by its finish key
    (equal keys, equal objects): a tier read back from the cache loads them alone, not its thousand other objects."""
    key = f"values-objects-{tier.finish_key}" if tier.finish_key is not None else None
    hit = _remembered(stage, key)
    if isinstance(hit, tuple):
        return hit
    found = tuple(m for m in tier.manifests if m.ref.kind in VALUES_KINDS)
    if key is not None:
        _remember(stage, key, found)
    return found


def _named_hosts(facts: Mapping[TierId, TierFacts]) -> set[str]:
    """The hosts this render's HelmRepository and OCIRepository objects name in `spec.url` (from the tiers' facts)."""
    hosts: set[str] = set()
    for tier_facts in facts.values():
        for manifest in tier_facts.chart_sources:
            spec = manifest.body.get("spec") if manifest.ref.kind in NAMING_KINDS else None
            host = source_host(spec.get("url")) if isinstance(spec, Mapping) else None
            if host:
                hosts.add(host)
    return hosts


def _values_names(manifests: Iterable[Manifest]) -> set[tuple[str, str, str]]:
    """(kind, namespace, name) of every ConfigMap and Secret a HelmRelease's valuesFrom names."""
    out = set()
    for manifest in manifests:
        spec = manifest.body.get("spec")
        refs = spec.get("valuesFrom") if isinstance(spec, Mapping) else None
        for ref in refs if isinstance(refs, list) else ():
            if isinstance(ref, Mapping) and ref.get("kind") in VALUES_KINDS and isinstance(ref.get("name"), str):
                out.add((str(ref["kind"]), manifest.ref.namespace, ref["name"]))
    return out


def _render_one(
    job: _Job,
    objects: Mapping[tuple[str, str, str], Manifest],
    stage: ChartStage,
    snapshot: RepoTree,
    kube_version: str,
    capabilities: tuple[str, ...],
    scoped: Callable[[GroupKind], bool],
    *,
    cached_only: bool = False,
    scope_key: str = "",
) -> tuple[RenderedRelease, list[Finding]] | None:
    """One HelmRelease: its chart fetched (or packed), values composed, rendered (cached), read into objects.

    `cached_only`: None instead of asking Helm when the render is not cached. `scope_key` names what `scoped` says.
    """
    spec = job.spec
    values = compose_values(spec, objects)
    base = RenderedRelease(
        ref=spec.ref, tier=job.tier, outcome=Outcome.NOT_RENDERED, location=spec.origin, release_name=spec.release_name, namespace=spec.namespace,
        values=values_without_secrets(values),
    )
    plan = spec.chart
    if isinstance(plan, ChartUnavailable):
        return replace(base, reason=plan.reason, source=str(plan.source or "")), []
    base = replace(base, source=f"{plan.source.kind} {plan.source.namespace}/{plan.source.name}", chart=posixpath.basename(plan.chart.rstrip("/")) or plan.chart)
    if plan.kind == "git-remote":
        return replace(base, reason=f"the chart is in another Git repository ({plan.url}), which is not fetched"), []
    try:
        chart = _packed(stage, snapshot, plan.chart) if plan.kind == "git" else _fetch(plan, stage.fetcher, snapshot)
    except ChartFetchError as exc:
        return replace(base, reason=f"{PLAIN_REASONS.get(exc.reason, exc.reason)}: {exc}"), []
    base = replace(base, values=None)  # fetched: the render itself says which CRDs it installs
    findings = list(values.missing)
    source_values = _source_values(snapshot, plan) if plan.kind == "git" else None
    key, read = "", None
    result: ChartRenderResult | ChartRenderFailure | None
    if isinstance(source_values, ChartRenderFailure):
        result = source_values
    else:
        request = ChartRenderRequest(
            archive=chart.archive, chart_dir=None, values_files=plan.values_files, values=dict(values.values),
            release_name=spec.release_name, namespace=spec.namespace, kube_version=kube_version, api_versions=capabilities,
            source_values=source_values, ignore_missing_values_files=plan.ignore_missing_values_files,
        )
        key = _render_key(request, chart.digest)
        # Parsing a render's YAML is most of a cache hit: the objects are kept too (this run, then the build cache),
        # by the render and what else decides them, and a hit needs no render read back. Never when a Secret's
        # values were masked into them.
        read = None if values.from_secrets else versioned_key(
            "helm-objects", key, scope_key, json.dumps(list(spec.post_renderers), sort_keys=True, default=str),
            str(spec.ref), spec.namespace, spec.install_crds, spec.create_namespace, repr(spec.origin),
        )
        kept = _remembered(stage, read)
        if isinstance(kept, KeptRelease):
            findings.extend(kept.objects.findings)
            return replace(
                base, outcome=Outcome.RENDERED, chart=kept.chart, version=kept.version, manifests=kept.objects.manifests, crds=kept.objects.crds,
            ), findings
        result = _rendered(stage, request, key, cached_only)
        if result is None:
            return None
    if isinstance(result, ChartRenderFailure):
        failed = replace(base, outcome=Outcome.FAILED, version=chart.version, reason=result.message)
        check = "render-limit" if result.kind in ("timeout", "memory", "output") else "chart-render-failed"
        what = "helm-controller would fail the install" if check == "chart-render-failed" else "the render was stopped"
        message = f"HelmRelease {spec.ref.namespace}/{spec.ref.name}: chart {chart.name} {chart.version} fails to render ({what}): {result.message}"
        return failed, [*findings, Finding(check, Severity.ERROR, message, object=spec.ref, location=spec.origin)]
    if spec.post_renderers:
        posted = _post_rendered(stage, spec, result, chart.digest)
        if isinstance(posted, Finding):
            failed = replace(base, outcome=Outcome.FAILED, version=chart.version, reason=posted.message)
            return failed, [*findings, posted]
        result = posted
    secrets = values.from_secrets
    files = [(path, mask_secret_values(text, secrets) if secrets else text) for path, text in result.manifests]
    objects_of = release_objects(files, result.crds, spec, scoped, chart=f"{result.chart_name} {result.chart_version}")
    if read is not None:
        _remember(stage, read, KeptRelease(result.chart_name, result.chart_version, objects_of))
    findings.extend(objects_of.findings)
    release = replace(
        base, outcome=Outcome.RENDERED, chart=result.chart_name, version=result.chart_version,
        manifests=objects_of.manifests, crds=objects_of.crds,
    )
    return release, findings


def _source_values(snapshot: RepoTree, plan: ChartPlan) -> tuple[tuple[str, str], ...] | ChartRenderFailure | None:
    """A chart from this repository's valuesFiles, read from the repository root, not the chart directory.

    source-controller internal/helm/chart builder_local.go mergeFileValues: a GitRepository (or Bucket) chart's
    valuesFiles are paths in the source artifact, securely joined to its root (`..` stops at the root); a
    missing one fails the build unless ignoreMissingValuesFiles. None: no valuesFiles that count.
    """
    files = effective_values_files(plan.values_files)
    if not files:
        return None
    out: list[tuple[str, str]] = []
    for reference in files:
        path = posixpath.normpath("/" + reference).lstrip("/")
        text = snapshot.read_text(path) if path and snapshot.is_file(path) else None
        if text is None:
            if plan.ignore_missing_values_files and not snapshot.exists(path):
                continue
            return ChartRenderFailure("values", f"no values file found at path '/{path}' (reference '{reference}')")
        out.append((reference, text))
    return tuple(out)


def _fetch(plan: ChartPlan, fetcher: ChartFetcher, snapshot: RepoTree) -> FetchedChart:
    """The chart archive a plan names: from a repository, a registry, or packed from this repository's tree."""
    if plan.kind == "git":
        return pack_chart(snapshot, plan.chart)
    if plan.kind == "http":
        return fetcher.http_chart(plan.url, plan.chart, plan.version or "*", secret_ref=plan.secret_ref)
    how, value = plan.reference
    return fetcher.oci_chart(
        plan.url,
        tag=value if how == "tag" else None,
        semver=value if how == "semver" else None,
        digest=value if how == "digest" else None,
        insecure=plan.insecure,
        secret_ref=plan.secret_ref,
        layer_media_type=plan.layer_media_type,
    )


def _remembered(stage: ChartStage, key: str | None) -> Any:
    """The value kept under `key` by this run, else by the build cache; None when neither has it."""
    if key is None:
        return None
    hit = stage.memo.get(key)
    if hit is None and stage.cache is not None:
        hit = stage.cache.get(key)
        if hit is not None:
            stage.memo[key] = hit
    return hit


def _remember(stage: ChartStage, key: str, value: Any) -> None:
    stage.memo[key] = value
    if stage.cache is not None:
        stage.cache.put(key, value)


def _render_key(request: ChartRenderRequest, digest: str) -> str:
    """What decides a render: the chart's digest and everything in the request but the archive."""
    decided = {k: v for k, v in request.__dict__.items() if k != "archive"}
    return versioned_key("helm-render", digest, json.dumps(decided, sort_keys=True, default=str))


def _scope_key(crds: Iterable[Manifest]) -> str:
    """The cluster-scoped kinds `crds` define (what `cluster_scoped_kinds` adds to the built-ins), as a key."""
    kinds = set()
    for crd in crds:
        spec = crd.body.get("spec")
        if isinstance(spec, Mapping) and spec.get("scope") == "Cluster":
            names = spec.get("names")
            kinds.add((str(spec.get("group")), str(names.get("kind") if isinstance(names, Mapping) else None)))
    return json.dumps(sorted(kinds))


def _rendered(stage: ChartStage, request: ChartRenderRequest, key: str, cached_only: bool = False) -> ChartRenderResult | ChartRenderFailure | None:
    """Helm's render of a request (`key`: `_render_key`), from the cache when the same chart, values and capabilities were rendered before.

    `cached_only`: None when it is not cached (nothing is rendered).
    """
    hit = _remembered(stage, key)
    if isinstance(hit, (ChartRenderResult, ChartRenderFailure)):
        return hit
    if cached_only:
        return None
    result = stage.helm.render(request)
    # A stopped render (time, memory) may pass on a quieter machine: never remembered.
    if not (isinstance(result, ChartRenderFailure) and result.kind in ("timeout", "memory")):
        _remember(stage, key, result)
    return result


def _post_rendered(stage: ChartStage, spec: ReleaseSpec, result: ChartRenderResult, digest: str) -> ChartRenderResult | Finding:
    """The release's manifests through its `postRenderers` (kustomize patches and images, in order), as
    helm-controller runs them (internal/postrender/kustomize.go: the rendered manifest as the one resource of a
    generated kustomization); the crds/ files are not post-rendered, as in Helm. Cached with the render."""
    key = None
    if stage.cache is not None:
        key = versioned_key("helm-post-render", digest, json.dumps([result.manifests, list(spec.post_renderers)], sort_keys=True, default=str))
        hit = stage.cache.get(key)
        if hit is not None:
            return replace(result, manifests=hit)
    if stage.kustomize is None or stage.work is None:
        return result
    text = "".join(body if body.endswith("\n") else body + "\n" for _, body in result.manifests)
    for index, renderer in enumerate(spec.post_renderers):
        kustomize = renderer  # ReleaseSpec.post_renderers holds each entry's `kustomize` mapping
        config: dict[str, object] = {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization", "resources": ["release.yaml"]}
        for field_name in ("patches", "images", "patchesStrategicMerge", "patchesJson6902"):
            if kustomize.get(field_name):
                config[field_name] = kustomize[field_name]
        with tempfile.TemporaryDirectory(prefix="post-render-", dir=stage.work) as tmp:
            directory = Path(tmp)
            (directory / "release.yaml").write_text(text, encoding="utf-8")
            (directory / "kustomization.yaml").write_text(json.dumps(config), encoding="utf-8")
            try:
                text = run_build(stage.kustomize, directory, sandbox_home=directory / ".home")
            except RenderError as exc:
                message = str(exc).replace(str(directory) + "/", "").replace(str(directory), ".")
                return Finding(
                    "chart-render-failed", Severity.ERROR,
                    f"HelmRelease {spec.ref.namespace}/{spec.ref.name}: postRenderers[{index}] fails (helm-controller would fail the install): {message[:800]}",
                    object=spec.ref, location=spec.origin,
                )
    manifests = (("post-rendered", text),)
    if key is not None:
        stage.cache.put(key, manifests)  # type: ignore[union-attr]
    return replace(result, manifests=manifests)


def _packed(stage: ChartStage, snapshot: RepoTree, path: str) -> FetchedChart:
    """`pack_chart`, memoised (this run, then the build cache) by the chart's file digests: packing is most of a warm review."""
    # Many releases share a chart: its files are listed once per snapshot (a snapshot does not change during a run).
    listed = ("chart-files", snapshot.identity, path)
    key = stage.memo[listed] if listed in stage.memo else stage.memo.setdefault(listed, _chart_files_key(snapshot, path))
    if key is None:
        return pack_chart(snapshot, path)  # no chart there, or too many files: pack_chart says so
    hit = _remembered(stage, key)
    if isinstance(hit, FetchedChart):
        return hit
    chart = pack_chart(snapshot, path)
    _remember(stage, key, chart)
    return chart


def _chart_files_key(snapshot: RepoTree, path: str) -> str | None:
    """A key over the paths and blob ids of the files `pack_chart` packs (its local dependencies' too), None when
    it would refuse the chart."""
    root = path.strip("/")
    entries: list[tuple[str, str]] = []
    try:
        _collect(snapshot, root, posixpath.basename(root) or "chart", entries, depth=0)
    except ChartFetchError:
        return None
    listing = [(member, snapshot.file_digest(source)) for member, source in entries]
    return versioned_key("git-chart", root, sorted((member, digest) for member, digest in listing if digest is not None))


def _join(root: str, rel: str) -> str:
    return posixpath.join(root, rel) if root else rel


def _chart_paths(snapshot: RepoTree, root: str) -> list[str]:
    """The chart-relative files of the chart at `root` that Helm's loader takes, in packing order.

    source-controller packs a chart from a GitRepository with its secure copy of Helm's directory loader
    (internal/helm/chart/secureloader/directory.go SecureLoadDir): the chart's `.helmignore` (plus Helm's
    default rule) applies, and an ignored directory is skipped whole, so what it holds never counts.
    """
    if not snapshot.is_dir(root) or not snapshot.is_file(_join(root, "Chart.yaml")):
        raise ChartFetchError("not-found", f"no chart at ./{root} (no Chart.yaml) in this repository")
    try:
        rules = HelmIgnore.parse(snapshot.read_text(_join(root, HELMIGNORE)))
    except HelmIgnoreError as exc:
        raise ChartFetchError("invalid", f"the chart at ./{root} cannot be loaded: {exc}") from None
    out: list[str] = []
    stack = [""]
    while stack:
        directory = stack.pop()
        dirs, files = snapshot.list_dir(_join(root, directory) if directory else root)
        for name in sorted(dirs, reverse=True):
            rel = posixpath.join(directory, name)
            if not rules.ignored(rel, True):
                stack.append(rel)
        out.extend(rel for name in sorted(files) if not rules.ignored(rel := posixpath.join(directory, name), False))
        if len(out) > MAX_CHART_FILES:
            raise ChartFetchError("too-large", f"the chart at ./{root} has more than {MAX_CHART_FILES} files or {MAX_CHART_BYTES >> 20} MiB")
    return out


def pack_chart(snapshot: RepoTree, path: str) -> FetchedChart:
    """A chart directory of this repository as a deterministic archive (what source-controller packages from Git),
    with the `file://` dependencies its Chart.yaml declares but charts/ lacks packed in."""
    root = path.strip("/")
    name = posixpath.basename(root) or "chart"
    entries: list[tuple[str, str]] = []  # (archive path, repository path)
    _collect(snapshot, root, name, entries, depth=0)
    buffer = io.BytesIO()
    size = 0
    # gzip's header carries a time: mtime 0 keeps the archive, and so its digest and cache keys, stable.
    with gzip.GzipFile(fileobj=buffer, mode="wb", mtime=0) as compressed, tarfile.open(fileobj=compressed, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for member, source in entries:
            data = snapshot.read_bytes(source)
            if data is None:
                continue
            size += len(data)
            if size > MAX_CHART_BYTES or len(entries) > MAX_CHART_FILES:
                raise ChartFetchError("too-large", f"the chart at ./{root} has more than {MAX_CHART_FILES} files or {MAX_CHART_BYTES >> 20} MiB")
            info = tarfile.TarInfo(member)
            info.size, info.mtime, info.mode = len(data), 0, 0o644
            tar.addfile(info, io.BytesIO(data))
    archive = buffer.getvalue()
    version = _chart_version(snapshot.read_text(_join(root, "Chart.yaml")) or "")
    digest = "sha256:" + hashlib.sha256(archive).hexdigest()
    return FetchedChart(archive=archive, name=name, version=version, digest=digest, url=f"./{root}")


def _collect(snapshot: RepoTree, root: str, prefix: str, entries: list[tuple[str, str]], depth: int) -> None:
    """The files of the chart at `root` under `prefix/`, then its missing local dependencies under `prefix/charts/NAME/`.

    source-controller internal/helm/chart dependency_manager.go: a dependency of a chart directory that charts/
    lacks (collectMissing, by alias or name) is built: a `file://` one from the path relative to the chart,
    securely joined to the source root (secureLocalChartPath), and its version constraint must hold; a remote
    one is downloaded from its repository, which a PR could point anywhere: not fetched here, and said so.
    """
    listed = _chart_paths(snapshot, root)
    entries.extend((posixpath.join(prefix, rel), _join(root, rel)) for rel in listed)
    for dep in _missing_dependencies(snapshot, root, listed):
        name, repository, constraint = dep
        if not repository.startswith("file://"):
            where = f" from {repository}" if repository else ""
            raise ChartFetchError("not-vendored", f"dependency {name}{where} of the chart at ./{root} is not in its charts/ and is not fetched")
        if depth >= MAX_DEPENDENCY_DEPTH:
            raise ChartFetchError("invalid", f"the chart at ./{root} nests local dependencies deeper than {MAX_DEPENDENCY_DEPTH}")
        local = posixpath.normpath("/" + posixpath.join(root, repository[len("file://"):])).lstrip("/")
        version = _chart_version(snapshot.read_text(_join(local, "Chart.yaml")) or "")
        try:
            fits = not constraint or resolve_version(constraint, [version]) is not None
        except ConstraintError:
            fits = False
        if snapshot.is_file(_join(local, "Chart.yaml")) and not fits:
            raise ChartFetchError("invalid", f"can't get a valid version for dependency '{name}' (./{local} is {version or 'unversioned'}, wanted {constraint})")
        _collect(snapshot, local, posixpath.join(prefix, "charts", name), entries, depth + 1)


def _missing_dependencies(snapshot: RepoTree, root: str, listed: Sequence[str]) -> list[tuple[str, str, str]]:
    """(alias or name, repository, version) of each Chart.yaml dependency with nothing of that name in charts/."""
    try:  # the bounded C loader (bot/engine/render/yamlio.py): read on every review of every chart from git
        metadata = load_one(snapshot.read_text(_join(root, "Chart.yaml")) or "", _join(root, "Chart.yaml"))
    except InputError:
        return []  # Helm's loader reports it when the chart renders
    declared = metadata.get("dependencies") if isinstance(metadata, dict) else None
    if not isinstance(declared, list):
        return []
    vendored = {rel.split("/")[1] for rel in listed if rel.startswith("charts/") and rel.count("/") >= 2}
    archives = [rel.split("/")[1] for rel in listed if rel.startswith("charts/") and rel.count("/") == 1 and rel.endswith(".tgz")]
    out = []
    for entry in declared:
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            continue
        name = str(entry["name"])
        if name in vendored or any(a.startswith(name + "-") or a == name + ".tgz" for a in archives):
            continue
        out.append((str(entry.get("alias") or name), str(entry.get("repository") or ""), str(entry.get("version") or "")))
    return out


def _chart_version(chart_yaml: str) -> str:
    for line in chart_yaml.splitlines():
        if line.startswith("version:"):
            return line.partition(":")[2].strip().strip("'\"")
    return ""


def releases_key(render: ClusterRender, changed: frozenset[str] = frozenset()) -> str:
    """What a cluster's findings depend on beyond its commit: each release's chart, version and outcome (and, for
    a change, its files: they decide which not-rendered HelmReleases it touches)."""
    parts = sorted((str(r.ref), r.outcome.value, r.chart, r.version or "", r.reason) for r in render.releases.values())
    return hashlib.sha256(json.dumps([parts, sorted(changed)]).encode()).hexdigest()


__all__ = ["ChartOptions", "ChartStage", "pack_chart", "releases_key", "render_releases"]
