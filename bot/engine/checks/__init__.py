"""The graph checks. Each check is a function from a CheckContext to findings; ids are an interface."""

from __future__ import annotations

# Each check module registers its checks when imported (`@check`); importing them all here is the registry.
from bot.engine.checks import crds, graph, names, ownership, references, releases, substitution  # noqa: F401
from bot.engine.checks.context import CHECKS, RUNNERS, CheckContext, CheckInfo
from bot.engine.model import Finding

__all__ = ["CHECKS", "CheckContext", "CheckInfo", "run_checks"]


def run_checks(ctx: CheckContext) -> list[Finding]:
    """Run every registered check."""
    return [finding for runner in RUNNERS for finding in runner(ctx)]
