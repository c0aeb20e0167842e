"""`check`: snapshot the repo, render the cluster (and its siblings for graph-drift), run the checks."""

from __future__ import annotations

import gc
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from bot.adapters.memory import check_stop
from bot.engine.tiergraph.bootstrap import Bootstrap, discover_bootstrap
from bot.engine.tiergraph.checks import CheckContext
from bot.engine.render.config import ClusterEntry, RepoConfig, cluster_entries, cluster_entry, known_clusters
from bot.engine.core.errors import UserError
from bot.engine.tiergraph.graph import TierGraph
from bot.engine.render.knowledge import default_knowledge
from bot.engine.core.model import TierId
from bot.engine.livestate.live import LiveProviderIndex, LiveState, evaluate_preconditions, required_tier_ids
from bot.engine.tiergraph.providers import ProviderIndex
from bot.engine.render.facts import TierFacts
from bot.engine.render.yamlio import share_mapping_keys
from bot.engine.render.rendered import ClusterRender, RenderedTier
from bot.engine.reporting.report import CheckReport
from bot.engine.reporting.verdict import apply_order, build_report, cluster_findings
from bot.pipeline.memo import FactsStore, FindingsMemo
from bot.pipeline.releases import releases_key, render_releases
from bot.pipeline.renderer import Renderer
from bot.pipeline.session import CheckOptions, Session, open_run


def tune_gc() -> None:
    """Collect garbage less often: a render holds millions of long-lived, acyclic dicts and strings.

    With CPython's default thresholds (700, 10, 10) every few thousand allocations trigger a
    collection and the oldest generation is swept over and over while those objects are built:
    a third of a warm one-tier review on a 20,000-object repo (bench/run.py). Cycles are still
    collected, only less eagerly. Process-wide, so it is called once by the entry points.
    """
    gc.set_threshold(100_000, 50, 100)


@contextmanager
def one_command() -> Iterator[None]:
    """How a process that runs one CLI command and ends runs it; the settings before are restored after.

    No cyclic garbage collection: even a young-generation pass walks every object read from the cache since
    the last one (two passes, 63 ms, of a warm one-chart bump review, bench/run.py --charts), and the render
    makes no cyclic garbage worth a pass (a cold check of that 20,000-object repository peaks at 202 MiB with
    the collector and without it). Parsed YAML keeps one string per distinct mapping key
    (yamlio.share_mapping_keys): that check's peak goes from 202 to 160 MiB.
    """
    enabled = gc.isenabled()
    gc.disable()
    shared = share_mapping_keys(True)
    try:
        yield
    finally:
        share_mapping_keys(shared)
        if enabled:
            gc.enable()


def check_repository(
    repo: Path, cluster: str, options: CheckOptions = CheckOptions(), live: LiveState | None = None, config: RepoConfig | None = None
) -> CheckReport:
    """Check one cluster of the repository at `repo` (a working tree); with `live`, also its live preconditions.

    `config` stands in for the repository's `.fluxwarden.yaml` (`--config FILE`); None reads the tree's.
    """
    if not repo.is_dir():
        raise UserError(f"{repo} is not a directory")
    with open_run(options) as run:
        return check_session(run.tree(repo, config=config), cluster, live=live, bootstrap=options.bootstrap)


def check_repositories(
    repo: Path, clusters: list[str], options: CheckOptions = CheckOptions(), live: LiveState | None = None, config: RepoConfig | None = None
) -> list[CheckReport]:
    """Check several clusters of one working tree in one run (one snapshot, one cache), in the order given."""
    if not repo.is_dir():
        raise UserError(f"{repo} is not a directory")
    with open_run(options) as run:
        session = run.tree(repo, config=config)
        return [check_session(session, cluster, live=live, bootstrap=options.bootstrap) for cluster in clusters]


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
    with open_run(options) as run:
        session = run.tree(repo, config=config)
        renderer = session.renderer()
        render = renderer.render_cluster(cluster, cluster_entry(session.config, cluster, session.snapshot))
        if renderer.charts is not None:
            facts = FactsStore(default_knowledge(), renderer.cache, renderer.memo).of_render(render)
            render = render_releases(render, facts, renderer.charts, session.config, session.snapshot, kube_version=session.config.kube_version(cluster), progress=renderer.progress)
        yield BuiltCluster(render, tuple(apply_order(render, TierGraph(t.spec for t in render.tiers.values()))))


@dataclass(frozen=True)
class Analysis:
    """One cluster of one snapshot: its render, graph, findings and report."""

    render: ClusterRender
    graph: TierGraph
    report: CheckReport
    renderer: Renderer


