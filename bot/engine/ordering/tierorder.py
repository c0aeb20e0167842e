"""Read, check and minimally rewrite a bootstrap script's tier-order list (e.g. `TIER_ORDER=(...)`).

Bootstrap scripts keep the Flux Kustomization ("tier") names in dependency order so that each
tier can wait for the previous one. This module:

* reads that list statically from bash text (`read_tier_order`) with a small hand-written
  scanner that understands comments, quotes, line continuations and heredocs, but is not a
  bash parser: anything it cannot read without running bash raises `TierOrderError`;
* explains why a list is stale for a dependency graph (`stale_reasons`);
* computes the closest valid order (`stable_order`);
* writes a new order back touching only the lines that must change (`rewrite_tier_order`).

Names are compared as exact strings, as written in the script: an entry `flux-system/apps`
only matches a graph tier spelled `flux-system/apps`, so the caller passes graph names in the
same form the script uses (plain `name`, or `namespace/name`).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import AbstractSet, Any, Mapping, Sequence

from bot.engine.core.errors import TierOrderError

__all__ = [
    "StaleReason",
    "TierOrder",
    "TierOrderEntry",
    "read_tier_order",
    "rewrite_tier_order",
    "stable_order",
    "stale_reasons",
]

STYLE_MULTILINE = "array-multiline"
STYLE_INLINE = "array-inline"
STYLE_STRING = "string"

# A Kubernetes object name (DNS subdomain), optionally qualified as `namespace/name`.
_K8S_NAME = r"[a-z0-9](?:[-a-z0-9.]*[a-z0-9])?"
_NAME_RE = re.compile(rf"(?:{_K8S_NAME}/)?{_K8S_NAME}")
_VARIABLE_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Characters that end an unquoted word in bash (metacharacters) besides whitespace.
_WORD_BREAK = set(" \t\r\n()<>;&|")
# A `#` starts a comment only at the start of a word, i.e. after one of these (or at offset 0).
_COMMENT_AFTER = set(" \t\r\n;&|()")


@dataclass(frozen=True)
class TierOrderEntry:
    """One name in the list, with where it sits in the text."""

    name: str
    line: int  # 1-based line in the file
    start: int  # character offset of the name (inside any quotes)
    end: int  # offset just past the name


@dataclass(frozen=True)
class TierOrder:
    """The tier list as written: which variable, in which style, and its entries."""

    variable: str
    style: str  # "array-multiline" | "array-inline" | "string"
    entries: tuple[TierOrderEntry, ...]
    line: int  # 1-based line of the assignment

    @property
    def names(self) -> tuple[str, ...]:
        """The entry names in list order (duplicates kept)."""
        return tuple(entry.name for entry in self.entries)


@dataclass(frozen=True)
class StaleReason:
    """One reason the list is not a valid order for the dependency graph."""

    kind: str  # "missing" | "unknown" | "before-dependency" | "duplicate"
    tier: str
    detail: str  # a sentence fit for a PR comment
    dependency: str | None = None


# --------------------------------------------------------------------------------------------
# Reading


@dataclass(frozen=True)
class _Word:
    """A list word as written: its name, its quote character ("" if bare) and its full span."""

    name: str
    quote: str
    start: int  # offset of the word, including an opening quote
    end: int  # offset past the word, including a closing quote


@dataclass(frozen=True)
class _Parsed:
    """Everything `rewrite_tier_order` needs beyond the public `TierOrder`."""

    order: TierOrder
    delimiter: str  # "(" for arrays, '"' or "'" for quoted strings, "" for a bare word
    value_start: int  # offset just past the opening delimiter (the bare word itself if "")
    value_end: int  # offset of the closing delimiter (end of the bare word if "")
    words: tuple[_Word, ...]


def read_tier_order(text: str, variable: str) -> TierOrder:
    """Parse the first assignment of `variable` in bash `text`; raise TierOrderError if unreadable."""
    # Forms: `VAR=(a b)` over one or many lines (comments, blank lines, `\` continuations and
    # quoted words allowed), `VAR="a b"` / `VAR='a b'` (may span lines), `VAR=a`, each
    # optionally after export / declare / readonly / local / typeset and their flags. CRLF is
    # fine; offsets and lines always refer to `text` as given.
    return _parse(text, variable).order


def _parse(text: str, variable: str) -> _Parsed:
    """Find the assignment of `variable` and parse its value; raise TierOrderError if unreadable."""
    if not _VARIABLE_RE.fullmatch(variable):
        raise TierOrderError(f"{variable!r} is not a valid shell variable name")
    # An assignment must start a line of code (optionally after export/declare/readonly/local/
    # typeset and their flags); `;`-chained assignments are not recognised. We take the FIRST
    # one: it is what a reader sees as "the list", and a script that reassigns it later is
    # ambiguous anyway. Appends (`+=`) and element assignments (`[i]=`) anywhere make the list
    # dynamic, so they are refused rather than silently ignored.
    assign = re.compile(
        r"[ \t]*(?:(?:export|readonly|local|declare|typeset)(?:[ \t]+-[A-Za-z]+)*[ \t]+)?"
        + re.escape(variable)
        + r"(\+=|=|\[)"
    )
    first: re.Match[str] | None = None
    for line_start in _code_line_starts(text):
        match = assign.match(text, line_start)
        if match is None:
            continue
        if match.group(1) != "=":
            what = "appended to" if match.group(1) == "+=" else "assigned element by element"
            raise TierOrderError(
                f"{variable} is {what} at line {_line_of(text, match.start(1))}; "
                "the tier order cannot be read statically"
            )
        if first is None:
            first = match
    if first is None:
        raise TierOrderError(f"no assignment of {variable} found")
    name_start = first.start(1) - len(variable)
    line = _line_of(text, name_start)
    pos = first.end()
    if text.startswith("(", pos):
        return _parse_array(text, variable, line, pos + 1)
    if text[pos : pos + 1] in ('"', "'"):
        return _parse_string(text, variable, line, pos)
    return _parse_bare(text, variable, line, pos)


def _parse_array(text: str, variable: str, line: int, start: int) -> _Parsed:
    """Parse `( word word # comment ... )` whose content begins at `start`."""
    words: list[_Word] = []
    i, n = start, len(text)
    while True:
        # Skip whitespace, newlines and `\`-newline continuations between words.
        while i < n:
            if text[i] in " \t\r\n":
                i += 1
            elif text.startswith("\\\n", i):
                i += 2
            elif text.startswith("\\\r\n", i):
                i += 3
            else:
                break
        if i >= n:
            raise TierOrderError(f"{variable} at line {line}: the array is never closed with ')'")
        c = text[i]
        if c == ")":
            break
        if c == "#":  # a comment: we are at the start of a word here
            newline = text.find("\n", i)
            i = n if newline < 0 else newline
            continue
        word = _read_word(text, variable, i, array=True)
        words.append(word)
        i = word.end
    style = STYLE_MULTILINE if "\n" in text[start:i] else STYLE_INLINE
    return _finish(text, variable, line, style, "(", start, i, words)


def _read_word(text: str, variable: str, i: int, *, array: bool) -> _Word:
    """Read one array word (bare, or wholly in one pair of quotes) starting at `i`."""
    n = len(text)
    c = text[i]
    if c in "\"'":
        close = text.find(c, i + 1)
        if close < 0:
            raise TierOrderError(f"{variable} at line {_line_of(text, i)}: unterminated {c} quote")
        content = text[i + 1 : close]
        if c == '"':
            _refuse_dynamic(text, variable, i, content, quoted=True)
        end = close + 1
        # `"a"b` or `"a"$x` concatenates words; we only read words in one piece.
        if end < n and text[end] not in _WORD_BREAK:
            raise TierOrderError(
                f"{variable} at line {_line_of(text, i)}: {_snippet(text, i)!r} mixes quoted "
                "and unquoted text, which is not supported"
            )
        _check_name(text, variable, i + 1, content)
        return _Word(content, c, i, end)
    j = i
    while j < n and text[j] not in _WORD_BREAK:
        if text[j] in "\"'":
            raise TierOrderError(
                f"{variable} at line {_line_of(text, i)}: {_snippet(text, i)!r} mixes quoted "
                "and unquoted text, which is not supported"
            )
        j += 1
    content = text[i:j]
    if not content:
        what = "the array" if array else "the value"
        raise TierOrderError(
            f"{variable} at line {_line_of(text, i)}: unexpected {text[i]!r} in {what}"
        )
    _refuse_dynamic(text, variable, i, content, quoted=False)
    _check_name(text, variable, i, content)
    return _Word(content, "", i, j)


def _parse_string(text: str, variable: str, line: int, pos: int) -> _Parsed:
    """Parse a quoted string value: names separated by whitespace."""
    quote = text[pos]
    close = text.find(quote, pos + 1)
    if close < 0:
        raise TierOrderError(f"{variable} at line {line}: unterminated {quote} quote")
    content = text[pos + 1 : close]
    if quote == '"':
        _refuse_dynamic(text, variable, pos, content, quoted=True)
    if close + 1 < len(text) and text[close + 1] not in _WORD_BREAK:
        raise TierOrderError(
            f"{variable} at line {line}: {_snippet(text, pos)!r} mixes quoted and unquoted "
            "text, which is not supported"
        )
    words = []
    for match in re.finditer(r"[^ \t\r\n]+", content):
        start = pos + 1 + match.start()
        _check_name(text, variable, start, match.group())
        words.append(_Word(match.group(), "", start, pos + 1 + match.end()))
    return _finish(text, variable, line, STYLE_STRING, quote, pos + 1, close, words)


def _parse_bare(text: str, variable: str, line: int, pos: int) -> _Parsed:
    """Parse an unquoted value: a single name (`VAR=platform`) or nothing (`VAR=`)."""
    if pos >= len(text) or text[pos] in _WORD_BREAK:
        return _finish(text, variable, line, STYLE_STRING, "", pos, pos, [])
    word = _read_word(text, variable, pos, array=False)
    return _finish(text, variable, line, STYLE_STRING, "", pos, word.end, [word])


def _finish(
    text: str,
    variable: str,
    line: int,
    style: str,
    delimiter: str,
    value_start: int,
    value_end: int,
    words: list[_Word],
) -> _Parsed:
    """Build the public TierOrder and the private rewrite data from the words read."""
    entries = []
    for word in words:
        start = word.start + len(word.quote)
        entries.append(TierOrderEntry(word.name, _line_of(text, start), start, start + len(word.name)))
    order = TierOrder(variable, style, tuple(entries), line)
    return _Parsed(order, delimiter, value_start, value_end, tuple(words))


def _refuse_dynamic(text: str, variable: str, at: int, content: str, *, quoted: bool) -> None:
    """Raise if the word's value depends on running bash (expansions, globs, escapes)."""
    checks = [
        ("$", "a parameter or command expansion"),
        ("`", "a command substitution"),
        ("\\", "a backslash escape"),
    ]
    if not quoted:
        # Literal inside double quotes; unquoted array words are globbed / brace-expanded.
        checks += [("*", "a glob"), ("?", "a glob"), ("[", "a glob"), ("{", "brace expansion")]
        if content.startswith("~"):
            checks.append(("~", "tilde expansion"))
    for char, what in checks:
        if char in content:
            raise TierOrderError(
                f"{variable} at line {_line_of(text, at)}: {_snippet(text, at)!r} uses {what}, "
                "so the tier order cannot be read statically"
            )


