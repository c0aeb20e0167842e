"""Precheck a PR for each cluster: a "running" comment and pending status, then the review, reconciled in place.

One comment per PR and cluster, found by a hidden marker and edited (bedevere's trick); a commit
status `fluxwarden/<cluster>` on the head SHA; a check run when the bot is a GitHub App. Infrastructure
trouble is `error`, never `success`; a result for an old SHA never overwrites a newer one.

Here: the states (running, result, error), the status name (`status_context`, which every handler and the claims
use) and `Precheck`, from a plan to the state GitHub should show and reconciling GitHub to it. Its runs on the
service's queue (claims, writing a refused final state again) are handlers/precheck_runs.py's.
"""

from __future__ import annotations

import asyncio
import logging
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Protocol

from bot.engine.core import markdown as md
from bot.engine.core.errors import FluxwardenError, InfraError, UserError
from bot.engine.chatops.github_models import CheckAnnotation
from bot.engine.core.github_limits import MAX_CHECK_TEXT, MAX_STATUS_DESCRIPTION
from bot.engine.chatops.jobs import PrecheckPlan
from bot.engine.core.model import Cause, Finding, Severity, plural
from bot.engine.reporting.review import ALWAYS_NEW, ClusterReview
from bot.pipeline.review import review_repository
from bot.engine.reporting.review_report import format_review_markdown, review_verdict
from bot.pipeline.check import CheckOptions
from bot.engine.livestate.live import LiveState, ObjectFetcher
from handlers.context import Counters, Live, PrecheckGit, PrecheckGitHub

log = logging.getLogger(__name__)

STATUS_CONTEXT = "fluxwarden/{cluster}"  # built by status_context, read back by cluster_of_context
OPERATIONS = ("comment", "status", "check_run")  # what reconciling a state writes on GitHub
COMMENT_MARKER = "fluxwarden:precheck:{cluster}"
_LOGIN = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})(?:\[bot\])?")  # a GitHub login (what GitHub allows)


class Reviewer(Protocol):
    """Reviews a change for one cluster in a mirror (bot/pipeline/review.py's review_repository; blocking)."""

    def __call__(
        self, repo: Path, cluster: str, base: str, head: str | None = None, options: CheckOptions = ..., cache_dir: Path | None = None,
        live: LiveState | None = None, fetch_objects: ObjectFetcher | None = None, *, config_from_base: bool = False,
    ) -> ClusterReview: ...


@dataclass(frozen=True)
class Status:
    """A commit status to set."""

    state: str  # pending | success | failure | error
    description: str


@dataclass(frozen=True)
class DesiredState:
    """What GitHub should show for one PR and cluster."""

    comment: tuple[str, ...]
    status: Status
    conclusion: str | None  # for the check run; None while running
    annotations: tuple[CheckAnnotation, ...] = ()  # check-run annotations on the files that carry findings


ANNOTATION_LEVEL = {Severity.ERROR: "failure", Severity.WARNING: "warning", Severity.INFO: "notice"}


def annotations_for(review: ClusterReview) -> tuple[CheckAnnotation, ...]:
    """One check-run annotation per finding that has a `file:line` (GitHub needs a line to place it)."""
    out: list[CheckAnnotation] = []
    for reviewed in review.findings:
        f = reviewed.finding
        if f.location is None or not f.location.line:
            continue
        out.append({
            "path": f.location.file,
            "start_line": f.location.line,
            "end_line": f.location.line,
            "annotation_level": ANNOTATION_LEVEL[f.severity],
            "title": f"{f.check}{' (new)' if reviewed.new else ''}",
            "message": f.message[:64000],
        })
    return tuple(out)


def blob_base(plan: PrecheckPlan) -> str:
    """Where `file:line` links point: the PR head on the repository's own web host (GitHub Enterprise too)."""
    url = plan.clone_url
    if url.startswith("https://"):
        return f"{url.removesuffix('.git').rstrip('/')}/blob/{plan.head_sha}"
    return f"https://github.com/{plan.repo}/blob/{plan.head_sha}"


