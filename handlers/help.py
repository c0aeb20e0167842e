"""`/fluxwarden help`: the command list, generated from the registry, with who may use what."""

from __future__ import annotations

from bot.engine.commands import help_text
from bot.service.settings import RepoPolicy


def help_reply(policy: RepoPolicy) -> str:
    """The help text for one repository's clusters and permissions."""
    permissions = {c.name: c.permission for c in policy.clusters}
    return help_text(permissions, policy.permission)