def _check_name(text: str, variable: str, at: int, name: str) -> None:
    """Raise unless `name` is a Kubernetes name, optionally `namespace/name`."""
    if not _NAME_RE.fullmatch(name):
        raise TierOrderError(
            f"{variable} at line {_line_of(text, at)}: {name!r} is not a Kubernetes name "
            "(lowercase letters, digits, '-' and '.', optionally namespace/name)"
        )


def _snippet(text: str, at: int) -> str:
    """The rest of the line from `at`, shortened, for error messages."""
    end = text.find("\n", at)
    snippet = text[at : len(text) if end < 0 else end].rstrip("\r")
    return snippet if len(snippet) <= 60 else snippet[:57] + "..."


def _line_of(text: str, offset: int) -> int:
    """1-based line number of `offset`."""
    return text.count("\n", 0, offset) + 1


def _code_line_starts(text: str) -> list[int]:
    """Offsets of the lines that begin in code: not in a string, heredoc body or continuation."""
    # A context stack is enough for what bootstrap scripts contain: quotes, `$( )`, backticks,
    # comments and heredocs. Only line starts where the innermost context is code count.
    # Contexts: "code", "sub" (inside `$( )`, with its open-paren depth), "dq", "sq",
    # "ansi" (`$'...'`) and "bt" (backticks).
    starts = [0]
    stack: list[list[Any]] = [["code", 0]]
    heredocs: list[tuple[str, bool]] = []  # pending (delimiter, strip leading tabs)
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        top = stack[-1][0]
        if top == "sq":
            if c == "'":
                stack.pop()
            i += 1
            continue
        if top in ("dq", "bt", "ansi"):
            if c == "\\":
                i += 2
                continue
            if (top, c) in (("dq", '"'), ("bt", "`"), ("ansi", "'")):
                stack.pop()
            elif top == "dq" and text.startswith("$(", i):
                stack.append(["sub", 0])
                i += 2
                continue
            elif top == "dq" and c == "`":
                stack.append(["bt", 0])
            i += 1
            continue
        # top is "code" or "sub"
        if c == "\\":
            # An escaped character, or a continuation: the next line is not a new statement.
            i += 3 if text.startswith("\r\n", i + 1) else 2
            continue
        if c == "#" and (i == 0 or text[i - 1] in _COMMENT_AFTER):
            newline = text.find("\n", i)
            i = n if newline < 0 else newline
            continue
        if c == "\n":
            i += 1
            for delimiter, strip_tabs in heredocs:
                i = _skip_heredoc(text, i, delimiter, strip_tabs)
            heredocs.clear()
            if i < n:
                starts.append(i)
            continue
        if c == "'":
            stack.append(["ansi" if i > 0 and text[i - 1] == "$" else "sq", 0])
        elif c == '"':
            stack.append(["dq", 0])
        elif c == "`":
            stack.append(["bt", 0])
        elif text.startswith("$(", i):
            stack.append(["sub", 0])
            i += 2
            continue
        elif top == "sub" and c == "(":
            stack[-1][1] += 1
        elif top == "sub" and c == ")":
            if stack[-1][1] == 0:
                stack.pop()
            else:
                stack[-1][1] -= 1
        elif text.startswith("<<", i) and not text.startswith("<<<", i) and not stack[-1][1]:
            # (Inside `$(( ))`, i.e. with parens open in a "sub", `<<` is a shift, not a heredoc.)
            i, heredoc = _read_heredoc_operator(text, i + 2)
            if heredoc is not None:
                heredocs.append(heredoc)
            continue
        i += 1
    return starts


