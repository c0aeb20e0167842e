"""ChatOps commands in PR comments: their syntax, the parser, the help table and permission order (sans-I/O).

What each command does, its help summary and who may use it are in handlers/registry.py.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from dataclasses import dataclass
from typing import Collection, Sequence

from bot.engine.core import markdown as md
from bot.engine.core.errors import UserError

MAX_COMMANDS = 10
LIST_CAP = 10  # names a reply lists before "and N more"
PERMISSION_ORDER = ("none", "read", "triage", "write", "maintain", "admin")


@dataclass(frozen=True)
class PrecheckCommand:
    """`/precheck [cluster ...]`: render and check these clusters (empty = every configured cluster)."""

    clusters: tuple[str, ...]


@dataclass(frozen=True)
class HelpCommand:
    """`/fluxwarden help`."""


@dataclass(frozen=True)
class FixTierOrderCommand:
    """`/fluxwarden fix-tier-order`."""


Command = PrecheckCommand | HelpCommand | FixTierOrderCommand


class CommandError(UserError):
    """A command line Fluxwarden cannot run; the message is a short reply, `line` the offending line."""

    def __init__(self, message: str, line: str = "") -> None:
        super().__init__(message)
        self.line = line


@dataclass(frozen=True)
class CommandSyntax:
    """One command as the parser knows it: its name, its usage line, and the class of what it parses to."""

    name: str
    usage: str
    parses_to: type


SYNTAX: tuple[CommandSyntax, ...] = (
    CommandSyntax("precheck", "/precheck [cluster ...]", PrecheckCommand),
    CommandSyntax("help", "/fluxwarden help", HelpCommand),
    CommandSyntax("fix-tier-order", "/fluxwarden fix-tier-order", FixTierOrderCommand),
)

_SPECS = {syntax.name: syntax for syntax in SYNTAX}
_SUBCOMMANDS: dict[str, Command] = {syntax.name: syntax.parses_to() for syntax in SYNTAX if syntax.name != "precheck"}  # `/fluxwarden <name>`


def command_name(command: Command) -> str:
    """The name of a parsed command (its SYNTAX entry)."""
    return next(syntax.name for syntax in SYNTAX if isinstance(command, syntax.parses_to))


# The command word must be followed by whitespace or the end of the line: `/prechecks`, `/precheck-foo`
# and `/precheck:` are not commands (other bots' commands and prose stay silent).
_COMMAND_RE = re.compile(r" {0,3}/(precheck|fluxwarden)(?=[ \t]|$)")
# A plausible cluster name (a directory or a `.fluxwarden.yaml` key): anything else is a syntax error.
_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")
# CommonMark: a fence is 3+ backticks or tildes indented at most 3 spaces; a backtick fence's info string
# cannot contain a backtick. https://spec.commonmark.org/0.31.2/#fenced-code-blocks
_FENCE_OPEN_RE = re.compile(r" {0,3}(`{3,}(?=[^`]*$)|~{3,})")
_QUOTE_RE = re.compile(r" {0,3}>")
_BLANK_RE = re.compile(r"[ \t]*$")
_BACKTICKS = re.compile(r"`+")
_WORD_RE = re.compile(r"[^ \t]+")
_CODE = "\x00"  # masks code (spans, fenced blocks, quotes) so nothing in it reads as a command or argument


def parse_commands(body: str, known_clusters: Collection[str]) -> list[Command | CommandError]:
    """The commands in a comment body, one result per command line, in order (at most MAX_COMMANDS)."""
    # Comments written in the web UI arrive with CRLF line endings.
    text = body.replace("\r\n", "\n").replace("\r", "\n")
    masked = _mask(text).split("\n")
    original = text.split("\n")
    results: list[Command | CommandError] = []
    seen = 0
    dropped = ""
    for visible, raw in zip(masked, original, strict=True):
        match = _COMMAND_RE.match(visible)
        if match is None:
            continue
        seen += 1
        if seen > MAX_COMMANDS:
            dropped = dropped or raw.strip()
            continue
        # Masking keeps every character's position, so a word's span in `visible` is its span in `raw`.
        args = [raw[m.start() : m.end()] for m in _WORD_RE.finditer(visible, match.end())]
        results.append(_command(match.group(1), args, raw.strip(), known_clusters))
    if seen > MAX_COMMANDS:
        results.append(CommandError(f"too many commands: only the first {MAX_COMMANDS} of {seen} were read", dropped))
    return results


def help_text(rows: Sequence[tuple[str, str, str]]) -> str:
    """The Markdown reply to `/fluxwarden help`: one row per command, (usage, summary, who may use it as Markdown)."""
    lines = [f"| `{usage}` | {md.text(summary)} | {who} |" for usage, summary, who in rows]
    return "\n".join(
        [
            "### Fluxwarden commands",
            "",
            f"Write each command at the start of its own line in a comment (at most {MAX_COMMANDS} a comment);"
            " `/precheck` works on pull requests only.",
            "",
            "| command | what it does | who may use it |",
            "|---|---|---|",
            *lines,
            "",
            "Cluster names are case-sensitive. Quoted lines, code and HTML comments are ignored.",
            "",
        ]
    )


def permits(have: str, need: str) -> bool:
    """Whether repository permission `have` is at least `need` (an unknown `have` counts as none)."""
    # The REST API's legacy `permission` field only says admin/write/read/none; `role_name` carries
    # maintain and triage (or a custom role's name, which ranks as none here).
    # https://docs.github.com/en/rest/collaborators/collaborators#get-repository-permissions-for-a-user
    if need not in PERMISSION_ORDER:
        raise ValueError(f"unknown permission {need!r}; expected one of {', '.join(PERMISSION_ORDER)}")
    rank = PERMISSION_ORDER.index(have) if have in PERMISSION_ORDER else 0
    return rank >= PERMISSION_ORDER.index(need)


def you_have(have: str) -> str:
    """`you have read permission on this repository` (`no permission` for none or an unknown role)."""
    return f"you have {have if have in PERMISSION_ORDER[1:] else 'no'} permission on this repository"


def _command(word: str, args: list[str], line: str, known_clusters: Collection[str]) -> Command | CommandError:
    if word == "precheck":
        return _precheck(args, line, known_clusters)
    if not args:
        return CommandError("usage: " + " or ".join(f"`{_SPECS[name].usage}`" for name in _SUBCOMMANDS), line)
    sub, rest = args[0], args[1:]
    if sub not in _SUBCOMMANDS:
        return CommandError(f"unknown command {code_span('/fluxwarden ' + sub)}; try `{_SPECS['help'].usage}`", line)
    if rest:
        return CommandError(f"`{_SPECS[sub].usage}` takes no arguments", line)
    return _SUBCOMMANDS[sub]


def _precheck(args: list[str], line: str, known_clusters: Collection[str]) -> Command | CommandError:
    bad = [a for a in args if a not in known_clusters and not _NAME_RE.fullmatch(a)]
    if bad:
        return CommandError(f"not a cluster name: {_spans(bad)}; usage: `{_SPECS['precheck'].usage}`", line)
    unknown = [a for a in dict.fromkeys(args) if a not in known_clusters]
    if unknown:
        noun = "cluster" if len(unknown) == 1 else "clusters"
        known = _spans(sorted(known_clusters)) or "none"
        return CommandError(f"unknown {noun} {_spans(unknown)}; known: {known}", line)
    return PrecheckCommand(tuple(dict.fromkeys(args)))


def _spans(names: list[str]) -> str:
    """The first LIST_CAP names as code spans, then how many more: a reply stays short whatever a comment names."""
    shown = ", ".join(code_span(n) for n in names[:LIST_CAP])
    return shown + (f" and {len(names) - LIST_CAP:,} more" if len(names) > LIST_CAP else "")


def _mask(text: str) -> str:
    """The text with code, quotes and HTML comments masked, every character kept in place (linear time)."""
    out = list(text)
    lines = text.split("\n")
    starts = [0]
    for line in lines[:-1]:
        starts.append(starts[-1] + len(line) + 1)
    para_end = _paragraph_ends(lines, starts)
    pos, end = 0, len(text)

    def blank(start: int, stop: int, fill: str) -> None:
        for i in range(start, stop):
            if out[i] != "\n":
                out[i] = fill

    while pos < end:
        if pos == 0 or text[pos - 1] == "\n":
            index = bisect_right(starts, pos) - 1
            line = lines[index]
            fence = _FENCE_OPEN_RE.match(line)
            if fence:
                # An unclosed fence runs to the end of the comment, as GitHub renders it.
                stop = _fence_end(lines, starts, index, fence.group(1))
                blank(pos, stop, _CODE)
                pos = stop
                continue
            if _QUOTE_RE.match(line):
                # Only the `>` line itself: a lazy continuation line below a quote is read as a command.
                blank(pos, pos + len(line), _CODE)
                pos += len(line)
                continue
        char = text[pos]
        if char == "<" and text.startswith("<!--", pos):
            # An unclosed HTML comment hides the rest of the comment, as GitHub renders it.
            close = text.find("-->", pos + 4)
            stop = end if close < 0 else close + 3
            blank(pos, stop, " ")
            pos = stop
        elif char == "`":
            run_end = _run_end(text, pos)
            # A code span closes at the next run of exactly as many backticks, within the paragraph.
            limit = para_end[bisect_right(starts, pos) - 1]
            runs = _BACKTICKS.finditer(text, run_end, limit)
            span_end = next((m.end() for m in runs if m.end() - m.start() == run_end - pos), None)
            if span_end is None:
                pos = run_end  # unmatched backticks are literal
            else:
                blank(pos, span_end, _CODE)
                pos = span_end
        elif char == "\\" and pos + 1 < end and text[pos + 1] != "\n":
            pos += 2  # a backslash escape: `\`` is a literal backtick
        else:
            pos += 1
    return "".join(out)


def _run_end(text: str, pos: int) -> int:
    """The end of the run of backticks that starts at `pos`."""
    match = _BACKTICKS.match(text, pos)
    return pos if match is None else match.end()


def _paragraph_ends(lines: list[str], starts: list[int]) -> list[int]:
    """For each line, where its paragraph ends: a blank line, a fence or a quote interrupts a paragraph."""
    ends = [0] * len(lines)
    for index in range(len(lines) - 1, -1, -1):
        line_end = starts[index] + len(lines[index])
        follower = lines[index + 1] if index + 1 < len(lines) else None
        breaks = follower is None or bool(_BLANK_RE.match(follower) or _FENCE_OPEN_RE.match(follower) or _QUOTE_RE.match(follower))
        ends[index] = line_end if breaks else ends[index + 1]
    return ends


def _fence_end(lines: list[str], starts: list[int], index: int, opener: str) -> int:
    """Where the fenced block opened on line `index` ends (its closing line included), or the end of the text."""
    closing = re.compile(rf" {{0,3}}{re.escape(opener[0])}{{{len(opener)},}}[ \t]*")
    for later in range(index + 1, len(lines)):
        if closing.fullmatch(lines[later]):
            return starts[later] + len(lines[later])
    return starts[-1] + len(lines[-1])


def who(permission: str) -> str:
    """Who holds `permission` or more, as the help table says it."""
    if permission not in PERMISSION_ORDER:
        raise ValueError(f"unknown permission {permission!r}; expected one of {', '.join(PERMISSION_ORDER)}")
    if permission == "none":
        return "anyone"
    if permission == "admin":
        return "admin"
    return f"{permission} or higher"


def code_span(text: str) -> str:
    """`text` as a Markdown inline code span safe in a reply: printable, at most 40 characters, backticks literal."""
    return md.code(text, limit=40)