def _marker(cluster: str) -> str:
    return COMMENT_MARKER.format(cluster=md.comment(cluster))


def _trigger(trigger: str) -> str:
    """What started the run (`/precheck by @alice`): the commenter, a GitHub login, is the only mention."""
    words, by, login = trigger.rpartition(" by @")
    if by and _LOGIN.fullmatch(login):
        return f"{md.text(words)} by @{login}"
    return md.text(trigger)


def running_state(plan: PrecheckPlan, cluster: str) -> DesiredState:
    """Shown while the run is under way."""
    body = (
        f"<!-- {_marker(cluster)} -->\n### ⏳ Fluxwarden precheck of {md.code(cluster)} is running\n\n"
        f"Rendering {md.code(plan.base_ref)} and `{plan.head_sha[:12]}` ({_trigger(plan.trigger)}). This comment is updated when it is done.\n"
    )
    return DesiredState((body,), Status("pending", f"precheck of {cluster} {RESUMED if plan.resumed else 'running'}"), None)


RESUMED = "running again after the checker stopped"  # a resumed run's status (handlers/restart.py reads it)
INTERRUPTED = "interrupted (checker stopped); re-run pending"  # a run cancelled by a graceful shutdown
STOPPED_THE_CHECKER = (
    "this PR stopped the checker: it was running when the checker stopped, and again when it was re-run. "
    "It is not re-run on its own; comment `/precheck {cluster}` to try again"
)


def result_state(review: ClusterReview, link_base: str | None = None, base: str | None = None) -> DesiredState:
    """The review itself: comment parts, and a status from the findings this PR adds (`base`: the branch it was judged against)."""
    parts = tuple(format_review_markdown([review], link_base=link_base, marker=_marker(review.cluster)))
    if base is not None:
        # A verdict holds for the base it was computed against only; say which (a retarget re-runs it).
        head, _, rest = parts[0].partition("\n")
        parts = (f"{head}\nJudged against {md.code(base)}.\n{rest}", *parts[1:])
    verdict = review_verdict(review)
    stopped = resource_failure(review)
    # A build stopped by a limit (timed out, killed, output cap) says nothing about the PR, new or not
    # (killed on both sides even pairs up as "pre-existing"): it is `error`, never `failure` nor `success`;
    # so is what it left unrendered (bot.engine.reporting.review.ALWAYS_NEW).
    new_errors = sum(
        1 for f in review.findings
        if f.new and f.finding.severity == Severity.ERROR and not _stopped(f.finding) and not (stopped is not None and f.finding.check in ALWAYS_NEW)
    )
    against = f" (vs {base})" if base is not None else ""
    if new_errors:
        status = Status("failure", f"{plural(new_errors, 'new error')} in {review.cluster}{against}"[:MAX_STATUS_DESCRIPTION])
    elif stopped is not None:
        status = Status("error", f"{review.cluster}: could not render {stopped}"[:MAX_STATUS_DESCRIPTION])
        head, _, rest = parts[0].partition("\n")
        rerun = md.code(f"/precheck {review.cluster}")
        parts = (f"{head}\n> [!WARNING]\n> Not a verdict: could not render {md.rich(stopped)}. Re-run with {rerun}.\n\n{rest}", *parts[1:])
    else:
        warnings = f", {plural(review.new_warnings, 'new warning')}" if review.new_warnings else ""
        status = Status("success", f"{review.cluster}: no new errors{warnings}{against}"[:MAX_STATUS_DESCRIPTION])
    conclusion = "failure" if new_errors or stopped else ("neutral" if verdict == Severity.WARNING else "success")
    return DesiredState(parts, status, conclusion, annotations_for(review))


def _stopped(finding: Finding) -> bool:
    """A `render-failed` whose build was stopped by a limit (bot.adapters.kustomize raised BuildStopped), not failed by its input."""
    # A build stopped by a limit (time, killed, the memory of all renders): no verdict either way.
    return finding.check in ("render-failed", "render-limit") and finding.cause is Cause.STOPPED