def _read_heredoc_operator(text: str, i: int) -> tuple[int, tuple[str, bool] | None]:
    """Read `[-] WORD` after `<<`; return the offset after it and (delimiter, strip tabs)."""
    strip_tabs = text.startswith("-", i)
    if strip_tabs:
        i += 1
    while i < len(text) and text[i] in " \t":
        i += 1
    j = i
    while j < len(text) and text[j] not in _WORD_BREAK:
        j += 1
    # Quoting the delimiter (`'EOF'`, `"EOF"`, `\EOF`) only disables expansion in the body.
    delimiter = re.sub(r"[\"'\\]", "", text[i:j])
    # `(( x << 2 ))` and `<<=` are arithmetic; no one ends a heredoc with a number.
    if not delimiter or delimiter.isdigit() or delimiter.startswith("="):
        return j, None
    return j, (delimiter, strip_tabs)


def _skip_heredoc(text: str, i: int, delimiter: str, strip_tabs: bool) -> int:
    """Skip a heredoc body starting at `i`; return the offset after its delimiter line."""
    n, start = len(text), i
    while i < n:
        newline = text.find("\n", i)
        end = n if newline < 0 else newline + 1
        line = text[i:end].rstrip("\r\n")
        if (line.lstrip("\t") if strip_tabs else line) == delimiter:
            return end
        i = end
    # No delimiter line: more likely a `<<` we misread than a heredoc running to the end of
    # the file, so keep scanning the lines as code rather than hide the rest of the script.
    return start


