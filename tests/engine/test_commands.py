"""ChatOps commands: parsing comment bodies, permission order (the help text: tests/handlers/test_registry.py)."""

from __future__ import annotations

import pickle
import time
from dataclasses import dataclass

import pytest

from bot.engine.chatops.commands import (
    MAX_COMMANDS,
    PERMISSION_ORDER,
    Command,
    CommandError,
    FixTierOrderCommand,
    HelpCommand,
    PrecheckCommand,
    code_span,
    parse_commands,
    permits,
)
from bot.engine.core.errors import UserError

KNOWN = ("prod", "dev", "bare-metal.lab")


@dataclass(frozen=True)
class Err:
    """An expected CommandError: its message and its line."""

    message: str
    line: str


def _comparable(results: list[Command | CommandError]) -> list[Command | Err]:
    return [Err(str(r), r.line) if isinstance(r, CommandError) else r for r in results]


P = PrecheckCommand
HELP, FIX = HelpCommand(), FixTierOrderCommand()
USAGE = "usage: `/precheck [cluster ...]`"

CASES: list[tuple[str, str, list[Command | Err]]] = [
    # the commands
    ("precheck-one", "/precheck prod", [P(("prod",))]),
    ("precheck-all", "/precheck", [P(())]),
    ("precheck-several-dedupe", "/precheck prod dev prod", [P(("prod", "dev"))]),
    ("precheck-tabs-and-trailing-space", "/precheck\tprod  \tdev   ", [P(("prod", "dev"))]),
    ("dotted-cluster", "/precheck bare-metal.lab", [P(("bare-metal.lab",))]),
    ("help", "/fluxwarden help", [HELP]),
    ("fix-tier-order", "/fluxwarden fix-tier-order", [FIX]),
    ("in-prose", "Thanks, looks good.\n\n/precheck dev\n\nCheers", [P(("dev",))]),
    ("several-in-order", "/fluxwarden help\n/precheck prod\n/fluxwarden fix-tier-order", [HELP, P(("prod",)), FIX]),
    ("same-command-twice", "/precheck prod\n/precheck prod", [P(("prod",)), P(("prod",))]),
    ("empty-body", "", []),
    # line endings and indentation
    ("crlf", "/precheck prod\r\n/fluxwarden help\r\n", [P(("prod",)), HELP]),
    ("bare-cr", "/precheck prod\r/precheck dev", [P(("prod",)), P(("dev",))]),
    ("three-leading-spaces", "   /precheck prod", [P(("prod",))]),
    ("four-leading-spaces-is-code", "    /precheck prod", []),
    ("leading-tab-is-code", "\t/precheck prod", []),
    ("not-at-line-start", "please run /precheck prod", []),
    ("list-item", "- /precheck prod", []),
    # near misses are not commands at all
    ("plural", "/prechecks prod", []),
    ("suffix", "/precheck-foo prod", []),
    ("colon", "/precheck: prod", []),
    ("upper-case-command", "/Precheck prod\n/FLUXWARDEN help", []),
    ("no-slash", "precheck prod", []),
    ("double-slash", "//precheck prod", []),
    ("slash-space", "/ precheck prod", []),
    ("other-bots", "/lgtm\n/retest\n/fluxwardens help", []),
    # quotes
    ("quoted", "> /precheck prod", []),
    ("quoted-indented", "  > /precheck prod", []),
    ("quoted-nested", ">> /precheck prod\n> > /fluxwarden help", []),
    ("quote-then-command", "> can you /precheck prod?\n\n/precheck dev", [P(("dev",))]),
    ("lazy-continuation-is-read", "> quoted\n/precheck dev", [P(("dev",))]),
    # fenced code
    ("fence-backticks", "```\n/precheck prod\n```\n/precheck dev", [P(("dev",))]),
    ("fence-tildes", "~~~\n/precheck prod\n~~~\n/precheck dev", [P(("dev",))]),
    ("fence-info-string", "```console\n$ echo\n/precheck prod\n```", []),
    ("fence-indented", "   ```\n/precheck prod\n   ```\n/precheck dev", [P(("dev",))]),
    ("fence-longer-closer-needed", "````\n```\n/precheck prod\n````\n/precheck dev", [P(("dev",))]),
    ("fence-other-char-does-not-close", "~~~\n```\n/precheck prod\n~~~\n/precheck dev", [P(("dev",))]),
    ("fence-unclosed", "```\n/precheck prod\n\n/precheck dev", []),
    ("fence-crlf", "```\r\n/precheck prod\r\n```\r\n/precheck dev\r\n", [P(("dev",))]),
    ("backtick-info-with-backtick-is-not-a-fence", "```a`\n/precheck prod", [P(("prod",))]),
    # inline code
    ("inline-whole-line", "`/precheck prod`", []),
    ("inline-mid-line", "run `/precheck prod` to check", []),
    ("inline-triple-on-one-line", "```/precheck prod```", []),
    ("inline-spans-lines", "see `the\n/precheck prod\ncommand` here", []),
    ("inline-unmatched-backtick-is-literal", "a ` b\n/precheck prod", [P(("prod",))]),
    ("inline-does-not-cross-paragraphs", "a `b\n\n/precheck prod\n\nc` d", [P(("prod",))]),
    ("escaped-backtick", "a \\`b\n/precheck prod\nc\\` d", [P(("prod",))]),
    ("inline-code-argument", "/precheck `prod`", [Err(f"not a cluster name: `` `prod` ``; {USAGE}", "/precheck `prod`")]),
    # HTML comments
    ("html-comment-block", "<!--\n/precheck prod\n-->\n/precheck dev", [P(("dev",))]),
    ("html-comment-one-line", "<!-- /precheck prod -->", []),
    ("html-comment-after-command", "/precheck prod <!-- not dev -->", [P(("prod",))]),
    ("html-comment-unclosed", "<!-- template\n/precheck prod", []),
    ("html-comment-in-fence-is-text", "```\n<!--\n```\n/precheck dev", [P(("dev",))]),
    ("fence-in-html-comment-is-hidden", "<!--\n```\n-->\n/precheck dev", [P(("dev",))]),
    ("html-comment-in-inline-code-is-text", "`<!--`\n/precheck dev", [P(("dev",))]),
    # errors
    ("unknown-cluster", "/precheck staging", [Err("unknown cluster `staging`; known: `bare-metal.lab`, `dev`, `prod`", "/precheck staging")]),
    (
        "unknown-clusters",
        "/precheck prod staging qa staging",
        [Err("unknown clusters `staging`, `qa`; known: `bare-metal.lab`, `dev`, `prod`", "/precheck prod staging qa staging")],
    ),
    ("cluster-case-sensitive", "/precheck Prod", [Err("unknown cluster `Prod`; known: `bare-metal.lab`, `dev`, `prod`", "/precheck Prod")]),
    ("bad-cluster-syntax", "/precheck prod!", [Err(f"not a cluster name: `prod!`; {USAGE}", "/precheck prod!")]),
    ("bad-cluster-path", "/precheck ../prod", [Err(f"not a cluster name: `../prod`; {USAGE}", "/precheck ../prod")]),
    ("bad-cluster-mention", "/precheck @everyone", [Err(f"not a cluster name: `@everyone`; {USAGE}", "/precheck @everyone")]),
    (
        "bad-cluster-long",
        "/precheck " + "x" * 64,
        [Err(f"not a cluster name: `{'x' * 39}…`; {USAGE}", "/precheck " + "x" * 64)],
    ),
    (
        "fluxwarden-unknown",
        "/fluxwarden frobnicate",
        [Err("unknown command `/fluxwarden frobnicate`; try `/fluxwarden help`", "/fluxwarden frobnicate")],
    ),
    (
        "fluxwarden-case",
        "/fluxwarden Help",
        [Err("unknown command `/fluxwarden Help`; try `/fluxwarden help`", "/fluxwarden Help")],
    ),
    (
        "fluxwarden-bare",
        "  /fluxwarden  ",
        [Err("usage: `/fluxwarden help` or `/fluxwarden fix-tier-order`", "/fluxwarden")],
    ),
    (
        "fluxwarden-extra-argument",
        "/fluxwarden help me",
        [Err("`/fluxwarden help` takes no arguments", "/fluxwarden help me")],
    ),
    (
        "error-does-not-stop-others",
        "/precheck nope\n/precheck prod",
        [Err("unknown cluster `nope`; known: `bare-metal.lab`, `dev`, `prod`", "/precheck nope"), P(("prod",))],
    ),
]