def resource_failure(review: ClusterReview) -> str | None:
    """`tier: message` of a head-side build stopped by a limit (killed, timed out), new or pre-existing."""
    for reviewed in review.findings:
        f = reviewed.finding
        if _stopped(f):
            return f"{f.kustomization}: {f.message}" if f.kustomization else f.message
    return None


def error_state(cluster: str, message: str, *, infrastructure: bool) -> DesiredState:
    """A run that could not produce a review: `error` for our trouble, `failure` for the repo's."""
    title = "could not run" if infrastructure else "cannot check this PR"
    body = f"<!-- {_marker(cluster)} -->\n### ❌ Fluxwarden precheck of {md.code(cluster)} {title}\n\n{md.rich(message, 4000)}\n"
    state = "error" if infrastructure else "failure"
    return DesiredState((body,), Status(state, message[:MAX_STATUS_DESCRIPTION]), "failure")


def retargeted_description(cluster: str, judged: str, now: str) -> str:
    """The pending status of a verdict for a base the PR no longer targets (never left `success`)."""
    return f"{cluster} was judged against {judged}; the PR now targets {now}: re-run pending"[:MAX_STATUS_DESCRIPTION]


def status_context(cluster: str) -> str:
    """The commit status (and check run) name of `cluster`'s precheck."""
    return STATUS_CONTEXT.format(cluster=cluster)


def cluster_of_context(context: str) -> str | None:
    """The cluster whose precheck status `context` is (None: not a precheck's)."""
    prefix = status_context("")
    return context.removeprefix(prefix) if context.startswith(prefix) else None


def interrupted_description(cluster: str) -> str:
    """The pending status of a run a graceful shutdown cancelled (the next start re-runs it as a plain run)."""
    return f"precheck of {cluster} {INTERRUPTED}"


