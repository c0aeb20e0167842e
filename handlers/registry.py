"""Every command: its handler, its help summary and who may use it; checked against the parser at start-up.

A new command is one entry here, its handler module, and its syntax in bot/engine/chatops/commands.py (SYNTAX).
`/fluxwarden help` is answered from this table.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Sequence

from bot.engine.core import markdown as md
from bot.engine.chatops.commands import PERMISSION_ORDER, SYNTAX, Command, CommandSyntax, HelpCommand, command_name, help_text, who
from bot.engine.chatops.settings import RepoPolicy
from bot.engine.chatops.webhook import CommentEvent
from handlers.context import BotContext, CommandResult, Invocation
from handlers.fix_tier_order import on_fix_tier_order
from handlers.precheck_command import on_precheck

CommandHandler = Callable[[CommentEvent, Any, BotContext, Invocation], Awaitable[CommandResult]]


@dataclass(frozen=True)
class CommandEntry:
    """One command: what runs it, what help says about it, and the permission it needs."""

    name: str  # its name in bot/engine/chatops/commands.py's SYNTAX
    handler: CommandHandler
    summary: str
    permission: str  # the repository permission it needs (read|triage|write|maintain|admin)
    said_as: str  # how a refusal names it: "`/fluxwarden fix-tier-order` needs write"
    per_cluster: bool = False  # the permission is each cluster's own (the repository's default without cluster settings)
    on_issues: bool = False  # read in issue comments too (otherwise pull requests only)

    def needs(self, policy: RepoPolicy) -> str:
        """The least permission that lets a commenter use this command on `policy`'s repository."""
        if not self.per_cluster:
            return self.permission
        ranks = [c.permission for c in policy.clusters] or [policy.permission]
        return min(ranks, key=PERMISSION_ORDER.index)  # each cluster's own is checked when the run is scheduled

    def who(self, policy: RepoPolicy) -> str:
        """The help table's "who may use it" cell."""
        if not self.per_cluster:
            return who(self.permission)
        cells = "; ".join(f"{md.text(c.name)}: {who(c.permission)}" for c in sorted(policy.clusters, key=lambda c: c.name))
        return cells or who(policy.permission)


async def on_help(event: CommentEvent, command: HelpCommand, bot: BotContext, call: Invocation) -> CommandResult:
    """`/fluxwarden help`: the command table for this repository."""
    return CommandResult(help_reply(call.policy), accepted=True)


REGISTRY: tuple[CommandEntry, ...] = (
    CommandEntry(
        "precheck", on_precheck,
        summary="Render the named clusters (none: every configured cluster) at the PR head and post the precheck report.",
        permission="write", said_as="/precheck", per_cluster=True,
    ),
    CommandEntry("help", on_help, summary="Show this help.", permission="read", said_as="/fluxwarden"),
    CommandEntry(
        "fix-tier-order", on_fix_tier_order,
        summary="Open (or update) a pull request that puts the tier order list in dependency order.",
        permission="write", said_as="/fluxwarden fix-tier-order", on_issues=True,
    ),
)
_ENTRIES = {entry.name: entry for entry in REGISTRY}


class RegistryError(RuntimeError):
    """The parser and the registry disagree: a command without a handler, or a handler for no command."""


def check_registry(syntax: Sequence[CommandSyntax] = SYNTAX, registry: Sequence[CommandEntry] = REGISTRY) -> None:
    """Fail (at start-up) when a command the parser knows has no handler, or the other way round."""
    parsed, handled = [s.name for s in syntax], [e.name for e in registry]
    missing = [name for name in parsed if name not in handled]
    if missing:
        raise RegistryError(f"command(s) without a handler in handlers/registry.py: {', '.join(missing)}")
    unknown = [name for name in handled if name not in parsed]
    if unknown:
        raise RegistryError(f"handler(s) for command(s) the parser does not know (bot/engine/chatops/commands.py): {', '.join(unknown)}")
    for entry in registry:
        if entry.permission not in PERMISSION_ORDER[1:]:
            raise RegistryError(f"command {entry.name}: permission must be one of {', '.join(PERMISSION_ORDER[1:])}")


def entry_for(command: Command) -> CommandEntry:
    """The registry entry of a parsed command."""
    return _ENTRIES[command_name(command)]


def help_reply(policy: RepoPolicy) -> str:
    """The `/fluxwarden help` reply for one repository's clusters and permissions."""
    usages = {s.name: s.usage for s in SYNTAX}
    return help_text([(usages[entry.name], entry.summary, entry.who(policy)) for entry in REGISTRY])
