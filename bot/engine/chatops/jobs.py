"""Typed keys of the work the service runs (prechecks, tier order runs, drift reports), a precheck's plan, and what submitting one did."""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Submitted(str, enum.Enum):
    """What became of a submitted run."""

    STARTED = "started"
    SUPERSEDED = "superseded"  # started, and an older run for the key was cancelled
    COALESCED = "coalesced"  # the same version is already queued or running
    QUEUE_FULL = "queue-full"


@dataclass(frozen=True)
class PrecheckKey:
    """One PR's precheck of one cluster: a newer head SHA supersedes an older one."""

    repo: str
    number: int
    cluster: str

    def __str__(self) -> str:
        return f"precheck {self.repo}#{self.number} {self.cluster}"


@dataclass(frozen=True)
class TierOrderKey:
    """A repository's tier order run after a push: a newer push supersedes a queued one."""

    repo: str

    def __str__(self) -> str:
        return f"tier-order {self.repo}"


@dataclass(frozen=True)
class FixTierOrderKey:
    """A `/fluxwarden fix-tier-order` comment's run (a redelivery of the same comment coalesces)."""

    repo: str
    comment_id: int

    def __str__(self) -> str:
        return f"fix-tier-order {self.repo} comment {self.comment_id}"


@dataclass(frozen=True)
class DriftKey:
    """A cluster's scheduled drift report."""

    repo: str
    cluster: str

    def __str__(self) -> str:
        return f"drift:{self.repo}:{self.cluster}"


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

    @property
    def version(self) -> str:
        """The run's version in the queue: the head it judges and the base it judges it against.

        A retargeted PR keeps its head SHA; its run against the new base must supersede one still running
        against the old base, or that one's verdict would land on the head as if it judged the new base.
        """
        return precheck_version(self.head_sha, self.base_ref)


def precheck_version(head_sha: str, base_ref: str) -> str:
    """The queue version of a precheck of `head_sha` against `base_ref` (see PrecheckPlan.version)."""
    return f"{head_sha} {base_ref}"


JobKey = PrecheckKey | TierOrderKey | FixTierOrderKey | DriftKey
