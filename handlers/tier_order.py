"""The tier order follow-up PR, shared by the push trigger (handlers/push.py) and `/fluxwarden fix-tier-order`
(handlers/fix_tier_order.py).

Reconciling a repository (blocking; run it in a thread) makes GitHub show what the default branch needs:

* the list is stale: a commit by the bot's identity on top of the default branch, force-pushed to
  `fluxwarden/tier-order` with the bot's token (through the git adapter: never in argv, a URL or a log), and
  one open PR from that branch explaining the graph change and linking the commit that made the order stale.
  An existing bot PR is updated, never duplicated; an unchanged fix pushes nothing and edits nothing;
* the list is right (or no longer configured): an open bot PR is closed with a comment, the branch deleted;
* no single order fits every cluster: no PR; the explanation goes to the command's reply, to a comment on an
  existing bot PR, or (on a push) to a failed `fluxwarden/tier-order` commit status on the pushed commit.

Runs for one repository are serialised by a lock held in the worker thread, so a superseded run that is still
finishing cannot race the next one into opening a second PR.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Awaitable, Callable, Protocol

from bot.engine.core import markdown as md
from bot.engine.core.errors import FluxwardenError, InfraError, InputError, UserError
from bot.engine.chatops.github_models import BranchPullRequest
from bot.engine.core.model import plural
from bot.engine.ordering.tierfix import BRANCH, StaleCommit, TierFix, TierOrderConflict, TreeState, first_stale, graph_changes
from bot.pipeline.tier_state import read_tree_state
from bot.pipeline.check import CheckOptions
from handlers.context import Settings, TierOrderGit, TierOrderGitHub, TierOrderMemo

log = logging.getLogger(__name__)

STATUS_CONTEXT = "fluxwarden/tier-order"
CONFLICT_MARKER = "fluxwarden:tier-order:conflict"
HISTORY_LIMIT = 32  # first-parent commits searched for the one that made the order stale


class TierOrderContext(Protocol):
    """What a tier order run needs: the bot's git identity, git and GitHub, how to render, the service's memo."""

    @property
    def config(self) -> Settings: ...

    @property
    def github(self) -> TierOrderGitHub: ...

    @property
    def git(self) -> TierOrderGit: ...

    @property
    def options(self) -> CheckOptions: ...

    @property
    def cache_dir(self) -> Path: ...

    @property
    def tier_order(self) -> TierOrderMemo: ...


@dataclass(frozen=True)
class TierOrderTarget:
    """Which repository to reconcile, and why."""

    repo: str
    clone_url: str
    default_branch: str
    trigger: str
    pushed: str | None = None  # the pushed commit, when a push triggered the run


@dataclass(frozen=True)
class TierOrderOutcome:
    """What the run did; `message` is Markdown fit for a reply."""

    action: str  # opened | updated | unchanged | correct | closed | not-configured | impossible
    message: str
    head: str | None = None  # the default branch commit examined
    pull: int | None = None
    commit: str | None = None  # the bot branch commit


def reconcile_tier_order(bot: TierOrderContext, target: TierOrderTarget) -> TierOrderOutcome:
    """Make the follow-up PR match the default branch (blocking)."""
    with bot.tier_order.lock(target.repo):
        return _Run(bot, target).reconcile()


class _Run:
    def __init__(self, bot: TierOrderContext, target: TierOrderTarget) -> None:
        self.bot, self.target = bot, target
        self.git = bot.git
        self.github = bot.github

    # -- the decision ---------------------------------------------------------------------------

    def reconcile(self) -> TierOrderOutcome:
        t = self.target
        fetched = self.git.branch_heads(t.clone_url, [t.default_branch, BRANCH])
        self.mirror: Path = fetched.mirror
        head = fetched.heads[t.default_branch]
        if head is None:
            raise InfraError(f"{t.repo} has no branch {t.default_branch}")
        bot_head = fetched.heads[BRANCH]
        pulls = self.github.open_pulls_from(t.repo, BRANCH)
        pull = pulls[0] if pulls else None
        state = self.state(head)
        if isinstance(state, FluxwardenError):
            raise state
        if state.file is None:
            return self.settled("not-configured", not_configured_message(t.default_branch, head), head, pulls, bot_head)
        try:
            fix = state.plan()
        except TierOrderConflict as conflict:
            return self.impossible(conflict, head, pull)
        if not fix.needed:
            return self.settled("correct", in_order_message(fix, t.default_branch, head), head, pulls, bot_head)
        return self.propose(fix, head, bot_head, pulls)

    def propose(self, fix: TierFix, head: str, bot_head: str | None, pulls: list[BranchPullRequest]) -> TierOrderOutcome:
        t = self.target
        pull = pulls[0] if pulls else None
        stale, unknown = self.stale_since(head, pull)
        identity = self.bot.config.git_identity
        sha = self.git.commit_file(
            t.clone_url, head, fix.file, fix.new_text.encode("utf-8"), fix.commit_message(stale),
            (identity.name, identity.email), reuse=bot_head,
        )
        pushed = sha != bot_head
        if pushed:
            self.git.push_branch(t.clone_url, sha, BRANCH, force=True)
        title = fix.pr_title()
        body = fix.pr_body(repo=t.repo, base=f"{t.default_branch} at {head[:12]}", stale=stale, stale_unknown=unknown)
        for extra in pulls[1:]:  # a duplicate (a race on another replica): keep the oldest
            self.github.close_pull(t.repo, extra.number, duplicate_pull_comment(pulls[0].number))
        if pull is None:
            created = self.github.create_pull(t.repo, head=BRANCH, base=t.default_branch, title=title, body=body)
            log.info("%s: opened #%s (%s) for %s", t.repo, created.number, fix.headline(), t.trigger)
            return TierOrderOutcome("opened", f"Opened #{created.number}: {md.text(fix.headline())}.", head, created.number, sha)
        edited = _normal(pull.title) != _normal(title) or _normal(pull.body) != _normal(body)
        if edited:
            self.github.update_pull(t.repo, pull.number, title=title, body=body)
        self.github.upsert_comments(t.repo, pull.number, CONFLICT_MARKER, [])  # an old conflict note no longer holds
        if pushed or edited:
            log.info("%s: updated #%s (%s) for %s", t.repo, pull.number, fix.headline(), t.trigger)
            return TierOrderOutcome("updated", f"Updated #{pull.number}: {md.text(fix.headline())}.", head, pull.number, sha)
        return TierOrderOutcome("unchanged", f"#{pull.number} already has this fix: {md.text(fix.headline())}.", head, pull.number, sha)

    def settled(self, action: str, message: str, head: str, pulls: list[BranchPullRequest], bot_head: str | None) -> TierOrderOutcome:
        """Nothing to fix: close the bot's PR (with why) and delete its branch."""
        t = self.target
        for pull in pulls:
            self.github.close_pull(t.repo, pull.number, settled_comment(message, t.default_branch, head, t.trigger))
            log.info("%s: closed #%s, %s", t.repo, pull.number, action)
        if bot_head is not None:
            self.git.delete_branch(t.clone_url, BRANCH)
        if pulls:
            closed = ", ".join(f"#{p.number}" for p in pulls)
            return TierOrderOutcome("closed", f"{message} Closed {closed}.", head, pulls[0].number)
        return TierOrderOutcome(action, message, head)

    def impossible(self, conflict: TierOrderConflict, head: str, pull: BranchPullRequest | None) -> TierOrderOutcome:
        """No single order fits: no PR; say why where someone will see it."""
        t = self.target
        explanation = conflict.markdown()
        if pull is not None:
            self.github.upsert_comments(t.repo, pull.number, CONFLICT_MARKER, [conflict_note(conflict, t.default_branch, head)])
        elif t.pushed is not None:
            self.github.set_status(t.repo, t.pushed, STATUS_CONTEXT, "failure", str(conflict))
        log.info("%s: no tier order fits every cluster: %s", t.repo, conflict)
        return TierOrderOutcome("impossible", explanation, head, pull.number if pull is not None else None)

    # -- which commit made the order stale ------------------------------------------------------

    def stale_since(self, head: str, pull: BranchPullRequest | None) -> tuple[StaleCommit | None, str | None]:
        """The first-parent commit that made the order stale (bisected over the last HISTORY_LIMIT), or why unknown."""
        history = self.git.first_parent_history(self.mirror, head, HISTORY_LIMIT)

        def stale(sha: str) -> bool | None:
            state = self.state(sha)
            if isinstance(state, FluxwardenError) or state.file is None:
                return None if isinstance(state, FluxwardenError) else False
            try:
                return state.plan().needed
            except TierOrderConflict:
                return True
            except (UserError, InputError):
                return None  # e.g. the file did not exist yet, or was unreadable: cannot tell

        index = first_stale(history, stale)
        if index is None and stale(history[0]) and not self.git.commit_parents(self.mirror, history[0]):
            index = 0  # the repository was born stale
        if index is None:
            return None, (
                f"The order was already stale at `{history[0][:12]}`, {plural(len(history) - 1, 'first-parent commit')} before "
                f"`{head[:12]}`; the commit that made it stale is older than that (or could not be told)."
            )
        sha = history[index]
        before = self.state(history[index - 1]) if index > 0 else None
        after = self.state(sha)
        changes: list[str] = []
        if isinstance(after, TreeState):
            old = before.graphs if isinstance(before, TreeState) else {}
            changes = graph_changes(old, after.graphs)
            if isinstance(before, TreeState) and before.text != after.text and after.file:
                changes.append(f"{md.code(after.file)} itself was edited")
        return StaleCommit(sha, self.git.commit_summary(self.mirror, sha), self.commit_url(sha), tuple(changes)), None

    def commit_url(self, sha: str) -> str:
        url = self.target.clone_url
        if url.startswith("https://"):
            return url.removesuffix(".git").rstrip("/") + f"/commit/{sha}"
        return f"https://github.com/{self.target.repo}/commit/{sha}"

    # -- one commit's state (cached: a commit never changes) ------------------------------------

    def state(self, sha: str) -> TreeState | FluxwardenError:
        return self.bot.tier_order.state((self.target.repo.lower(), sha), lambda: self._read_state(sha))

    def _read_state(self, sha: str) -> TreeState | FluxwardenError:
        options = self.bot.options
        try:
            with self.git.checkout(self.mirror, sha) as tree:
                return read_tree_state(
                    tree, kustomize=options.kustomize, jobs=options.jobs, timeout=options.timeout,
                    cache_dir=self.bot.cache_dir, probes=options.probes,
                )
        except InfraError:
            raise  # not a property of the commit: do not remember it
        except FluxwardenError as exc:
            return exc


