"""`check --base`: both sides of a change rendered, diffed object by object, findings judged new or not."""

from __future__ import annotations

import itertools
from dataclasses import replace
from pathlib import Path

from bot.adapters import git as gitrepo
from bot.adapters.memory import check_stop
from bot.engine.tiergraph.checks.graph import anchor_cycles
from bot.engine.tiergraph.coldstart import compare
from bot.engine.render.config import CONFIG_FILE, RepoConfig, load_repo_config
from bot.engine.render.remote import added_remote_findings
from bot.engine.reporting.diff import ClusterDiff, diff_clusters, prune_transient_findings
from bot.engine.core.errors import UserError
from bot.engine.livestate.live import LiveState, Move, ObjectFetcher, evaluate_preconditions, required_tier_ids
from bot.engine.core.model import Finding, TierId
from bot.engine.reporting.releases import diff_releases
from bot.engine.reporting.review import ClusterReview, mark_new, resolved_findings, with_config_notice
from bot.engine.reporting.verdict import build_report
from bot.pipeline.check import Analysis, analyse
from bot.pipeline.renderer import PriorBuilds, Renderer
from bot.pipeline.session import CheckOptions, open_run


def _with_line(finding: Finding, side: Analysis) -> Finding:
    """Give a finding about an object the `file:line` of that object on this side."""
    if finding.object is None:
        return finding
    own = side.render.tiers.get(finding.kustomization) if finding.kustomization else None
    # Its own tier first: the other tiers' objects may still be in the cache, unread.
    candidates = itertools.chain(own.manifests if own else (), (m for _, m in side.render.manifests()))
    for manifest in candidates:
        if manifest.ref.identity == finding.object.identity:
            return replace(finding, location=side.renderer.locate(manifest) or finding.location)
    return finding


def review_repository(
    repo: Path, cluster: str, base: str, head: str | None = None, options: CheckOptions = CheckOptions(), cache_dir: Path | None = None,
    live: LiveState | None = None, fetch_objects: ObjectFetcher | None = None, config: RepoConfig | None = None,
    config_from_base: bool = False,
) -> ClusterReview:
    """Render `base` and `head` (default: the working tree) of `repo` and review the change for `cluster`.

    `config` is the configuration of both sides (the CLI passes the working tree's, or `--config`):
    a configuration only the head has (uncommitted, or added by the change) must not make the base
    render differently, or every finding reads as new. None: each side reads its own commit's
    (`--config-from-commit`). `config_from_base`: the base commit's configuration judges both sides —
    the bot's rule, as Atlantis's server-side repo config: a PR must not decide which directory is
    "prod" (a change to `.fluxwarden.yaml` takes effect after merge, and the review says so).

    With `live` (read beforehand by bot.adapters.kube), the change's live merge preconditions are checked too;
    `fetch_objects` reads the moved objects, which are known only once both sides are rendered.
    """
    if not repo.is_dir():
        raise UserError(f"{repo} is not a directory")
    changed = gitrepo.changed_files(repo, base, head)
    # The CLI passes the default cache dir unless --no-cache.
    with open_run(replace(options, cache_dir=cache_dir)) as run:
        base_sha, base_snapshot = run.commit(repo, base, name="base")
        if config_from_base:
            config = load_repo_config(base_snapshot.read_config())
        head_sha: str | None
        if head is None:
            head_sha, head_session = None, run.tree(repo, config=config, name="head")
        else:
            head_sha, head_snapshot = run.commit(repo, head, name="head")
            head_session = run.session(head_snapshot, config=config)
        head_renderer = head_session.renderer()
        run.stack.callback(head_renderer.settle)  # before the work dir goes
        try:
            base_renderer: Renderer | None = run.session(base_snapshot, config=config).renderer()
        except UserError:
            base_renderer = None  # a .fluxwarden.yaml the base cannot read: judged as a new cluster
        # Tiers no changed path touches reuse the base's builds (affected-only rendering). Only for a
        # committed head: a working tree also holds git-ignored files that no diff lists (the
        # content-keyed cache still serves it).
        prior = PriorBuilds(base_renderer, changed) if base_renderer is not None and head_session.snapshot.tree is not None else None
        if prior is not None:
            head_renderer.build_ahead(prior.touched())  # the touched tiers build while the base renders
        if run.charts is not None:
            run.charts.keep_warm = 1  # the head's changed charts render in the worker the base started
        try:
            base_side: Analysis | None = analyse(base_renderer, cluster, live=live, bootstrap=options.bootstrap) if base_renderer is not None else None
        except UserError:
            base_side = None  # the cluster is new in this change
        if run.charts is not None:
            run.charts.fix_source_hosts(())  # a base without a render names no host: the head never adds any
            run.charts.keep_warm = 0
        if prior is not None and base_side is not None:
            head_renderer.reuse(prior)
        check_stop()
        head_side = analyse(head_renderer, cluster, live=live, bootstrap=options.bootstrap, changed=changed)
        check_stop()
        review = _review(cluster, base_sha, head_sha, base_side, head_side, changed, live, fetch_objects)
        return with_config_notice(review) if config_from_base and CONFIG_FILE in changed else review