@dataclass
class Precheck:
    """One cluster's precheck: from a plan to the state GitHub should show, and reconciling GitHub to it."""

    github: PrecheckGitHub
    git: PrecheckGit
    live: Live | None  # reads the clusters the settings configure live, for live preconditions (None: never live)
    metrics: Counters
    cache_dir: Path
    options: CheckOptions = field(default_factory=CheckOptions)
    run_timeout: float = 900.0
    target_url: str | None = None
    reviewer: Reviewer = review_repository  # the handler tests review in memory
    _reviewing: list = field(default_factory=list, repr=False)  # one entry per review thread still running (cancelled runs too)

    async def desired(self, plan: PrecheckPlan, cluster: str) -> tuple[DesiredState, str]:
        """The final state of one cluster's run and its verdict: the review's, or why there is none."""
        try:
            review = await asyncio.wait_for(self.review(plan, cluster), timeout=self.run_timeout)
        except asyncio.TimeoutError:
            return error_state(cluster, f"the run took longer than {self.run_timeout:g}s", infrastructure=True), "error"
        except UserError as exc:
            return error_state(cluster, str(exc), infrastructure=False), "failure"
        except FluxwardenError as exc:
            return error_state(cluster, f"infrastructure error: {exc}", infrastructure=True), "error"
        except Exception as exc:  # a bug must still end in a failed status, never a pending one
            log.exception("precheck %s#%s %s crashed", plan.repo, plan.number, cluster)
            return error_state(cluster, f"internal error ({type(exc).__name__})", infrastructure=True), "error"
        desired = result_state(review, link_base=blob_base(plan), base=plan.base_ref)
        return desired, desired.status.state

    async def review(self, plan: PrecheckPlan, cluster: str) -> ClusterReview:
        """Read the cluster's live state (when configured; a failed read is recorded, not raised), then review in a thread."""
        is_live = self.live is not None and self.live.configured(plan.repo, cluster)
        live = await self.live.read_state(plan.repo, cluster) if is_live and self.live is not None else None
        return await asyncio.to_thread(self._review, plan, cluster, live)

    @property
    def reviewing(self) -> int:
        """Review threads still running: a cancelled run's thread goes on until its builds are stopped."""
        return len(self._reviewing)

    def _review(self, plan: PrecheckPlan, cluster: str, live: LiveState | None = None) -> ClusterReview:
        """Fetch base and head into the mirror and review the change (blocking; runs in a thread)."""
        marker = object()
        self._reviewing.append(marker)  # list.append/remove are atomic under the GIL
        try:
            return self._review_in_thread(plan, cluster, live)
        finally:
            self._reviewing.remove(marker)

    def _review_in_thread(self, plan: PrecheckPlan, cluster: str, live: LiveState | None) -> ClusterReview:
        fetched = self.git.revisions(plan.clone_url, f"refs/heads/{plan.base_ref}", f"refs/pull/{plan.number}/head")
        if fetched.head_sha != plan.head_sha:
            raise InfraError(f"the PR head moved to {fetched.head_sha[:12]} while fetching; a newer run follows")
        # Review what the PR changes: from the merge base, as GitHub's "Files changed" does.
        base = self.git.merge_base(fetched.mirror, fetched.base_sha, fetched.head_sha)
        fetch_objects = None
        options = self.options
        if live is not None and self.live is not None:
            fetch_objects = self.live.object_reader(plan.repo, cluster)  # moved objects: read in this thread, on its own loop
            options = replace(options, live_config=self.live.config_reader(plan.repo, cluster))  # substituteFrom sources git lacks
        return self.reviewer(
            fetched.mirror, cluster, base, fetched.head_sha, options, cache_dir=self.cache_dir, live=live, fetch_objects=fetch_objects,
            config_from_base=True,  # a PR never decides what its clusters are
        )

    async def retargeted(self, plan: PrecheckPlan, cluster: str) -> bool:
        """Whether the PR targets another base than the run judged; if so its status is set pending instead of the verdict.

        Branch protection reads statuses on the head commit, whatever base the PR has, so a verdict for an
        old base must never land there (a retarget's own run writes the new verdict). A read GitHub refuses
        is no evidence of a retarget: the `edited` delivery supersedes such a run anyway.
        """
        try:
            pull = await asyncio.to_thread(self.github.pull_request, plan.repo, plan.number)
        except FluxwardenError as exc:
            log.warning("cannot re-read %s#%s before its final status: %s", plan.repo, plan.number, exc)
            return False
        if pull.base_ref == plan.base_ref:
            return False
        log.info("%s#%s %s was judged against %s but now targets %s: not writing its verdict", plan.repo, plan.number, cluster, plan.base_ref, pull.base_ref)
        pending = DesiredState((), Status("pending", retargeted_description(cluster, plan.base_ref, pull.base_ref)), None)
        await self.reconcile(plan, cluster, pending, skip=("comment",))
        return True

    async def reconcile(self, plan: PrecheckPlan, cluster: str, desired: DesiredState, skip: tuple[str, ...] = ()) -> tuple[str, ...]:
        """Make GitHub show `desired` (comment edited in place, status, check run); the operations GitHub refused
        (logged and counted) are returned."""
        context = status_context(cluster)
        steps: list[tuple[str, Callable[[], object]]] = [
            ("comment", lambda: self.github.upsert_comments(plan.repo, plan.number, _marker(cluster), list(desired.comment))),
            ("status", lambda: self.github.set_status(plan.repo, plan.head_sha, context, desired.status.state, desired.status.description, self.target_url)),
        ]
        if self.github.is_app:
            steps.append(("check_run", lambda: self.github.upsert_check_run(
                plan.repo, plan.head_sha, context,
                status="completed" if desired.conclusion else "in_progress",
                conclusion=desired.conclusion,
                title=desired.status.description,
                summary=desired.comment[0][:MAX_CHECK_TEXT] if desired.comment else desired.status.description,
                annotations=list(desired.annotations),
            )))
        failed = []
        for operation, call in steps:
            if operation in skip:
                continue
            try:
                await asyncio.to_thread(call)
            except InfraError as exc:
                failed.append(operation)
                self.metrics.github_errors.labels(operation).inc()
                log.warning("GitHub %s for %s#%s %s failed: %s", operation, plan.repo, plan.number, cluster, exc)
        return tuple(failed)