def check_session(session: Session, cluster: str, live: LiveState | None = None, bootstrap: bool = True) -> CheckReport:
    """Check one cluster of a session's snapshot.

    With `live` (no change to review), every tier of the cluster must be ready on it: the merge
    preconditions of a change that could touch any of them.
    """
    analysis = analyse(session.renderer(), cluster, live=live, bootstrap=bootstrap)
    if live is None:
        return analysis.report
    required = required_tier_ids(session.config.required_tiers.get(cluster, ()))
    preconditions = evaluate_preconditions(live, analysis.graph.specs, {*analysis.render.tiers, *required})
    return build_report(analysis.render, analysis.graph, [*analysis.report.findings, *preconditions], analysis.report.cold_start)


def analyse(renderer: Renderer, cluster: str, live: LiveState | None = None, bootstrap: bool = True, changed: frozenset[str] = frozenset()) -> Analysis:
    """Render a cluster (and its siblings, for graph-drift) and run every check.

    With `live`, CRDs on the cluster are providers too (who made them decides their tier), and an
    info line says which providers came from the cluster. With `bootstrap` (the default), what the
    repository installs before Flux starts is discovered once and each assumption is an info line;
    without, a bare cluster is judged.
    """
    snapshot, config, cache, binary = renderer.snapshot, renderer.config, renderer.cache, renderer.binary
    entry = cluster_entry(config, cluster, snapshot)
    knowledge = default_knowledge().with_user_rules(list(config.runtime_crds)).with_aliases(config.chart_aliases)
    facts = FactsStore(knowledge, cache, renderer.memo)
    charts = renderer.charts

    def finished(tier: RenderedTier) -> TierFacts:
        tier_facts = facts.of(tier)
        if charts is not None:
            charts.saw(tier_facts)
        return tier_facts

    # The checks read every tier's facts: taken as tiers finish, while others still build.
    render = renderer.render_cluster(cluster, entry, on_finished=facts.of)
    check_stop()
    # A Helm worker starts at the first tier with a HelmRelease, once no kustomize build runs (beside three
    # builds it was the cold check's peak of memory) and before the cache is read (a warm review's first side
    # is one cache entry: its facts are read here, while the worker starts on the other core).
    tier_facts = {tid: finished(tier) for tid, tier in render.tiers.items()}
    if charts is not None:
        render = render_releases(render, tier_facts, charts, config, snapshot, kube_version=config.kube_version(cluster), changed=changed, progress=renderer.progress)
    graph = TierGraph(t.spec for t in render.tiers.values())
    # A commit checked before (the base of most reviews) has the same findings: its tree id, this
    # code, this kustomize and what its charts rendered to say so. Not with a live state, which changes between runs.
    # (A change's files judge its not-rendered charts: a HelmRelease it edits is a warning, so they key it too.)
    outcomes = releases_key(render, changed) if render.releases else ""
    memo = FindingsMemo.of(cache if live is None else None, snapshot, config, cluster, binary, bootstrap, outcomes)
    cached = memo.get()
    findings, cold_start = cached if cached is not None else (None, None)
    if findings is None:
        others = {
            name: TierGraph(t.spec for t in renderer.render_cluster(name, path, graph_only=True).tiers.values())
            for name, path in sorted(known_clusters(config, snapshot).items())
            if name != cluster
        }
        check_stop()
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
        check_stop()
        findings = cluster_findings(ctx, bootstrap)
        cold_start = ctx.cold_start
        stopped = any(t.failed for t in render.tiers.values()) or any(f.check == "render-limit" for f in render.findings)
        if not stopped:
            memo.put(findings, cold_start)  # a failed build may be a timeout: never remembered
    return Analysis(render, graph, build_report(render, graph, findings, cold_start), renderer)


def repository_clusters(repo: Path, config: RepoConfig | None = None) -> list[ClusterEntry]:
    """The clusters of the working tree at `repo` as `check` finds them, with each entry path and how it was found."""
    from bot.adapters.workspace import build_snapshot
    from bot.engine.render.config import snapshot_config

    if not repo.is_dir():
        raise UserError(f"{repo} is not a directory")
    with tempfile.TemporaryDirectory(prefix="fluxwarden-clusters-") as tmp:
        snapshot = build_snapshot(repo, Path(tmp))
        return cluster_entries(config if config is not None else snapshot_config(snapshot), snapshot)


__all__ = ["CheckOptions", "RepoConfig", "check_repositories", "check_repository", "repository_clusters", "check_session", "render_repository"]


def commit_clusters(repo_dir: Path, rev: str) -> tuple[str, ...]:
    """The cluster names of commit `rev` as `check` finds them: its `.fluxwarden.yaml`, else the discovery
    (bot/engine/render/config.py known_clusters). The bot reads them from the base branch: a PR never decides its clusters."""
    from bot.adapters import git as gitrepo  # GitPython: only for committed trees
    from bot.engine.render.config import load_repo_config

    with tempfile.TemporaryDirectory(prefix="fluxwarden-clusters-") as tmp:
        with gitrepo.commit_snapshot(repo_dir, rev, Path(tmp) / "tree") as (_, snapshot):
            config = load_repo_config(snapshot.read_config())
            return tuple(sorted(known_clusters(config, snapshot)))