# --------------------------------------------------------------------------------------------- what it says


def not_configured_message(branch: str, head: str) -> str:
    """The reply (and closing reason) when the default branch's `.fluxwarden.yaml` names no tier order."""
    return f"`.fluxwarden.yaml` on {md.code(branch)} ({head[:12]}) names no tier order (`tier_order: {{file, variable}}`); nothing to fix."


def in_order_message(fix: TierFix, branch: str, head: str) -> str:
    """The reply (and closing reason) when the list is already right."""
    return (f"{md.code(fix.variable)} in {md.code(fix.file)} is already in dependency order for {_names(fix.clusters)} "
            f"on {md.code(branch)} ({head[:12]}); nothing to do.")


def settled_comment(message: str, branch: str, head: str, trigger: str) -> str:
    """The comment that closes the bot's PR when the order no longer needs it."""
    return f"Closing: the tier order no longer needs this PR. {message}\n\n(Checked {md.code(branch)} at {head} after {md.text(trigger)}.)"


def duplicate_pull_comment(number: int) -> str:
    """The comment that closes a second tier order PR (a race between replicas)."""
    return f"Closing: #{number} is this repository's tier order PR."


def conflict_note(conflict: TierOrderConflict, branch: str, head: str) -> str:
    """The note on the bot's PR when no single order fits every cluster."""
    return f"<!-- {CONFLICT_MARKER} -->\n### ⚠️ This PR cannot be updated\n\n{conflict.markdown()}\n\n(Seen on {md.code(branch)} at {head[:12]}.)\n"


def _normal(text: str | None) -> str:
    return (text or "").replace("\r\n", "\n").strip()


def _names(clusters: tuple[str, ...]) -> str:
    return ", ".join(md.code(c) for c in clusters)


async def run_tier_order(bot: TierOrderContext, target: TierOrderTarget, done: Callable[[TierOrderOutcome | None, str | None], Awaitable[None]] | None = None) -> None:
    """The queued job: reconcile in a worker thread; errors are logged (and handed to `done` as text)."""
    import asyncio

    outcome: TierOrderOutcome | None = None
    error: str | None = None
    try:
        outcome = await asyncio.to_thread(reconcile_tier_order, bot, target)
    except (UserError, InputError) as exc:
        error = str(exc)
        log.info("tier order of %s (%s): %s", target.repo, target.trigger, exc)
    except FluxwardenError as exc:
        error = f"infrastructure error: {exc}"
        log.warning("tier order of %s (%s) failed: %s", target.repo, target.trigger, exc)
    except Exception as exc:  # a bug must still be reported, not lost in a task
        error = f"internal error ({type(exc).__name__})"
        log.exception("tier order of %s (%s) crashed", target.repo, target.trigger)
    if done is not None:
        await done(outcome, error)
