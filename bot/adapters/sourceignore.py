"""`.sourceignore` matching: gitignore rules, judged path by path as git judges them, on `pathspec`'s wildmatch.

`pathspec` translates each pattern (character classes, escapes, `**`, `!`, anchoring, trailing `/`). Its
patterns also match everything below a matched directory; the walks in bot/adapters/workspace.py ask about
each path as they reach it and never enter an ignored directory, so a rule counts here only when it matches
the path itself (git's rule: a file below an excluded directory cannot be re-included).
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass

from pathspec import GitIgnoreSpec


@dataclass(frozen=True)
class _Rule:
    """One pattern line of a `.sourceignore` in directory `base`."""

    regex: re.Pattern[str]  # pathspec's translation of the line
    exclude: bool  # False for a `!` line
    base: str  # repo-relative directory of the file the line came from, "" for the root
    anchored: bool  # a `/` before the end: matched against the path below `base`, else against the name
    dir_only: bool  # a trailing `/`: directories only


class IgnoreRules:
    """gitignore-style patterns as `.sourceignore` uses them (wildmatch with classes and escapes, anchoring, `**`, `!`, trailing `/`)."""

    def __init__(self) -> None:
        self._rules: list[_Rule] = []

    def add(self, pattern: str, base: str = "") -> None:
        """Add one pattern line, relative to directory `base` (repo-relative, "" for the root)."""
        line = pattern.rstrip("\n")
        try:
            compiled = GitIgnoreSpec.from_lines([line]).patterns
        except (ValueError, re.error):  # an invalid pattern (e.g. a reversed range) matches nothing, as in git
            return
        if not compiled or compiled[0].include is None or compiled[0].regex is None:  # blank, comment, a lone `/`
            return
        body = line if line.endswith("\\ ") else line.rstrip()
        body = body[1:] if body.startswith("!") else body
        dir_only = body.endswith("/")
        self._rules.append(_Rule(compiled[0].regex, compiled[0].include, base, "/" in body.rstrip("/"), dir_only))

    def ignored(self, path: str, is_dir: bool) -> bool:
        """True when the last rule matching `path` itself excludes it."""
        name = posixpath.basename(path)
        for rule in reversed(self._rules):
            if rule.dir_only and not is_dir:
                continue
            if not rule.base:
                below = path
            elif path.startswith(rule.base + "/"):
                below = path[len(rule.base) + 1:]
            else:
                continue
            candidate = below if rule.anchored else name
            if rule.dir_only:
                candidate += "/"  # pathspec marks a directory by its trailing slash
            match = rule.regex.search(candidate)
            # pathspec's one named group marks a match that ended at a directory's slash; one before the end of
            # the candidate means only a parent directory matched, which git (and the walk) has already judged.
            if match is not None and (match.lastgroup is None or match.end() == len(candidate)):
                return rule.exclude
        return False