def _review(
    cluster: str, base_sha: str, head_sha: str | None, base: Analysis | None, head: Analysis, changed: frozenset[str],
    live: LiveState | None = None, fetch_objects: ObjectFetcher | None = None,
) -> ClusterReview:
    diff = diff_clusters(base.render if base else None, head.render)
    releases = diff_releases(base.render if base else None, head.render)
    transient = [_with_line(f, head) for f in prune_transient_findings(diff, base.render if base else None, head.render)]
    added = added_remote_findings(head.render.tiers, base.render.tiers if base else None)
    findings = anchor_cycles(
        [*head.report.findings, *transient, *added], head.graph, changed, head.renderer.snapshot.read_text, base.graph if base else None,
    )
    report = build_report(head.render, head.graph, findings, head.report.cold_start)
    reviewed = mark_new(report.findings, base.report.findings if base else ())
    touched = {tid for tid, tier in head.render.tiers.items() if tier.inputs & changed}
    if base:
        touched |= {tid for tid, tier in base.render.tiers.items() if tier.inputs & changed}
    touched |= diff.changed_tiers()
    touched |= {r.tier for r in releases.releases}
    precondition_tiers: frozenset[TierId] = frozenset()
    if live is not None:
        precondition_tiers, live_findings = _live_preconditions(cluster, live, fetch_objects, diff, base, head, touched)
        report = build_report(head.render, head.graph, [*findings, *live_findings], head.report.cold_start)
        reviewed = mark_new(report.findings, base.report.findings if base else ())
    return ClusterReview(
        cluster=cluster,
        base_sha=base_sha,
        head_sha=head_sha,
        head=report,
        diff=diff,
        findings=reviewed,
        changed_files=changed,
        changed_tiers=frozenset(touched),
        kustomize_builds=head.renderer.builds_run + (base.renderer.builds_run if base else 0),
        precondition_tiers=precondition_tiers,
        cold_start_change=compare(base.report.cold_start if base else None, head.report.cold_start),
        resolved=resolved_findings(report.findings, base.report.findings) if base else (),
        releases=releases,
    )


def _live_preconditions(
    cluster: str, live: LiveState, fetch_objects: ObjectFetcher | None, diff: ClusterDiff, base: Analysis | None, head: Analysis, touched: set[TierId]
) -> tuple[frozenset[TierId], list[Finding]]:
    """The tiers a change touches — changed, losing or gaining moved objects, always-required — judged live."""
    moves = [Move(c.ref, c.from_tier, c.tier) for c in diff.moves if c.from_tier is not None]
    required = set(required_tier_ids(head.renderer.config.required_tiers.get(cluster, ())))
    if base is not None:  # a change cannot drop a requirement for itself
        required |= required_tier_ids(base.renderer.config.required_tiers.get(cluster, ()))
    tiers = frozenset(touched | {m.source for m in moves} | {m.destination for m in moves} | required)
    if moves and live.error is None and fetch_objects is not None:
        live = live.with_objects(fetch_objects([m.ref for m in moves]))
    specs = {**(base.graph.specs if base else {}), **head.graph.specs}
    findings = evaluate_preconditions(
        live, specs, tiers, moves=moves, expected_absent={*diff.added_tiers, *diff.removed_tiers}
    )
    located = [
        replace(f, location=specs[f.kustomization].origin) if f.object is None and f.kustomization in specs else _with_line(f, head)
        for f in findings
    ]
    return tiers, located