@pytest.mark.parametrize("body,expected", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_parse_commands(body: str, expected: list[Command | Err]) -> None:
    assert _comparable(parse_commands(body, KNOWN)) == expected


def test_cap_on_commands_per_comment() -> None:
    body = "\n".join(f"/precheck {'prod' if i % 2 else 'dev'}" for i in range(MAX_COMMANDS + 3))
    results = parse_commands(body, KNOWN)
    assert MAX_COMMANDS == 10
    assert _comparable(results[:-1]) == [P(("prod",) if i % 2 else ("dev",)) for i in range(MAX_COMMANDS)]
    assert _comparable(results[-1:]) == [Err("too many commands: only the first 10 of 13 were read", "/precheck dev")]


def test_errors_count_towards_the_cap() -> None:
    body = "/precheck nope\n" * MAX_COMMANDS + "/fluxwarden help"
    results = parse_commands(body, KNOWN)
    assert len(results) == MAX_COMMANDS + 1 and HELP not in results


def test_no_known_clusters() -> None:
    assert _comparable(parse_commands("/precheck prod", ())) == [Err("unknown cluster `prod`; known: none", "/precheck prod")]
    assert parse_commands("/precheck", ()) == [P(())]


def test_a_configured_name_outside_the_usual_syntax_still_works() -> None:
    assert parse_commands("/precheck Ünïcode_cluster", ["Ünïcode_cluster"]) == [P(("Ünïcode_cluster",))]


def test_command_error_is_a_user_error_with_its_line() -> None:
    [error] = parse_commands("Hi\n  /precheck nope  \n", KNOWN)
    assert isinstance(error, CommandError) and isinstance(error, UserError)
    assert error.line == "/precheck nope"
    copy = pickle.loads(pickle.dumps(error))
    assert (str(copy), copy.line) == ("unknown cluster `nope`; known: `bare-metal.lab`, `dev`, `prod`", "/precheck nope")


def test_bot_comment_fixture_contains_a_command_line() -> None:
    # The service must ignore comments by bots: the parser alone would read the echoed command.
    body = "<!-- fluxwarden:precheck:prod -->\n### ⏳ Fluxwarden precheck: `prod`\n\nRunning on `f064afd`…\n\n/precheck prod"
    assert parse_commands(body, KNOWN) == [P(("prod",))]


# --- permissions ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "have,need,ok",
    [
        ("admin", "admin", True),
        ("admin", "read", True),
        ("maintain", "admin", False),
        ("maintain", "maintain", True),
        ("maintain", "write", True),
        ("write", "maintain", False),
        ("write", "write", True),
        ("write", "triage", True),
        ("triage", "write", False),
        ("triage", "triage", True),
        ("read", "triage", False),
        ("read", "read", True),
        ("none", "read", False),
        ("none", "none", True),
        ("security-reviewer", "read", False),
        ("security-reviewer", "none", True),
        ("Admin", "write", False),
    ],
    ids=lambda v: str(v),
)
def test_permits(have: str, need: str, ok: bool) -> None:
    assert permits(have, need) is ok


