"""The command registry (handlers/registry.py): one entry per command the parser knows, checked at start-up; the help text."""

from __future__ import annotations

from dataclasses import replace

import pytest

from bot.engine.chatops.commands import PERMISSION_ORDER, SYNTAX, CommandSyntax
from bot.engine.chatops.settings import ClusterPolicy, RepoPolicy
from handlers.registry import REGISTRY, RegistryError, check_registry, help_reply


def help_text(clusters: dict[str, str], default: str = "write") -> str:
    """The help reply for a repository with these clusters (name -> permission) and default permission."""
    return help_reply(RepoPolicy("o/r", tuple(ClusterPolicy(name, permission=p) for name, p in clusters.items()), permission=default))


def test_every_parsed_command_has_a_handler() -> None:
    check_registry()


def test_a_command_without_a_handler_fails_the_check() -> None:
    syntax = (*SYNTAX, CommandSyntax("approve", "/fluxwarden approve", object))
    with pytest.raises(RegistryError, match="without a handler in handlers/registry.py: approve"):
        check_registry(syntax)


def test_a_handler_for_no_command_fails_the_check() -> None:
    with pytest.raises(RegistryError, match="the parser does not know .*: help"):
        check_registry([s for s in SYNTAX if s.name != "help"])


def test_an_unknown_permission_fails_the_check() -> None:
    broken = [replace(e, permission="owner") if e.name == "help" else e for e in REGISTRY]
    with pytest.raises(RegistryError, match="command help: permission must be one of"):
        check_registry(registry=broken)


# --- help -----------------------------------------------------------------------------------------

HELP_GOLDEN = """\
### Fluxwarden commands

Write each command at the start of its own line in a comment (at most 10 a comment); `/precheck` works on pull requests only.

| command | what it does | who may use it |
|---|---|---|
| `/precheck [cluster ...]` | Render the named clusters (none: every configured cluster) at the PR head and post the precheck report. | dev: write or higher; prod: maintain or higher |
| `/fluxwarden help` | Show this help. | read or higher |
| `/fluxwarden fix-tier-order` | Open (or update) a pull request that puts the tier order list in dependency order. | write or higher |

Cluster names are case-sensitive. Quoted lines, code and HTML comments are ignored.
"""


def test_help_text_golden() -> None:
    assert help_text({"prod": "maintain", "dev": "write"}) == HELP_GOLDEN


@pytest.mark.parametrize(
    "clusters,default,who",
    [
        ({}, "write", "write or higher"),
        ({}, "triage", "triage or higher"),
        ({"prod": "admin"}, "write", "prod: admin"),
        ({"lab": "none", "prod": "admin"}, "write", "lab: anyone; prod: admin"),
        ({"a|b": "read"}, "write", "a\\|b: read or higher"),
    ],
    ids=["default", "other-default", "admin", "anyone", "pipe-escaped"],
)
def test_help_text_precheck_permissions(clusters: dict[str, str], default: str, who: str) -> None:
    row = next(line for line in help_text(clusters, default).splitlines() if line.startswith("| `/precheck"))
    assert row.endswith(f"| {who} |")


def test_help_text_lists_every_registered_command() -> None:
    text = help_text({})
    assert [syntax.usage for syntax in SYNTAX] == ["/precheck [cluster ...]", "/fluxwarden help", "/fluxwarden fix-tier-order"]
    assert all(f"| `{syntax.usage}` | {entry.summary} |" in text for syntax, entry in zip(SYNTAX, REGISTRY, strict=True))


def test_help_text_rejects_unknown_permission() -> None:
    with pytest.raises(ValueError, match="unknown permission 'owner'"):
        help_text({"prod": "owner"})


def test_registry_permissions_are_valid() -> None:
    assert all(entry.permission in PERMISSION_ORDER[1:] for entry in REGISTRY)
    assert len({entry.name for entry in REGISTRY}) == len(REGISTRY)