# --------------------------------------------------------------------------------------------
# Checking and ordering


def _graph(deps: Mapping[str, AbstractSet[str]]) -> dict[str, frozenset[str]]:
    """Every tier of the graph with its direct dependencies.

    A tier named only as a dependency is a graph tier too (with no dependencies of its own):
    it has to be up before its dependents, so it belongs in the list.
    """
    graph = {tier: frozenset(requires) for tier, requires in deps.items()}
    for requires in deps.values():
        for tier in requires:
            graph.setdefault(tier, frozenset())
    return graph


def _join(names: Sequence[str]) -> str:
    """`a`, `a and b`, `a, b and c`."""
    if len(names) <= 1:
        return "".join(names)
    return ", ".join(names[:-1]) + " and " + names[-1]


def stale_reasons(names: Sequence[str], deps: Mapping[str, AbstractSet[str]]) -> list[StaleReason]:
    """Why `names` is not a valid order for the graph `deps` (tier -> the tiers it depends on); [] when valid."""
    # Reasons follow the list (duplicate / unknown / before-dependency at the entry concerned),
    # then missing tiers by name, so the output is deterministic and reads top to bottom.
    # Positions are those of first occurrences. A cycle needs no special kind: any order of
    # a cycle lists some tier before one of its dependencies.
    graph = _graph(deps)
    first: dict[str, int] = {}
    for position, name in enumerate(names):
        first.setdefault(name, position)
    counts = Counter(names)
    reasons: list[StaleReason] = []
    reported: set[str] = set()
    for position, name in enumerate(names):
        if first[name] != position:
            if name not in reported:
                reported.add(name)
                where = [str(p + 1) for p, other in enumerate(names) if other == name]
                reasons.append(
                    StaleReason(
                        "duplicate",
                        name,
                        f"{name} is listed {counts[name]} times (positions {_join(where)})",
                    )
                )
            continue
        if name not in graph:
            reasons.append(
                StaleReason("unknown", name, f"{name} is listed but is not a tier in the dependency graph")
            )
            continue
        for dependency in sorted(graph[name]):
            if dependency in first and first[dependency] > position:
                reasons.append(
                    StaleReason(
                        "before-dependency",
                        name,
                        f"{name} is listed before {dependency}, which it depends on",
                        dependency,
                    )
                )
    for tier in sorted(set(graph) - set(first)):
        requires = sorted(graph[tier])
        detail = f"{tier} is not listed" + (f"; it depends on {_join(requires)}" if requires else "")
        reasons.append(StaleReason("missing", tier, detail))
    return reasons