def test_permits_rejects_unknown_requirement() -> None:
    with pytest.raises(ValueError, match="unknown permission 'pull'"):
        permits("admin", "pull")


def test_permission_order() -> None:
    assert PERMISSION_ORDER == ("none", "read", "triage", "write", "maintain", "admin")


@pytest.mark.parametrize(
    "body",
    ["`\n" * 32768, "a `b` <!-- c --> d\n" * 3449, " ".join("`" * k for k in range(1, 360)), "```\n" * 16384, "<!--" * 16384],
    ids=["backtick-lines", "spans-and-comments", "unmatched-runs", "fences", "comment-openers"],
)
def test_parsing_a_maximal_comment_is_fast(body: str) -> None:
    # GitHub caps a comment at 65536 characters; the parser must stay linear on hostile ones.
    start = time.perf_counter()
    assert parse_commands(body, KNOWN) == []
    assert time.perf_counter() - start < 2.0


@pytest.mark.parametrize(
    "text,span",
    [
        ("prod", "`prod`"),
        ("a`b", "``a`b``"),
        ("`x`", "`` `x` ``"),
        ("a``b`", "``` a``b` ```"),
        ("tab\there", "`tab\\there`"),  # a control character shows as its escape
        ("y" * 41, "`" + "y" * 39 + "…`"),
    ],
    ids=["plain", "inner-backtick", "edge-backticks", "longer-run", "control-char", "truncated"],
)
def test_code_span(text: str, span: str) -> None:
    assert code_span(text) == span
