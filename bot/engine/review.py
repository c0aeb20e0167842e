"""A change judged against its base: which head findings are new, which base findings it resolves (pure)."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from bot.engine.config import CONFIG_FILE
from bot.engine.releases import ReleaseChanges
from bot.engine.diff import ClusterDiff
from bot.engine.model import Finding, Severity, SourceLocation, TierId
from bot.engine.report import CheckReport


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
    releases: ReleaseChanges = ReleaseChanges()  # how the change moves each HelmRelease's rendered chart

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
