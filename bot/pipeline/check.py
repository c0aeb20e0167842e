"""`check`: snapshot the repo, render the cluster (and its siblings for graph-drift), run the checks."""

from __future__ import annotations

import gc
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from bot.engine.bootstrap import Bootstrap, bare_cluster_findings, bootstrap_findings, discover_bootstrap
from bot.adapters.cache import BuildCache, cache_budget, versioned_key
from bot.engine.checks import CheckContext, run_checks
from bot.engine.coldstart import ColdStart
from bot.engine.config import RepoConfig, cluster_entry, known_clusters, snapshot_config
from bot.engine.errors import UserError
from bot.engine.facts import FactsStore
from bot.engine.graph import TierGraph
from bot.engine.knowledge import default_knowledge
from bot.adapters.kustomize import KustomizeBinary, locate_kustomize, remember_version
from bot.engine.live import LiveProviderIndex, LiveState, evaluate_preconditions, live_provider_findings, required_tier_ids
from bot.engine.model import Finding, Severity, SourceLocation, TierId, plural
from bot.engine.providers import ProviderIndex
from bot.pipeline.renderer import ClusterRender, RenderedTier, Renderer
from bot.engine.report import CheckReport, TierSummary
from bot.adapters.workspace import Snapshot, build_snapshot


@dataclass(frozen=True)
class CheckOptions:
    """How to run a check: which kustomize, how many parallel builds, the per-build timeout, the build cache."""

    kustomize: str | None = None
    jobs: int | None = None
    timeout: float = 120.0
    cache_dir: Path | None = None  # None: no on-disk cache
    bootstrap: bool = True  # False (`--no-bootstrap`): judge a bare cluster, nothing installed before Flux


def tune_gc() -> None:
    """Collect garbage less often: a render holds millions of long-lived, acyclic dicts and strings.

    With CPython's default thresholds (700, 10, 10) every few thousand allocations trigger a
    collection and the oldest generation is swept over and over while those objects are built:
    a third of a warm one-tier review on a 20,000-object repo (bench/run.py). Cycles are still
    collected, only less eagerly. Process-wide, so it is called once by the entry points.
    """
    gc.set_threshold(100_000, 50, 100)


def check_repository(
    repo: Path, cluster: str, options: CheckOptions = CheckOptions(), live: LiveState | None = None, config: RepoConfig | None = None
) -> CheckReport:
    """Check one cluster of the repository at `repo` (a working tree); with `live`, also its live preconditions.

    `config` stands in for the repository's `.fluxwarden.yaml` (`--config FILE`); None reads the tree's.
    """
    if not repo.is_dir():
        raise UserError(f"{repo} is not a directory")
    binary = locate_kustomize(options.kustomize)
    with run_cache(options.cache_dir, binary) as cache, tempfile.TemporaryDirectory(prefix="fluxwarden-") as tmp:
        snapshot = build_snapshot(repo, Path(tmp))
        return check_snapshot(snapshot, cluster, binary, options, live=live, cache=cache, config=config)


@dataclass(frozen=True)
class BuiltCluster:
    """`fluxwarden build`: one cluster's render, its tiers in apply order (dependencies first)."""

    render: ClusterRender
    order: tuple[TierId, ...]


@contextmanager
def render_repository(
    repo: Path, cluster: str, options: CheckOptions = CheckOptions(), config: RepoConfig | None = None
) -> Iterator[BuiltCluster]:
    """Render one cluster of the working tree at `repo`, as `check` does (same snapshot, same cache), no checks.

    A context: a tier's objects may still be read from the cache or the snapshot while it is open.
    """
    if not repo.is_dir():
        raise UserError(f"{repo} is not a directory")
    binary = locate_kustomize(options.kustomize)
    with run_cache(options.cache_dir, binary) as cache, tempfile.TemporaryDirectory(prefix="fluxwarden-") as tmp:
        snapshot = build_snapshot(repo, Path(tmp))
        renderer = make_renderer(snapshot, binary, options, cache, config=config)
        render = renderer.render_cluster(cluster, cluster_entry(renderer.config, cluster, snapshot))
        yield BuiltCluster(render, tuple(_apply_order(render, TierGraph(t.spec for t in render.tiers.values()))))