def find_cycle(graph: Mapping[str, AbstractSet[str]]) -> list[str] | None:
    """A dependency cycle as [a, b, ..., a] (each depends on the next), or None; deterministic."""
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    for root in sorted(graph):
        if root in state:
            continue
        path = [root]
        state[root] = 1
        iterators = [iter(sorted(graph[root]))]
        while iterators:
            nxt = next(iterators[-1], None)
            if nxt is None:
                state[path.pop()] = 2
                iterators.pop()
            elif state.get(nxt) == 1:
                cycle = path[path.index(nxt) :]
                # Start at the smallest name so the message does not depend on where we entered.
                k = cycle.index(min(cycle))
                cycle = cycle[k:] + cycle[:k]
                return cycle + [cycle[0]]
            elif nxt not in state:
                state[nxt] = 1
                path.append(nxt)
                iterators.append(iter(sorted(graph.get(nxt, ()))))
    return None


def stable_order(current: Sequence[str], deps: Mapping[str, AbstractSet[str]]) -> list[str]:
    """Every graph tier after its dependencies, keeping `current`'s order wherever it is valid."""
    # Rules (a priority-driven Kahn topological sort, so the result is always valid):
    # * names unknown to the graph and repeated names (after the first) are dropped;
    # * listed tiers keep their relative order; a tier listed before one of its dependencies
    #   is held back until its dependencies are out, i.e. it moves to right after the last of
    #   them; only tiers that must wait for it move with it, the rest stay where they are;
    # * a missing tier with dependencies goes right after the last of its dependencies (if
    #   several become ready together, the most recently enabled first, then by name), which
    #   keeps chains of new tiers together;
    # * a missing tier without dependencies goes right before the first listed tier that
    #   (transitively) needs it, else at the end: appending is what a person would do, and
    #   putting an unconstrained tier ahead of the foundation (CNI...) would be surprising.
    graph = _graph(deps)
    cycle = find_cycle(graph)
    if cycle is not None:
        raise TierOrderError(
            "tier dependencies form a cycle: " + " -> ".join(cycle) + " (each depends on the next)"
        )
    index: dict[str, int] = {}
    for name in current:
        if name in graph and name not in index:
            index[name] = len(index)
    dependents: dict[str, set[str]] = {tier: set() for tier in graph}
    for tier, requires in graph.items():
        for dependency in requires:
            dependents[dependency].add(tier)
    end = len(index)
    free_key: dict[str, int] = {}  # missing tiers without dependencies -> index to go before
    for tier in graph:
        if tier in index or graph[tier]:
            continue
        best, seen, todo = end, {tier}, [tier]
        while todo:
            for user in dependents[todo.pop()]:
                if user not in seen:
                    seen.add(user)
                    todo.append(user)
                    best = min(best, index.get(user, end))
        free_key[tier] = best
    waiting = {tier: len(requires) for tier, requires in graph.items()}
    # Ready listed tiers and dependency-free missing tiers compete by (index, missing first).
    ready: dict[str, tuple[int, int, str]] = {}
    urgent: dict[str, tuple[int, str]] = {}  # ready missing tiers with dependencies
    for tier, count in waiting.items():
        if count == 0:
            ready[tier] = (index[tier], 1, "") if tier in index else (free_key[tier], 0, tier)
    result: list[str] = []
    while ready or urgent:
        if urgent:
            tier = min(urgent, key=urgent.__getitem__)
            del urgent[tier]
        else:
            tier = min(ready, key=ready.__getitem__)
            del ready[tier]
        result.append(tier)
        for user in sorted(dependents[tier]):
            waiting[user] -= 1
            if waiting[user] == 0:
                if user in index:
                    ready[user] = (index[user], 1, "")
                else:
                    urgent[user] = (-len(result), user)
    return result


