"""A chart's `.helmignore`, read and applied exactly as Helm's loader does when it loads a chart directory.

helm/helm pkg/ignore/rules.go (copied as fluxcd/source-controller internal/helm/chart/secureloader/ignore,
which packs a chart from a GitRepository): one pattern a line, Go `filepath.Match` syntax (not gitignore's),
`**` refused, a trailing `/` for directories only, a leading `/` anchored at the chart root, a pattern
without `/` matched against the base name, and `!` with Helm's own semantics (see `HelmIgnore.ignored`).
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass

HELMIGNORE = ".helmignore"
# rules.go AddDefaults: dotfiles under templates/ are never part of a chart.
DEFAULT_RULES = ("templates/.?*",)


class HelmIgnoreError(ValueError):
    """A `.helmignore` Helm refuses to load (so the chart cannot be loaded)."""


@dataclass(frozen=True)
class _Pattern:
    raw: str
    regex: re.Pattern[str]
    negate: bool
    must_dir: bool
    base_only: bool  # no `/` in the pattern: matched against the last path element


@dataclass(frozen=True)
class HelmIgnore:
    """The rules of one chart (its `.helmignore` plus Helm's default), in order."""

    patterns: tuple[_Pattern, ...] = ()

    @classmethod
    def parse(cls, text: str | None) -> HelmIgnore:
        """The rules of a `.helmignore` (None: the chart has none) with Helm's default rule appended."""
        lines = (text or "").split("\n")
        return cls(tuple(p for line in (*lines, *DEFAULT_RULES) if (p := _parse_rule(line)) is not None))

    def ignored(self, path: str, is_dir: bool) -> bool:
        """Whether the chart-relative `path` (a directory when `is_dir`) is left out of the chart.

        rules.go Ignore: the first positive rule that matches ignores it. A negative rule does not un-ignore:
        anything it does *not* match is ignored there and then (and a directory-only negation ignores every
        file), while what it matches goes on to the next rule.
        """
        if path in ("", ".", "./"):
            return False
        for pattern in self.patterns:
            if pattern.negate:
                if (pattern.must_dir and not is_dir) or not _matches(pattern, path):
                    return True
                continue
            if pattern.must_dir and not is_dir:
                continue
            if _matches(pattern, path):
                return True
        return False


def _matches(pattern: _Pattern, path: str) -> bool:
    return pattern.regex.fullmatch(posixpath.basename(path) if pattern.base_only else path) is not None


def _parse_rule(line: str) -> _Pattern | None:
    rule = line.strip()
    if not rule or rule.startswith("#"):
        return None
    if "**" in rule:
        raise HelmIgnoreError(f"{HELMIGNORE}: {rule!r}: double-star (**) syntax is not supported")
    go_match_regex(rule)  # the whole rule, `!` and `/` included, must be a valid pattern (rules.go parseRule)
    negate = rule.startswith("!")
    if negate:
        rule = rule[1:]
    must_dir = rule.endswith("/")
    if must_dir:
        rule = rule[:-1]
    base_only = "/" not in rule
    return _Pattern(line.strip(), go_match_regex(rule[1:] if rule.startswith("/") else rule), negate, must_dir, base_only)


def go_match_regex(pattern: str) -> re.Pattern[str]:
    """Go's `path/filepath.Match` pattern (on a `/` system) as a regular expression for `fullmatch`.

    `*` is any run of non-`/`, `?` one non-`/` character, `[...]`/`[^...]` a class (which may match `/`),
    `\\` escapes; a malformed pattern raises HelmIgnoreError, as Match returns ErrBadPattern.
    """
    out: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "\\":
            i += 1
            if i >= n:
                raise HelmIgnoreError(f"{HELMIGNORE}: {pattern!r}: syntax error in pattern")
            out.append(re.escape(pattern[i]))
        elif c == "[":
            i, cls = _class(pattern, i + 1)
            out.append(cls)
            continue
        else:
            out.append(re.escape(c))
        i += 1
    return re.compile("".join(out), re.DOTALL)


def _class(pattern: str, i: int) -> tuple[int, str]:
    """A character class starting after `[` at `i`: (the index after its `]`, the regex class)."""
    bad = HelmIgnoreError(f"{HELMIGNORE}: {pattern!r}: syntax error in pattern")
    negated = i < len(pattern) and pattern[i] == "^"
    i += negated
    ranges: list[str] = []
    count = 0
    while True:
        if i < len(pattern) and pattern[i] == "]" and count:
            break
        lo, i = _class_char(pattern, i, bad)
        hi = lo
        if pattern[i] == "-":
            hi, i = _class_char(pattern, i + 1, bad)
        ranges.append(f"{re.escape(lo)}-{re.escape(hi)}" if lo < hi else re.escape(lo) if lo == hi else "")
        count += 1
    body = "".join(ranges)
    if not body:  # only reversed ranges, which Go's Match lets match nothing
        return i + 1, "." if negated else "(?!)"
    return i + 1, f"[{'^' if negated else ''}{body}]"


def _class_char(pattern: str, i: int, bad: HelmIgnoreError) -> tuple[str, int]:
    """One (possibly escaped) character of a class, as Go's getEsc reads it; a class must not end there."""
    if i >= len(pattern) or pattern[i] in "-]":
        raise bad
    if pattern[i] == "\\":
        i += 1
        if i >= len(pattern):
            raise bad
    if i + 1 >= len(pattern):
        raise bad  # the pattern ends inside the class
    return pattern[i], i + 1


__all__ = ["DEFAULT_RULES", "HELMIGNORE", "HelmIgnore", "HelmIgnoreError", "go_match_regex"]