@contextmanager
def run_cache(directory: Path | None, binary: KustomizeBinary) -> Iterator[BuildCache | None]:
    """The build cache of one run (None: no cache): kustomize's version taken from it, kept under its budget after."""
    if directory is None:
        yield None
        return
    budget = cache_budget()
    cache = BuildCache(directory, max_write_bytes=budget // 4)  # one run may fill a quarter of the budget
    remember_version(binary, cache)
    yield cache
    cache.prune_if_due(budget)


@dataclass(frozen=True)
class Analysis:
    """One cluster of one snapshot: its render, graph, findings and report."""

    render: ClusterRender
    graph: TierGraph
    report: CheckReport
    renderer: Renderer


def check_snapshot(
    snapshot: Snapshot,
    cluster: str,
    binary: KustomizeBinary,
    options: CheckOptions,
    live: LiveState | None = None,
    cache: BuildCache | None = None,
    config: RepoConfig | None = None,
) -> CheckReport:
    """Check one cluster of an already sanitised snapshot (with `config`, not the snapshot's own).

    With `live` (no change to review), every tier of the cluster must be ready on it: the merge
    preconditions of a change that could touch any of them.
    """
    analysis = analyse(make_renderer(snapshot, binary, options, cache, config=config), cluster, live=live, bootstrap=options.bootstrap)
    if live is None:
        return analysis.report
    required = required_tier_ids(analysis.renderer.config.required_tiers.get(cluster, ()))
    preconditions = evaluate_preconditions(live, analysis.graph.specs, {*analysis.render.tiers, *required})
    return build_report(analysis.render, analysis.graph, [*analysis.report.findings, *preconditions], analysis.report.cold_start)


def make_renderer(
    snapshot: Snapshot,
    binary: KustomizeBinary,
    options: CheckOptions,
    cache: BuildCache | None = None,
    finish_memo: dict | None = None,  # shared by both sides of a review: finished tiers and their facts
    config: RepoConfig | None = None,
) -> Renderer:
    """The renderer of a snapshot, with `config`; None: the snapshot's own `.fluxwarden.yaml`.

    The one place a render's configuration is chosen: the CLI may name a file (`--config`), a review
    gives both sides the same one, and the bot may pass the base branch's.
    """
    if config is None:
        config = snapshot_config(snapshot)
    return Renderer(snapshot, config, binary, jobs=options.jobs, timeout=options.timeout, cache=cache, finish_memo=finish_memo)


def analyse(renderer: Renderer, cluster: str, live: LiveState | None = None, bootstrap: bool = True) -> Analysis:
    """Render a cluster (and its siblings, for graph-drift) and run every check.

    With `live`, CRDs on the cluster are providers too (who made them decides their tier), and an
    info line says which providers came from the cluster. With `bootstrap` (the default), what the
    repository installs before Flux starts is discovered once and each assumption is an info line;
    without, a bare cluster is judged.
    """
    snapshot, config, cache, binary = renderer.snapshot, renderer.config, renderer.cache, renderer.binary
    entry = cluster_entry(config, cluster, snapshot)
    knowledge = default_knowledge().with_user_rules(list(config.runtime_crds))
    # A commit checked before (the base of most reviews) has the same findings: its tree id, this
    # code and this kustomize say so. Not with a live state, which changes between runs.
    key = _findings_key(snapshot, config, cluster, binary, bootstrap) if cache is not None and live is None else None
    cached = cache.get(key) if cache is not None and key is not None else None
    findings, cold_start = cached if cached is not None else (None, None)
    facts = FactsStore(knowledge, cache, renderer.finish_memo)
    # The checks read every tier's facts: taken as tiers finish, while others still build.
    render = renderer.render_cluster(cluster, entry, on_finished=facts.of if findings is None else None)
    graph = TierGraph(t.spec for t in render.tiers.values())
    if findings is None:
        others = {
            name: TierGraph(t.spec for t in renderer.render_cluster(name, path, graph_only=True).tiers.values())
            for name, path in sorted(known_clusters(config, snapshot).items())
            if name != cluster
        }
        tier_facts = facts.of_render(render)
        providers = ProviderIndex(render, knowledge, tier_facts) if live is None else LiveProviderIndex(render, knowledge, live, tier_facts)
        present = discover_bootstrap(snapshot, config, render, tier_facts, knowledge) if bootstrap else Bootstrap()
        ctx = CheckContext(
            render=render,
            graph=graph,
            providers=providers,
            facts=tier_facts,
            config=config,
            other_graphs=others,
            locate=renderer.locate,
            bootstrap=present,
        )
        findings = [
            *render.findings, *run_checks(ctx), *_unreached_unsafe_paths(render), *live_provider_findings(providers), *nothing_rendered(render),
            *(bootstrap_findings(present) if bootstrap else bare_cluster_findings()),
        ]
        cold_start = ctx.cold_start
        if cache is not None and key is not None and not any(t.failed for t in render.tiers.values()):
            cache.put(key, (findings, cold_start))  # a failed build may be a timeout: never remembered
    return Analysis(render, graph, build_report(render, graph, findings, cold_start), renderer)


def _findings_key(snapshot: Snapshot, config: RepoConfig, cluster: str, binary: KustomizeBinary, bootstrap: bool = True) -> str | None:
    """The cache key of a commit's findings for one cluster under one configuration; None for a working tree (no tree id).

    The bootstrap is read from the same tree (its id covers every helmfile and script), so only
    `--no-bootstrap` adds to the key.
    """
    if snapshot.tree is None:
        return None
    return versioned_key("findings", binary.version, snapshot.tree.oid, config.digest(), cluster, "bootstrap" if bootstrap else "bare")


NOT_CHECKED_LISTED = 10  # tiers named in a `nothing-rendered` message before "and N more"


def nothing_rendered(render: ClusterRender) -> list[Finding]:
    """An error when the cluster's content was not rendered: nothing checked is not a pass.

    The entry path (the bootstrap Kustomization's) usually only wires the cluster up: when it applies
    Kustomizations, at least one of them must render an object; when it applies none, it must render
    one itself. A tier that applies another source, failed to build, or built nothing renders none.
    A tier that failed but still produced objects (a SOPS Secret without decryption) was checked,
    and its `render-failed` is the error.
    """
    entry = next(iter(render.tiers), None)  # discovery order: the entry tier first
    children = [tid for tid in render.tiers if tid != entry]
    judged = children or list(render.tiers)
    if any(render.tiers[tid].rendered and len(render.tiers[tid].manifests) for tid in judged):
        return []
    unchecked = judged if entry is None or render.tiers[entry].rendered and children else [entry, *children]
    reasons = [f"{tid} ({_why_not_rendered(render.tiers[tid])})" for tid in unchecked]
    listed = ", ".join(reasons[:NOT_CHECKED_LISTED]) + (f" and {len(reasons) - NOT_CHECKED_LISTED} more" if len(reasons) > NOT_CHECKED_LISTED else "")
    what = f"none of the {plural(len(children), 'Kustomization')} its entry applies rendered an object" if children else "its entry rendered no object"
    message = f"nothing of cluster {render.cluster} (entry ./{render.entry}) was checked: {what}; not checked: {listed or 'no tier'}"
    return [Finding("nothing-rendered", Severity.ERROR, message, location=SourceLocation(render.entry or "."))]


def _why_not_rendered(tier: RenderedTier) -> str:
    if tier.failed:
        return "failed to render"
    if not tier.rendered:
        return f"applies {tier.spec.source.kind}/{tier.spec.source.name}, not this repository"
    return "rendered no object"


def _unreached_unsafe_paths(render: ClusterRender) -> list[Finding]:
    """Symlinks out of the repo that no tier reads are still reported: the PR added them."""
    reported = {f.location.file for f in render.findings if f.check == "unsafe-path" and f.location}
    return [
        Finding("unsafe-path", Severity.ERROR, f"{r.path} {r.reason}", location=SourceLocation(r.path))
        for r in render.snapshot.refused
        if "symlink" in r.reason and r.path not in reported
    ]


def _apply_order(render: ClusterRender, graph: TierGraph) -> list[TierId]:
    """Tiers in apply order (dependencies first, ties by name), cycle members last."""
    order = graph.order()
    return order + [t for t in render.tiers if t not in order]


def build_report(render: ClusterRender, graph: TierGraph, findings: list[Finding], cold_start: ColdStart | None = None) -> CheckReport:
    """Assemble the report: tiers in apply order (cycle members last), findings sorted errors first."""
    order = _apply_order(render, graph)
    tiers = tuple(
        TierSummary(
            id=t.spec.id,
            path=t.spec.path,
            source=t.spec.source,
            depends_on=t.spec.depends_on,
            wait=t.spec.wait,
            prune=t.spec.prune,
            objects=len(t.manifests),
            rendered=t.rendered,
            source_path=t.spec.source_path,
            kube_config=t.spec.kube_config,
            defined_in=t.spec.defined_in,
        )
        for t in (render.tiers[tid] for tid in order)
    )
    unique = list(dict.fromkeys(findings))
    return CheckReport(
        cluster=render.cluster,
        entry=render.entry,
        tiers=tiers,
        order=tuple(order),
        findings=tuple(sorted(unique, key=Finding.sort_key)),
        cold_start=cold_start,
    )


__all__ = ["CheckOptions", "RepoConfig", "check_repository", "check_snapshot", "render_repository"]


def commit_clusters(repo_dir: Path, rev: str) -> tuple[str, ...]:
    """The cluster names of commit `rev` as `check` finds them: its `.fluxwarden.yaml`, else the discovery
    (bot/engine/config.py known_clusters). The bot reads them from the base branch: a PR never decides its clusters."""
    from bot.adapters import git as gitrepo  # GitPython: only for committed trees
    from bot.engine.config import load_repo_config

    with tempfile.TemporaryDirectory(prefix="fluxwarden-clusters-") as tmp:
        with gitrepo.commit_snapshot(repo_dir, rev, Path(tmp) / "tree") as (_, snapshot):
            config = load_repo_config(snapshot.read_config())
            return tuple(sorted(known_clusters(config, snapshot)))