# --------------------------------------------------------------------------------------------
# Rewriting


class _Slot:
    """A word in a line being edited; identity matters (duplicates may share a name)."""

    __slots__ = ("name", "quote")

    def __init__(self, name: str, quote: str) -> None:
        self.name = name
        self.quote = quote

    def render(self) -> str:
        return f"{self.quote}{self.name}{self.quote}"


@dataclass
class _Line:
    """A line of the value being edited: text and words alternating, starting and ending with text."""

    parts: list[str | _Slot]
    head: bool = False  # holds the opening delimiter
    tail: bool = False  # holds the closing delimiter
    slots: list[_Slot] = field(init=False)

    def __post_init__(self) -> None:
        self.slots = [p for p in self.parts if isinstance(p, _Slot)]

    def render(self) -> str:
        return "".join(p if isinstance(p, str) else p.render() for p in self.parts)

    @property
    def indent(self) -> str:
        first = self.parts[0]
        assert isinstance(first, str)
        return first[: len(first) - len(first.lstrip(" \t"))]

    @property
    def eol(self) -> str:
        last = self.parts[-1]
        assert isinstance(last, str)
        return "\r\n" if last.endswith("\r\n") else "\n" if last.endswith("\n") else ""

    def separator(self) -> str | None:
        """The text between the first two words, if this line has two."""
        if len(self.slots) < 2:
            return None
        sep = self.parts[2]
        assert isinstance(sep, str)
        return sep

    def remove(self, slot: _Slot) -> None:
        """Drop a word together with one separator next to it."""
        j = self.parts.index(slot)
        if j + 2 < len(self.parts):  # a word follows: drop this word and the separator after it
            del self.parts[j : j + 2]
        elif j >= 3:  # a word precedes: drop the separator before and this word
            del self.parts[j - 1 : j + 1]
        else:  # the only word: keep the text around it
            before, after = self.parts[j - 1], self.parts[j + 1]
            assert isinstance(before, str) and isinstance(after, str)
            self.parts[j - 1 : j + 2] = [before + after]
        self.slots.remove(slot)

    def insert_after(self, anchor: _Slot, slot: _Slot, sep: str) -> None:
        j = self.parts.index(anchor)
        self.parts[j + 1 : j + 1] = [sep, slot]
        self.slots.insert(self.slots.index(anchor) + 1, slot)

    def insert_before(self, anchor: _Slot, slot: _Slot, sep: str) -> None:
        j = self.parts.index(anchor)
        self.parts[j:j] = [slot, sep]
        self.slots.insert(self.slots.index(anchor), slot)


def _lcs(old: Sequence[str], new: Sequence[str]) -> dict[int, int]:
    """Map new index -> old index for a longest common subsequence (ties keep later old items)."""
    n, m = len(old), len(new)
    table = [[0] * (m + 1) for _ in range(n + 1)]
    for i in range(n - 1, -1, -1):
        for j in range(m - 1, -1, -1):
            if old[i] == new[j]:
                table[i][j] = table[i + 1][j + 1] + 1
            else:
                table[i][j] = max(table[i + 1][j], table[i][j + 1])
    pairs: dict[int, int] = {}
    i = j = 0
    while i < n and j < m:
        if old[i] == new[j]:
            pairs[j] = i
            i, j = i + 1, j + 1
        elif table[i + 1][j] >= table[i][j + 1]:
            # Skipping the old item on a tie means an earlier entry is the one that moves,
            # e.g. [apps, platform] -> [platform, apps] moves `apps` below `platform`.
            i += 1
        else:
            j += 1
    return pairs


