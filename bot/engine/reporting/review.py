"""A change judged against its base: which head findings are new, which base findings it resolves (pure)."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from bot.engine.render.config import CONFIG_FILE
from bot.engine.reporting.releases import ReleaseChanges
from bot.engine.reporting.diff import ClusterDiff
from bot.engine.core.model import Finding, Severity, SourceLocation, TierId
from bot.engine.reporting.report import CheckReport


@dataclass(frozen=True)
class ReviewedFinding:
    """A head-side finding, marked new when the base side did not have it."""

    finding: Finding
    new: bool
    # new only as a knock-on of another new finding (its tier now deadlocks, ...): shown under that cause
    caused_by: Finding | None = None


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
    cold_start_change: str | None = None  # `this change resolves a cold-start deadlock` (bot/engine/tiergraph/coldstart.py compare)
    resolved: tuple[Finding, ...] = ()  # base findings the head no longer has (what the change fixes)
    releases: ReleaseChanges = ReleaseChanges()  # how the change moves each HelmRelease's rendered chart

    @property
    def new_errors(self) -> int:
        return sum(1 for f in self.findings if f.new and f.caused_by is None and f.finding.severity == Severity.ERROR)

    @property
    def new_warnings(self) -> int:
        return sum(1 for f in self.findings if f.new and f.caused_by is None and f.finding.severity == Severity.WARNING)


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


def _regraded(finding: Finding) -> tuple:
    """A subject without its severity: the same problem, graded otherwise."""
    return (_subject(finding)[0], *_subject(finding)[2:])


def mark_new(head: tuple[Finding, ...], base: tuple[Finding, ...]) -> tuple[ReviewedFinding, ...]:
    """Pair head findings with base ones, each base finding used once; unpaired head findings are new.

    Exact matches (same subject and message) pair first, then same subject: a second undefined
    variable in the same object, or a severity raised from info to error, stays new. A finding
    that says nothing was checked (ALWAYS_NEW) is never paired. A new finding the base had under
    another severity, in a tier that has a finding new in every respect (and at least as severe), is
    that one's consequence (`caused_by`): the tier's grade moved because of it, the problem is old.
    """
    paired, _ = _pair(head, base)
    before = {_regraded(f) for f in base if f.check not in ALWAYS_NEW}
    new = [f for f, p in zip(head, paired) if not p]
    causes: dict[TierId, Finding] = {}
    for f in sorted((f for f in new if _regraded(f) not in before and f.kustomization is not None), key=lambda f: f.severity.rank):
        causes.setdefault(f.kustomization, f)  # type: ignore[arg-type]
    out = []
    for f, p in zip(head, paired):
        cause = causes.get(f.kustomization) if not p and f.kustomization is not None and _regraded(f) in before else None
        # never under a milder cause: the verdict counts causes only
        out.append(ReviewedFinding(f, not p, cause if cause is not None and cause.severity.rank <= f.severity.rank else None))
    return tuple(out)


_CYCLE = re.compile(r"dependsOn forms a cycle: ([^;]+);")


def cycle_path(f: Finding) -> tuple[TierId, ...]:
    """The tiers of a dependency-cycle finding, in dependsOn order (each depends on the next; the first repeats last)."""
    m = _CYCLE.search(f.message) if f.check == "dependency-cycle" else None
    if not m:
        return ()
    try:
        return tuple(TierId.parse(p.strip()) for p in m.group(1).split("→"))
    except ValueError:
        return ()


def unjudged_tiers(findings: tuple[Finding, ...]) -> frozenset[TierId]:
    """Tiers these findings say were not judged: a render that failed, a dependsOn cycle Flux never applies."""
    out = {f.kustomization for f in findings if f.check == "render-failed" and f.kustomization is not None}
    for f in findings:
        out.update(cycle_path(f))
    return frozenset(out)


def resolved_findings(head: tuple[Finding, ...], base: tuple[Finding, ...]) -> tuple[Finding, ...]:
    """The base's errors and warnings that no head finding pairs with: what the change fixes.

    A finding on a tier the head could not judge (render-failed, a cycle) is hidden, not fixed; one
    the head has under another severity is re-graded, not fixed.
    """
    head_paired, paired = _pair(head, base)
    hidden = unjudged_tiers(head) - unjudged_tiers(base)
    regraded = {_regraded(f) for f, p in zip(head, head_paired) if not p}
    return tuple(
        f for f, p in zip(base, paired)
        if not p and f.severity in (Severity.ERROR, Severity.WARNING) and f.check not in ALWAYS_NEW
        and f.kustomization not in hidden and _regraded(f) not in regraded
    )


def with_config_notice(review: ClusterReview) -> ClusterReview:
    """A PR that changes `.fluxwarden.yaml` was judged under the base's: it says so, as a new warning."""
    notice = Finding(
        "config-changed",
        Severity.WARNING,
        f"this change edits {CONFIG_FILE}; it was reviewed under the base branch's configuration "
        "(clusters, required tiers, runtime CRDs, tier order), and the edit takes effect after merge",
        location=SourceLocation(CONFIG_FILE),
    )
    return replace(review, findings=(ReviewedFinding(notice, new=True), *review.findings))
