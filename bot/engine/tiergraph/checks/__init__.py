"""The graph checks. Each check is a function from a CheckContext to findings; ids are an interface."""

from __future__ import annotations

from bot.engine.tiergraph.checks import crds, graph, names, ownership, references, releases, substitution
from bot.engine.tiergraph.checks.context import Check, CheckContext
from bot.engine.core.model import Finding

__all__ = ["RUNNERS", "CheckContext", "run_checks"]

# Every check, in the order they run; each names its finding ids (`@check`, catalogued in bot/engine/core/findings.py).
RUNNERS: tuple[Check, ...] = (
    crds.api_availability,
    graph.dependency_cycle,
    graph.missing_dependency,
    graph.graph_drift,
    graph.tier_order_stale,
    graph.health_check_deadlock,
    names.invalid_name,
    ownership.duplicate_object,
    references.missing_provider,
    releases.chart_objects,
    substitution.literal_token,
    substitution.undefined_variable,
)


def run_checks(ctx: CheckContext) -> list[Finding]:
    """Run every check."""
    return [finding for runner in RUNNERS for finding in runner(ctx)]
