"""The graph checks. Each check is a function from a CheckContext to findings; ids are an interface."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Mapping

from bot.config import RepoConfig
from bot.facts import ObjectStub, TierFacts
from bot.graph import TierGraph
from bot.model import Finding, Manifest, Severity, SourceLocation, TierId
from bot.providers import ProviderIndex
from bot.render import ClusterRender


@dataclass(frozen=True)
class CheckContext:
    """Everything a check may read about one cluster."""

    render: ClusterRender
    graph: TierGraph
    providers: ProviderIndex
    facts: Mapping[TierId, TierFacts]  # per tier: what the checks read of its objects
    config: RepoConfig
    other_graphs: Mapping[str, TierGraph]
    locate: Callable[[Manifest | ObjectStub], SourceLocation | None]

    def tier_location(self, tier: TierId) -> SourceLocation | None:
        """Where the Flux Kustomization `tier` is written."""
        spec = self.graph.specs.get(tier)
        return spec.origin if spec else None

    def before(self, tier: TierId, provider_tier: TierId) -> bool:
        """Whether `provider_tier` is applied before `tier` on a cold cluster.

        True for a dependency (dependsOn, transitively) and for the cluster entry: flux bootstrap
        applies the entry path before any Kustomization it defines exists.
        """
        return provider_tier == self.render_entry or self.graph.depends_on(tier, provider_tier)

    @property
    def render_entry(self) -> TierId:
        return next(iter(self.render.tiers))


Check = Callable[[CheckContext], Iterable[Finding]]


@dataclass(frozen=True)
class CheckInfo:
    """A public check id: its severity and when it fires."""

    id: str
    severity: Severity
    summary: str


CHECKS: dict[str, CheckInfo] = {}
RUNNERS: list[Check] = []


def check(*ids: tuple[str, Severity, str]) -> Callable[[Check], Check]:
    """Register a check function and the public ids (with severity and summary) it reports."""

    def register(fn: Check) -> Check:
        for id_, severity, summary in ids:
            CHECKS[id_] = CheckInfo(id_, severity, summary)
        RUNNERS.append(fn)
        return fn

    return register


def run_checks(ctx: CheckContext) -> list[Finding]:
    """Run every registered check."""
    load_checks()
    return [finding for runner in RUNNERS for finding in runner(ctx)]


def load_checks() -> None:
    """Import the check modules so they register themselves."""
    from bot.checks import crds, graph, names, references, substitution  # noqa: F401


def plural(count: int, word: str) -> str:
    """`1 object`, `2 objects`."""
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


def name_list(names: Iterable[str], limit: int = 4) -> str:
    """`a, b, c` or `a, b, c, d and 3 more`."""
    items = sorted(set(names))
    if len(items) <= limit:
        return ", ".join(items)
    return ", ".join(items[:limit]) + f" and {len(items) - limit} more"
