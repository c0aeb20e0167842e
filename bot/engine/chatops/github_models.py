"""What the bot reads from GitHub, as frozen models: the GitHub adapter builds them, the handlers read them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypedDict


@dataclass(frozen=True)
class PullRequestInfo:
    """A pull request as a precheck reads it."""

    number: int
    state: str
    draft: bool
    head_sha: str
    head_ref: str
    head_repo: str | None  # full name; None when the head repository was deleted
    head_clone_url: str | None
    base_ref: str
    base_sha: str
    fork: bool  # the head is not in the base repository (or is gone)
    author: str | None


@dataclass(frozen=True)
class StatusInfo:
    """One commit status as GitHub lists it (newest first): what cross-replica run claims read."""

    state: str
    context: str
    description: str
    created_at: float  # epoch seconds, GitHub's clock (whole seconds)
    creator: str | None


@dataclass(frozen=True)
class BranchPullRequest:
    """A pull request opened from a branch of the repository itself (the bot's follow-up PRs)."""

    number: int
    title: str
    body: str
    head_ref: str
    head_sha: str
    base_ref: str
    author: str | None
    html_url: str


@dataclass(frozen=True)
class IssueInfo:
    """An issue (not a pull request) as the bot's drift reports need it."""

    number: int
    title: str
    body: str
    state: str  # open | closed
    labels: tuple[str, ...]
    author: str | None
    html_url: str


@dataclass(frozen=True)
class RepositoryInfo:
    """What a scheduled job needs to fetch a repository's default branch."""

    full_name: str
    default_branch: str
    clone_url: str


class CheckAnnotation(TypedDict):
    """One check-run annotation, in the shape GitHub's checks API takes it."""

    path: str
    start_line: int
    end_line: int
    annotation_level: str  # notice | warning | failure
    title: str
    message: str
