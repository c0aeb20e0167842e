"""Precheck a PR for each cluster: a "running" comment and pending status, then the review, reconciled in place.

One comment per PR and cluster, found by a hidden marker and edited (bedevere's trick); a commit
status `fluxwarden/<cluster>` on the head SHA; a check run when the bot is a GitHub App. Infrastructure
trouble is `error`, never `success`; a result for an old SHA never overwrites a newer one.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from bot.engine import markdown as md
from bot.pipeline.check import CheckOptions
from bot.engine.errors import FluxwardenError, InfraError, UserError
from bot.adapters.kustomize import STOPPED_MESSAGES
from bot.service.metrics import Metrics
from bot.engine.model import Finding, Severity, plural
from bot.engine.review import ALWAYS_NEW, ClusterReview
from bot.pipeline.review import review_repository
from bot.engine.review_report import format_review_markdown, review_verdict
from bot.service.runs import RunQueue, Submitted
from bot.service.claims import RELEASE_TIMEOUT

if TYPE_CHECKING:
    from bot.adapters.kube import ClusterAccess
    from bot.engine.live import LiveState
    from bot.service.settings import ServiceConfig
    from bot.service.claims import Claims

log = logging.getLogger(__name__)

STATUS_CONTEXT = "fluxwarden/{cluster}"
OPERATIONS = ("comment", "status", "check_run")  # what reconciling a state writes on GitHub
FINAL_RETRY_MAX = 120.0  # seconds between attempts to write a refused final state, at most
COMMENT_MARKER = "fluxwarden:precheck:{cluster}"
_LOGIN = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})(?:\[bot\])?")  # a GitHub login (what GitHub allows)


class PrecheckGitHub(Protocol):
    """What prechecking needs from GitHub (the adapter in bot/adapters/github.py provides it)."""

    is_app: bool

    def installation_token(self) -> str | None: ...

    def upsert_comments(self, repo: str, number: int, marker: str, bodies: list[str]) -> list[int]: ...

    def set_status(self, repo: str, sha: str, context: str, state: str, description: str, target_url: str | None = None) -> None: ...

    def upsert_check_run(self, repo: str, sha: str, name: str, *, status: str, conclusion: str | None, title: str, summary: str, text: str | None = None, annotations: list[dict] = ()) -> int: ...


class PrecheckGit(Protocol):
    """What prechecking needs from git (bot.gitrepo.Mirrors provides it)."""

    def revisions(self, clone_url: str, base_ref: str, head_ref: str, token: str | None = None): ...


@dataclass(frozen=True)
class PrecheckPlan:
    """Precheck PR `number` at `head_sha` for `clusters` (the command or event already authorised)."""

    repo: str
    number: int
    head_sha: str
    base_ref: str
    clone_url: str
    clusters: tuple[str, ...]
    trigger: str
    # Re-run at start-up because the checker stopped during the last run (its status says so; see
    # handlers/restart.py): if this run stops the checker too, the next start gives up on it.
    resumed: bool = False


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
    annotations: tuple[dict, ...] = ()  # check-run annotations on the files that carry findings


ANNOTATION_LEVEL = {Severity.ERROR: "failure", Severity.WARNING: "warning", Severity.INFO: "notice"}


def annotations_for(review: ClusterReview) -> tuple[dict, ...]:
    """One check-run annotation per finding that has a `file:line` (GitHub needs a line to place it)."""
    out = []
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


def result_state(review: ClusterReview, link_base: str | None = None) -> DesiredState:
    """The review itself: comment parts, and a status from the findings this PR adds."""
    parts = tuple(format_review_markdown([review], link_base=link_base, marker=_marker(review.cluster)))
    verdict = review_verdict(review)
    stopped = resource_failure(review)
    # A build stopped by a limit (timed out, killed, output cap) says nothing about the PR, new or not
    # (killed on both sides even pairs up as "pre-existing"): it is `error`, never `failure` nor `success`;
    # so is what it left unrendered (bot.review.ALWAYS_NEW).
    new_errors = sum(
        1 for f in review.findings
        if f.new and f.finding.severity == Severity.ERROR and not _stopped(f.finding) and not (stopped is not None and f.finding.check in ALWAYS_NEW)
    )
    if new_errors:
        status = Status("failure", f"{plural(new_errors, 'new error')} in {review.cluster}")
    elif stopped is not None:
        status = Status("error", f"{review.cluster}: could not render {stopped}"[:140])
        head, _, rest = parts[0].partition("\n")
        rerun = md.code(f"/precheck {review.cluster}")
        parts = (f"{head}\n> [!WARNING]\n> Not a verdict: could not render {md.rich(stopped)}. Re-run with {rerun}.\n\n{rest}", *parts[1:])
    else:
        status = Status("success", f"{review.cluster}: no new errors" + (f", {plural(review.new_warnings, 'new warning')}" if review.new_warnings else ""))
    conclusion = "failure" if new_errors or stopped else ("neutral" if verdict == Severity.WARNING else "success")
    return DesiredState(parts, status, conclusion, annotations_for(review))


def _stopped(finding: Finding) -> bool:
    """A `render-failed` whose build was stopped by a limit (bot.kustomize raised BuildStopped), not failed by its input."""
    return finding.check == "render-failed" and finding.message.startswith(STOPPED_MESSAGES)


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
    return DesiredState((body,), Status(state, message[:140]), "failure")


@dataclass
class PrecheckRunner:
    """Schedules runs on the queue and reconciles their results on GitHub."""

    github: PrecheckGitHub
    git: PrecheckGit
    queue: RunQueue
    metrics: Metrics
    cache_dir: Path
    options: CheckOptions = field(default_factory=CheckOptions)
    run_timeout: float = 900.0
    target_url: str | None = None
    service_config: "ServiceConfig | None" = None  # per-cluster kubeconfig/context/in_cluster for live preconditions
    claims: "Claims | None" = None  # several replicas: claim each run on GitHub first (bot/service/claims.py)
    final_retry: float = 5.0  # first wait before writing again a final state GitHub refused (doubles up to FINAL_RETRY_MAX)
    _claimed: dict = field(default_factory=dict, repr=False)  # (key, sha) -> the task writing its running state
    _finalising: dict = field(default_factory=dict, repr=False)  # key -> the task writing a refused final state again
    _reviewing: list = field(default_factory=list, repr=False)  # one entry per review thread still running (cancelled runs too)

    def schedule(self, plan: PrecheckPlan) -> dict[str, Submitted]:
        """Queue one run per cluster; a newer head SHA cancels an older run of the same PR and cluster.

        The pending status (our claim) and the "running" comment are written at once, not when a
        worker frees up: a run still waiting in the queue then survives this process dying (the
        restart/sweep re-runs pending statuses), and a second replica sees the claim.
        """
        outcome = {}
        for cluster in plan.clusters:
            key = (plan.repo, plan.number, cluster)
            outcome[cluster] = self.queue.submit(key, plan.head_sha, lambda c=cluster: self.run(plan, c))
            if outcome[cluster] in (Submitted.STARTED, Submitted.SUPERSEDED):
                retrying = self._finalising.pop(key, None)
                if retrying is not None:
                    retrying.cancel()  # the new run writes its own final state
                for stale in [k for k in self._claimed if k[0] == key and k[1] != plan.head_sha]:
                    self._claimed.pop(stale)  # its run was cancelled; the task itself still finishes
                self._claimed[(key, plan.head_sha)] = asyncio.get_running_loop().create_task(self._claim(plan, cluster))
        self.metrics.queue_depth.set(self.queue.depth)
        return outcome

    async def _claim(self, plan: PrecheckPlan, cluster: str) -> bool:
        """Write the running state (the status is the claim); False when another replica owns this run."""
        running = running_state(plan, cluster)
        context = STATUS_CONTEXT.format(cluster=cluster)
        current = self.queue.is_current((plan.repo, plan.number, cluster), plan.head_sha)
        if self.claims is None:
            # The status belongs to this SHA; the comment only while it is still the newest run.
            await self._reconcile(plan, cluster, running, skip=() if current else ("comment",))
            return True
        if await self.claims.acquire(plan.repo, plan.head_sha, context, running.status.description, self.target_url):
            if current:
                await self._reconcile(plan, cluster, running, skip=("status",))  # the claim is the pending status
            return True
        return False

    async def run(self, plan: PrecheckPlan, cluster: str) -> None:
        """One cluster's run: running state, review (in a worker thread), final state — unless superseded."""
        key = (plan.repo, plan.number, cluster)
        started = time.monotonic()
        self.metrics.queue_depth.set(self.queue.depth)
        claim = self._claimed.pop((key, plan.head_sha), None)
        if not await (claim if claim is not None else self._claim(plan, cluster)):
            return  # another replica runs this SHA and cluster
        try:
            review = await asyncio.wait_for(self._live_review(plan, cluster), timeout=self.run_timeout)
            desired = result_state(review, link_base=blob_base(plan))
            verdict = desired.status.state
        except asyncio.TimeoutError:
            desired, verdict = error_state(cluster, f"the run took longer than {self.run_timeout:g}s", infrastructure=True), "error"
        except UserError as exc:
            desired, verdict = error_state(cluster, str(exc), infrastructure=False), "failure"
        except FluxwardenError as exc:
            desired, verdict = error_state(cluster, f"infrastructure error: {exc}", infrastructure=True), "error"
        except Exception as exc:  # a bug must still end in a failed status, never a pending one
            log.exception("precheck %s#%s %s crashed", plan.repo, plan.number, cluster)
            desired, verdict = error_state(cluster, f"internal error ({type(exc).__name__})", infrastructure=True), "error"
        except asyncio.CancelledError:
            if self.queue.is_current(key, plan.head_sha):  # shutting down, not superseded: say it was not this PR's doing
                await self._interrupted(plan, cluster)
            raise
        if not self.queue.is_current(key, plan.head_sha):
            return  # a newer push owns the comment now
        if self.claims is not None and await self.claims.superseded(plan.repo, plan.number, plan.head_sha):
            return  # a newer push, run by another replica, owns the comment now
        failed = await self._reconcile(plan, cluster, desired)
        if failed:
            self._finalise_later(key, plan, cluster, desired, failed)
        self.metrics.runs.labels(cluster, verdict).inc()
        self.metrics.run_seconds.labels(cluster).observe(time.monotonic() - started)

    def busy(self, key: tuple[str, int, str], sha: str) -> bool:
        """Whether this process still works on `key` at `sha`: queued, running, or writing its final state."""
        return self.queue.running(key, sha) or (key in self._finalising and self.queue.is_current(key, sha))

    def _finalise_later(self, key: tuple[str, int, str], plan: PrecheckPlan, cluster: str, desired: DesiredState, failed: tuple[str, ...]) -> None:
        task = asyncio.get_running_loop().create_task(self._finalise(plan, cluster, desired, failed), name=f"finalise {plan.repo}#{plan.number} {cluster}")
        self._finalising[key] = task
        task.add_done_callback(lambda t: self._finalising.pop(key, None) if self._finalising.get(key) is t else None)

    async def _finalise(self, plan: PrecheckPlan, cluster: str, desired: DesiredState, failed: tuple[str, ...]) -> None:
        """Write what GitHub refused (the status, the comment, the check run) again, with backoff, until it is taken.

        A GitHub outage at the final write must not leave the PR pending until some process restarts: this
        replica has the result, so it keeps it until GitHub does. A newer run of the PR and cluster cancels
        this (it writes its own); so does shutdown (the status stays pending: the next start re-runs it).
        """
        delay = self.final_retry
        while failed:
            log.info("GitHub refused the final %s of %s#%s %s; writing it again in %gs", "/".join(failed), plan.repo, plan.number, cluster, delay)
            await asyncio.sleep(delay)
            failed = await self._reconcile(plan, cluster, desired, skip=tuple(op for op in OPERATIONS if op not in failed))
            delay = min(delay * 2, FINAL_RETRY_MAX)
        log.info("final state of %s#%s %s written", plan.repo, plan.number, cluster)

    async def close(self) -> None:
        """Shutting down: stop writing final states again (what is still pending is re-run by the next start)."""
        tasks = list(self._finalising.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _interrupted(self, plan: PrecheckPlan, cluster: str) -> None:
        """A graceful shutdown mid-run: mark the status, so the next start re-runs it as a plain run, not a crash's."""
        context, description = STATUS_CONTEXT.format(cluster=cluster), f"precheck of {cluster} {INTERRUPTED}"
        if self.claims is not None:
            await self.claims.release(plan.repo, plan.head_sha, context, description, self.target_url)
            return
        call = asyncio.to_thread(self.github.set_status, plan.repo, plan.head_sha, context, "pending", description, self.target_url)
        try:
            await asyncio.wait_for(call, timeout=RELEASE_TIMEOUT)
        except (InfraError, asyncio.TimeoutError) as exc:
            log.warning("could not mark %s#%s %s interrupted: %s", plan.repo, plan.number, cluster, exc or "timed out")

    async def give_up(self, plan: PrecheckPlan, cluster: str) -> None:
        """End a run that stopped the checker twice with `error`, instead of running it into a crash loop."""
        await self._reconcile(plan, cluster, error_state(cluster, STOPPED_THE_CHECKER.format(cluster=cluster), infrastructure=True))
        self.metrics.runs.labels(cluster, "error").inc()

    def live_access(self, repo: str, cluster: str) -> "ClusterAccess | None":
        """How to read `cluster` live, when the service config says so."""
        policy_repo = self.service_config.repo(repo) if self.service_config else None
        policy = policy_repo.cluster(cluster) if policy_repo else None
        if policy is None or not policy.live:
            return None
        from bot.adapters.kube import ClusterAccess  # kubernetes-asyncio: only when a cluster is read live

        return ClusterAccess(kubeconfig=Path(policy.kubeconfig) if policy.kubeconfig else None, context=policy.context, in_cluster=policy.in_cluster)

    async def _live_review(self, plan: PrecheckPlan, cluster: str) -> ClusterReview:
        """Read the cluster's live state (when configured; a failed read is recorded, not raised), then review in a thread."""
        access = self.live_access(plan.repo, cluster)
        live = None
        if access is not None:
            from bot.adapters.kube import read_live_state

            live = await read_live_state(access, cluster)
        return await asyncio.to_thread(self._review, plan, cluster, live, access)

    @property
    def reviewing(self) -> int:
        """Review threads still running: a cancelled run's thread goes on until its builds are stopped."""
        return len(self._reviewing)

    def _review(self, plan: PrecheckPlan, cluster: str, live: "LiveState | None" = None, access: "ClusterAccess | None" = None) -> ClusterReview:
        """Fetch base and head into the mirror and review the change (blocking; runs in a thread)."""
        marker = object()
        self._reviewing.append(marker)  # list.append/remove are atomic under the GIL
        try:
            return self._review_in_thread(plan, cluster, live, access)
        finally:
            self._reviewing.remove(marker)

    def _review_in_thread(self, plan: PrecheckPlan, cluster: str, live: "LiveState | None", access: "ClusterAccess | None") -> ClusterReview:
        token = self.github.installation_token()
        fetched = self.git.revisions(plan.clone_url, f"refs/heads/{plan.base_ref}", f"refs/pull/{plan.number}/head", token)
        if fetched.head_sha != plan.head_sha:
            raise InfraError(f"the PR head moved to {fetched.head_sha[:12]} while fetching; a newer run follows")
        from bot.adapters.git import merge_base

        # Review what the PR changes: from the merge base, as GitHub's "Files changed" does.
        base = merge_base(fetched.mirror, fetched.base_sha, fetched.head_sha)
        fetch_objects = None
        if access is not None:
            from bot.adapters.kube import ObjectReader

            fetch_objects = ObjectReader(access)  # moved objects: read in this thread, on its own loop
        return review_repository(
            fetched.mirror, cluster, base, fetched.head_sha, self.options, cache_dir=self.cache_dir, live=live, fetch_objects=fetch_objects,
            config_from_base=True,  # a PR never decides what its clusters are
        )

    async def _reconcile(self, plan: PrecheckPlan, cluster: str, desired: DesiredState, skip: tuple[str, ...] = ()) -> tuple[str, ...]:
        """Make GitHub show `desired` (comment edited in place, status, check run); the operations GitHub refused
        (logged and counted) are returned."""
        context = STATUS_CONTEXT.format(cluster=cluster)
        steps = [
            ("comment", lambda: self.github.upsert_comments(plan.repo, plan.number, _marker(cluster), list(desired.comment))),
            ("status", lambda: self.github.set_status(plan.repo, plan.head_sha, context, desired.status.state, desired.status.description, self.target_url)),
        ]
        if self.github.is_app:
            steps.append(("check_run", lambda: self.github.upsert_check_run(
                plan.repo, plan.head_sha, context,
                status="completed" if desired.conclusion else "in_progress",
                conclusion=desired.conclusion,
                title=desired.status.description,
                summary=desired.comment[0][:65535],
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
