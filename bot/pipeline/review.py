"""`check --base`: both sides of a change rendered, diffed object by object, findings judged new or not."""

from __future__ import annotations

import itertools
import re
import tempfile
from contextlib import ExitStack
from dataclasses import dataclass, replace
from pathlib import Path

from bot.adapters import git as gitrepo
from bot.engine.diff import ClusterDiff, diff_clusters, prune_transient_findings
from bot.engine.coldstart import compare
from bot.engine.config import CONFIG_FILE, RepoConfig, load_repo_config
from bot.pipeline.check import Analysis, CheckOptions, analyse, build_report, make_renderer, run_cache
from bot.engine.errors import UserError
from bot.adapters.kustomize import locate_kustomize
from bot.engine.live import LiveState, Move, ObjectFetcher, evaluate_preconditions, required_tier_ids
from bot.engine.model import Finding, Severity, SourceLocation, TierId
from bot.pipeline.renderer import PriorBuilds, Renderer
from bot.engine.report import CheckReport
from bot.adapters.workspace import build_snapshot


@dataclass(frozen=True)
class ReviewedFinding:
    """A head-side finding, marked new when the base side did not have it."""

    finding: Finding
    new: bool


@dataclass(frozen=True)
class ClusterReview:
    """What a change does to one cluster."""

    cluster: str
    base_sha: str
    head_sha: str | None  # None: the working tree
    head: CheckReport
    diff: ClusterDiff
    findings: tuple[ReviewedFinding, ...]
    changed_files: frozenset[str]
    changed_tiers: frozenset[TierId]
    kustomize_builds: int = 0  # builds actually run (the rest came from the cache)
    # with a live state: the tiers whose live preconditions were checked (changed ∪ move ends ∪ required)
    precondition_tiers: frozenset[TierId] = frozenset()
    cold_start_change: str | None = None  # `this change resolves a cold-start deadlock` (bot/engine/coldstart.py compare)
    resolved: tuple[Finding, ...] = ()  # base findings the head no longer has (what the change fixes)

    @property
    def new_errors(self) -> int:
        return sum(1 for f in self.findings if f.new and f.finding.severity == Severity.ERROR)

    @property
    def new_warnings(self) -> int:
        return sum(1 for f in self.findings if f.new and f.finding.severity == Severity.WARNING)


# Checks whose findings are about one variable of an object: two variables, two findings.
_VARIABLE_CHECKS = frozenset({"undefined-variable", "literal-token"})
_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)")


def _subject(finding: Finding) -> tuple:
    """What a finding is about, on either side: check + object (+ variable), not its tier.

    An object moved to another tier keeps its findings (a problem it only moved is not new); a
    finding about no object is about its tier and file. Messages may change (counts), the subject not.
    """
    if finding.object is not None:
        variable = _VARIABLE.search(finding.message) if finding.check in _VARIABLE_CHECKS else None
        return (finding.check, finding.severity, finding.object.identity, variable.group(1) if variable else None)
    return (finding.check, finding.severity, finding.kustomization, finding.location.file if finding.location else None)


# Findings that say the head was not checked: never "pre-existing", or a cluster that renders
# nothing on both sides would pass every change.
ALWAYS_NEW = frozenset({"nothing-rendered"})


def _pair(head: tuple[Finding, ...], base: tuple[Finding, ...]) -> tuple[list[bool], list[bool]]:
    """Which head and which base findings pair up, each used once: exact (subject and message) first, then subject."""
    head_paired, base_paired = [False] * len(head), [False] * len(base)
    for same in (lambda f: (_subject(f), f.message), _subject):
        waiting: dict = {}
        for j, f in enumerate(base):
            if not base_paired[j] and f.check not in ALWAYS_NEW:
                waiting.setdefault(same(f), []).append(j)
        for i, f in enumerate(head):
            if not head_paired[i] and waiting.get(same(f)):
                base_paired[waiting[same(f)].pop(0)] = True
                head_paired[i] = True
    return head_paired, base_paired


def mark_new(head: tuple[Finding, ...], base: tuple[Finding, ...]) -> tuple[ReviewedFinding, ...]:
    """Pair head findings with base ones, each base finding used once; unpaired head findings are new.

    Exact matches (same subject and message) pair first, then same subject: a second undefined
    variable in the same object, or a severity raised from info to error, stays new. A finding
    that says nothing was checked (ALWAYS_NEW) is never paired.
    """
    paired, _ = _pair(head, base)
    return tuple(ReviewedFinding(f, not p) for f, p in zip(head, paired))