def rewrite_tier_order(text: str, order: TierOrder, new_names: Sequence[str]) -> str:
    """Return text with the list changed to new_names, touching only the lines that must change."""
    # Entries that keep their relative order (a longest common subsequence) stay untouched;
    # the others are removed, and moved or new entries are inserted after their predecessor
    # in the new order (the first one before the first kept entry). In a one-entry-per-line
    # array a moved entry's whole line moves, comment and all, and a new entry gets a line
    # indented like its neighbours. Words sharing a line with other words or with the
    # brackets/quotes are edited in place, word by word (a comment on such a moved line stays).
    new_names = list(new_names)
    for name in new_names:
        if not _NAME_RE.fullmatch(name):
            raise ValueError(f"{name!r} is not a Kubernetes name")
    if len(set(new_names)) != len(new_names):
        raise ValueError(f"new tier order repeats names: {new_names}")
    parsed = _parse(text, order.variable)
    if parsed.order != order:
        raise TierOrderError(f"{order.variable} changed since it was read; read it again")
    if new_names == list(order.names):
        return text
    if parsed.delimiter == "":
        result = _rewrite_bare(text, parsed, new_names)
    else:
        result = _rewrite_lines(text, parsed, new_names)
    # Never hand back a script we would not read the same way.
    reread = read_tier_order(result, order.variable).names
    if list(reread) != new_names:
        raise TierOrderError(f"rewriting {order.variable} gave {list(reread)}, expected {new_names}")
    return result


def _rewrite_bare(text: str, parsed: _Parsed, new_names: list[str]) -> str:
    """`VAR=name`: a single name stays bare, several need double quotes."""
    value = new_names[0] if len(new_names) == 1 else '"' + " ".join(new_names) + '"'
    return text[: parsed.value_start] + value + text[parsed.value_end :]


def _rewrite_lines(text: str, parsed: _Parsed, new_names: list[str]) -> str:
    """Edit an array or quoted string line by line (see rewrite_tier_order)."""
    region_start, region_end = _value_region(text, parsed)
    lines, slots = _split_lines(text, parsed, region_start, region_end)
    home: dict[int, _Line] = {id(slot): line for line in lines for slot in line.slots}
    style = _house_style(lines, slots, parsed.delimiter)
    quoted = parsed.delimiter == "("  # only an array's words carry their own quotes
    kept = _lcs([slot.name for slot in slots], new_names)  # new index -> old index
    placed: dict[str, _Slot] = {new_names[j]: slots[i] for j, i in kept.items()}
    detached = _remove_unkept(lines, slots, home, set(kept.values()), placed, set(new_names))
    for k, name in enumerate(new_names):
        if k in kept:
            continue
        if k > 0:
            anchor = placed[new_names[k - 1]]
            slot, carried = _new_slot(name, anchor, detached, quoted, style)
            _place_after(lines, home, anchor, slot, carried, style)
        else:
            first = next((line.slots[0] for line in lines if line.slots), None)
            slot, carried = _new_slot(name, first, detached, quoted, style)
            _place_first(lines, home, first, slot, carried, style, parsed.value_start - region_start)
        placed[name] = slot
    return text[:region_start] + "".join(line.render() for line in lines) + text[region_end:]


@dataclass(frozen=True)
class _Style:
    """How the value writes an entry: line ending, indent of an entry's own line, quote, separator on a shared line."""

    eol: str
    indent: str
    quote: str
    sep: str


def _value_region(text: str, parsed: _Parsed) -> tuple[int, int]:
    """The whole lines the value spans, from the opening delimiter's line to the closing one's."""
    region_start = text.rfind("\n", 0, parsed.value_start - 1) + 1
    newline = text.find("\n", parsed.value_end)
    region_end = len(text) if newline < 0 else newline + 1
    return region_start, region_end


def _split_lines(text: str, parsed: _Parsed, region_start: int, region_end: int) -> tuple[list[_Line], list[_Slot]]:
    """The region's lines cut into text and words, and one slot per old entry in order."""
    lines: list[_Line] = []
    slots: list[_Slot] = []
    line_start = region_start
    words = list(parsed.words)
    while line_start < region_end:
        newline = text.find("\n", line_start, region_end)
        line_end = region_end if newline < 0 else newline + 1
        parts: list[str | _Slot] = []
        cursor = line_start
        while words and words[0].start < line_end:
            word = words.pop(0)
            slot = _Slot(word.name, word.quote)
            parts += [text[cursor : word.start], slot]
            slots.append(slot)
            cursor = word.end
        parts.append(text[cursor:line_end])
        lines.append(
            _Line(
                parts,
                head=line_start <= parsed.value_start - 1 < line_end,
                tail=line_start <= parsed.value_end < line_end,
            )
        )
        line_start = line_end
    return lines, slots