def resolved_findings(head: tuple[Finding, ...], base: tuple[Finding, ...]) -> tuple[Finding, ...]:
    """The base's errors and warnings that no head finding pairs with: what the change fixes."""
    _, paired = _pair(head, base)
    return tuple(f for f, p in zip(base, paired) if not p and f.severity in (Severity.ERROR, Severity.WARNING) and f.check not in ALWAYS_NEW)


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

    With `live` (read beforehand by bot.kube), the change's live merge preconditions are checked too;
    `fetch_objects` reads the moved objects, which are known only once both sides are rendered.
    """
    if not repo.is_dir():
        raise UserError(f"{repo} is not a directory")
    binary = locate_kustomize(options.kustomize)
    memo: dict = {}  # tiers equal on both sides are finished once
    changed = gitrepo.changed_files(repo, base, head)
    # The CLI passes the default cache dir unless --no-cache.
    with run_cache(cache_dir, binary) as cache, tempfile.TemporaryDirectory(prefix="fluxwarden-") as tmp, ExitStack() as stack:
        work = Path(tmp)
        base_sha, base_snapshot = stack.enter_context(gitrepo.commit_snapshot(repo, base, work / "base", cache))
        if config_from_base:
            config = load_repo_config(base_snapshot.read_config())
        head_sha: str | None
        if head is None:
            head_sha, head_snapshot = None, build_snapshot(repo, work / "head")
        else:
            head_sha, head_snapshot = stack.enter_context(gitrepo.commit_snapshot(repo, head, work / "head", cache))
        head_renderer = make_renderer(head_snapshot, binary, options, cache, memo, config=config)
        stack.callback(head_renderer.settle)  # before the work dir goes
        try:
            base_renderer: Renderer | None = make_renderer(base_snapshot, binary, options, cache, memo, config=config)
        except UserError:
            base_renderer = None  # a .fluxwarden.yaml the base cannot read: judged as a new cluster
        # Tiers no changed path touches reuse the base's builds (affected-only rendering). Only for a
        # committed head: a working tree also holds git-ignored files that no diff lists (the
        # content-keyed cache still serves it).
        prior = PriorBuilds(base_renderer, changed) if base_renderer is not None and head_snapshot.tree is not None else None
        if prior is not None:
            head_renderer.build_ahead(prior.touched())  # the touched tiers build while the base renders
        try:
            base_side: Analysis | None = analyse(base_renderer, cluster, live=live, bootstrap=options.bootstrap) if base_renderer is not None else None
        except UserError:
            base_side = None  # the cluster is new in this change
        if prior is not None and base_side is not None:
            head_renderer.reuse(prior)
        head_side = analyse(head_renderer, cluster, live=live, bootstrap=options.bootstrap)
        review = _review(cluster, base_sha, head_sha, base_side, head_side, changed, live, fetch_objects)
        return _with_config_notice(review) if config_from_base and CONFIG_FILE in changed else review


def _with_config_notice(review: ClusterReview) -> ClusterReview:
    """A PR that changes `.fluxwarden.yaml` was judged under the base's: it says so, as a new warning."""
    notice = Finding(
        "config-changed",
        Severity.WARNING,
        f"this change edits {CONFIG_FILE}; it was reviewed under the base branch's configuration "
        "(clusters, required tiers, runtime CRDs, tier order), and the edit takes effect after merge",
        location=SourceLocation(CONFIG_FILE),
    )
    return replace(review, findings=(ReviewedFinding(notice, new=True), *review.findings))


def _review(
    cluster: str, base_sha: str, head_sha: str | None, base: Analysis | None, head: Analysis, changed: frozenset[str],
    live: LiveState | None = None, fetch_objects: ObjectFetcher | None = None,
) -> ClusterReview:
    diff = diff_clusters(base.render if base else None, head.render)
    transient = [_with_line(f, head) for f in prune_transient_findings(diff, base.render if base else None, head.render)]
    findings = [*head.report.findings, *transient]
    report = build_report(head.render, head.graph, findings, head.report.cold_start)
    reviewed = mark_new(report.findings, base.report.findings if base else ())
    touched = {tid for tid, tier in head.render.tiers.items() if tier.inputs & changed}
    if base:
        touched |= {tid for tid, tier in base.render.tiers.items() if tier.inputs & changed}
    touched |= diff.changed_tiers()
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