def _house_style(lines: list[_Line], slots: list[_Slot], delimiter: str) -> _Style:
    """The style new entries copy from the value as written (before any edit)."""
    original_body = [line for line in lines if not line.head and not line.tail and line.slots]
    indents = Counter(line.indent for line in original_body if len(line.slots) == 1)
    if indents:
        default_indent = indents.most_common(1)[0][0]
    else:
        base = lines[-1].indent if lines[-1].tail and len(lines) > 1 else lines[0].indent
        default_indent = base + "  "
    if delimiter == "(":
        quotes = [slot.quote for slot in slots]
        default_quote = Counter(quotes).most_common(1)[0][0] if quotes else ""
    else:
        default_quote = ""  # words inside a string are never quoted
    inline_seps = [sep for line in lines if (sep := line.separator()) is not None]
    default_sep = inline_seps[0] if inline_seps else " "
    return _Style(lines[0].eol or "\n", default_indent, default_quote, default_sep)


def _remove_unkept(
    lines: list[_Line],
    slots: list[_Slot],
    home: dict[int, _Line],
    kept_old: AbstractSet[int],
    placed: Mapping[str, _Slot],
    wanted: AbstractSet[str],
) -> dict[str, _Line]:
    """Take out every entry not kept; returns each moved entry's own line, to re-insert whole."""
    detached: dict[str, _Line] = {}
    for i, slot in enumerate(slots):
        if i in kept_old:
            continue
        line = home.pop(id(slot))
        movable = slot.name in wanted and slot.name not in placed and slot.name not in detached
        if not line.head and not line.tail and len(line.slots) == 1:
            lines.remove(line)  # the entry's line goes, comment and all
            if movable:
                detached[slot.name] = line
        else:
            line.remove(slot)
            if movable:
                detached[slot.name] = _Line([""])  # marks "moved"; no line to carry
    return detached


def _new_slot(
    name: str, near: _Slot | None, detached: Mapping[str, _Line], quoted: bool, style: _Style
) -> tuple[_Slot, _Line | None]:
    """The word to insert for `name`: a moved entry's own (with its line), or a new one quoted like `near`."""
    carried = detached.get(name)
    if carried is not None and carried.slots:
        return carried.slots[0], carried
    quote = near.quote if near is not None and quoted else style.quote
    return _Slot(name, quote), None


def _place_after(
    lines: list[_Line], home: dict[int, _Line], anchor: _Slot, slot: _Slot, carried: _Line | None, style: _Style
) -> None:
    """Insert `slot` after `anchor`: on a line of its own when `anchor` ends a body line, else beside it."""
    line = home[id(anchor)]
    if line.slots[-1] is anchor and not line.tail:
        indent = line.indent if not line.head else style.indent
        target = carried or _Line([indent, slot, line.eol or style.eol])
        lines.insert(lines.index(line) + 1, target)
        home[id(slot)] = target
    else:
        line.insert_after(anchor, slot, line.separator() or style.sep)
        home[id(slot)] = line


def _place_first(
    lines: list[_Line],
    home: dict[int, _Line],
    first: _Slot | None,
    slot: _Slot,
    carried: _Line | None,
    style: _Style,
    cut: int,
) -> None:
    """Insert `slot` before every other entry; `cut` is where the value opens within the first line."""
    if first is not None:
        line = home[id(first)]
        if not line.head:  # `first` opens its line: the new entry goes on a line above
            target = carried or _Line([line.indent, slot, line.eol or style.eol])
            lines.insert(lines.index(line), target)
            home[id(slot)] = target
        else:
            line.insert_before(first, slot, line.separator() or style.sep)
            home[id(slot)] = line
    elif lines[-1].tail and len(lines) > 1:  # empty multi-line value: above the closer
        target = carried or _Line([style.indent, slot, style.eol])
        lines.insert(len(lines) - 1, target)
        home[id(slot)] = target
    else:  # empty one-line value: right after the opening delimiter
        line = lines[0]
        only = line.parts[0]
        assert isinstance(only, str) and len(line.parts) == 1
        line.parts[:] = [only[:cut], slot, only[cut:]]
        line.slots.append(slot)
        home[id(slot)] = line
