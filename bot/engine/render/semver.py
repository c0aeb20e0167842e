"""Semantic versions and version constraints as Masterminds/semver v3 reads them (Helm's and Flux's chart versions)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Iterable

from bot.engine.core.errors import UserError

# Longer version or constraint strings are refused before any regex runs over them.
MAX_TEXT = 256

# Masterminds/semver v3 version.go NewVersion (the non-strict parser Helm and fluxcd/pkg/version use): a `v`
# prefix, minor and patch optional, leading zeros in the numbers coerced (v3.4 CoerceNewVersion).
_VERSION = re.compile(
    r"v?([0-9]+)(?:\.([0-9]+))?(?:\.([0-9]+))?"
    r"(?:-([0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?"
    r"(?:\+([0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?"
)
# One version inside a constraint: any number may be a wildcard (x, X, *). Groups: major, .minor, .patch, -pre.
_CV = (
    r"v?([0-9xX*]+)(\.[0-9xX*]+)?(\.[0-9xX*]+)?"
    r"(-[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*)?"
    r"(?:\+[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*)?"
)
_CV_PLAIN = _CV.replace("(", "(?:").replace("(?:?:", "(?:")
# constraints.go: the operators in the order the Go regex tries them (the empty one is `=`).
_OPS = r"=||!=|>|<|>=|=>|<=|=<|~|~>|\^"
_ONE = re.compile(rf"\s*({_OPS})\s*({_CV})\s*")
_FIND = re.compile(rf"(?:{_OPS})\s*{_CV_PLAIN}")
_VALID = re.compile(rf"\s*(?:{_OPS})\s*{_CV_PLAIN}\s*(?:(?:\s+|,\s*)(?:{_OPS})\s*{_CV_PLAIN}\s*)*")
# rewriteRange: `A - B` (spaces required around the dash) is `>= A, <= B`.
_RANGE = re.compile(rf"\s*({_CV_PLAIN})\s+-\s+({_CV_PLAIN})\s*")
_WILD = frozenset({"x", "X", "*"})


class ConstraintError(UserError):
    """A chart version constraint that Masterminds/semver (so Helm and Flux) cannot parse."""


def _prerelease_valid(pre: str) -> bool:
    """semver 2.0 item 9: numeric identifiers carry no leading zero (Masterminds validatePrerelease)."""
    return all(not (part.isdigit() and len(part) > 1 and part[0] == "0") for part in pre.split("."))


@dataclass(frozen=True, eq=False)
class Version:
    """A parsed semantic version; equality and order follow semver 2.0 precedence (build metadata ignored)."""

    major: int
    minor: int
    patch: int
    prerelease: str = ""
    build: str = ""
    original: str = field(default="", compare=False)

    def _key(self) -> tuple[int, int, int]:
        return (self.major, self.minor, self.patch)

    def compare(self, other: Version) -> int:
        """-1, 0 or 1 as semver 2.0 item 11 orders the two."""
        if self._key() != other._key():
            return -1 if self._key() < other._key() else 1
        return _compare_prerelease(self.prerelease, other.prerelease)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Version) and self.compare(other) == 0

    def __hash__(self) -> int:
        return hash((self._key(), self.prerelease))

    def __lt__(self, other: Version) -> bool:
        return self.compare(other) < 0

    def __le__(self, other: Version) -> bool:
        return self.compare(other) <= 0

    def __gt__(self, other: Version) -> bool:
        return self.compare(other) > 0

    def __ge__(self, other: Version) -> bool:
        return self.compare(other) >= 0

    def __str__(self) -> str:
        text = f"{self.major}.{self.minor}.{self.patch}"
        text += f"-{self.prerelease}" if self.prerelease else ""
        return text + (f"+{self.build}" if self.build else "")


def _compare_identifier(a: str, b: str) -> int:
    """Item 11.4: numeric identifiers compare as numbers and sort below alphanumeric ones."""
    if a.isdigit() and b.isdigit():
        x, y = int(a), int(b)
        return (x > y) - (x < y)
    if a.isdigit() != b.isdigit():
        return -1 if a.isdigit() else 1
    return (a > b) - (a < b)


def _compare_prerelease(a: str, b: str) -> int:
    """Item 11.3: a release sorts above its prereleases; prereleases compare identifier by identifier."""
    if a == b:
        return 0
    if not a or not b:
        return 1 if not a else -1
    left, right = a.split("."), b.split(".")
    for x, y in zip(left, right):
        result = _compare_identifier(x, y)
        if result:
            return result
    return (len(left) > len(right)) - (len(left) < len(right))


def parse_version(text: str) -> Version | None:
    """The version Masterminds' NewVersion reads from `text` (a `v` and a missing minor or patch allowed), or None."""
    if not isinstance(text, str) or len(text) > MAX_TEXT:
        return None
    match = _VERSION.fullmatch(text)
    if match is None:
        return None
    major, minor, patch, pre, build = match.groups()
    if pre and not _prerelease_valid(pre):
        return None
    return Version(int(major), int(minor or 0), int(patch or 0), pre or "", build or "", original=text)


@dataclass(frozen=True)
class _Term:
    """One comparison: an operator and its version, with which parts were wildcards or left out."""

    op: str
    version: Version
    dirty: bool
    minor_dirty: bool
    patch_dirty: bool

    def check(self, v: Version, include_pre: bool) -> bool:
        """Whether `v` satisfies this comparison (constraints.go, one cfunc per operator)."""
        if v.prerelease and not include_pre:
            return False
        return _CHECKS[self.op](self, v)


def _equal_or_tilde(t: _Term, v: Version) -> bool:
    """`=` and no operator: a wildcard makes it a tilde range (`1.2.x` is `~1.2`), else equality."""
    return _tilde(t, v) if t.dirty else v == t.version


def _not_equal(t: _Term, v: Version) -> bool:
    c = t.version
    if t.dirty:
        if c.major != v.major:
            return True
        if t.minor_dirty:
            return False
        if c.minor != v.minor:
            return True
        if t.patch_dirty:
            return False
    return v != c


def _greater(t: _Term, v: Version) -> bool:
    c = t.version
    if not t.dirty:
        return v > c
    if v.major != c.major:
        return v.major > c.major
    if t.minor_dirty:
        return False  # `>11` wants 12 or higher, not 11.1.0
    if t.patch_dirty:
        return v.minor > c.minor  # `>11.1` wants 11.2 or higher
    return v > c


def _less(t: _Term, v: Version) -> bool:
    return v < t.version


def _greater_equal(t: _Term, v: Version) -> bool:
    return v >= t.version


def _less_equal(t: _Term, v: Version) -> bool:
    c = t.version
    if not t.dirty:
        return v <= c
    if v.major > c.major:
        return False
    return not (v.major == c.major and v.minor > c.minor and not t.minor_dirty)


def _tilde(t: _Term, v: Version) -> bool:
    """`~1.2.3` is `>=1.2.3 <1.3.0`; `~1` and `~1.x` are `>=1 <2`; `~0.0.0` (and `~*`) is anything."""
    c = t.version
    if v < c:
        return False
    if (c.major, c.minor, c.patch) == (0, 0, 0) and not t.minor_dirty and not t.patch_dirty:
        return True
    if v.major != c.major:
        return False
    return v.minor == c.minor or t.minor_dirty


def _caret(t: _Term, v: Version) -> bool:
    """`^1.2.3` is `>=1.2.3 <2`; `^0.2.3` is `>=0.2.3 <0.3`; `^0.0.3` is `=0.0.3`; `^0.0` is `<0.1`; `^0` is `<1`."""
    c = t.version
    if v < c:
        return False
    if c.major > 0 or t.minor_dirty:
        return v.major == c.major
    if v.major > 0:
        return False
    if c.minor > 0 or t.patch_dirty:
        return v.minor == c.minor
    if v.minor > 0:
        return False
    return v.patch == c.patch


_CHECKS = {
    "": _equal_or_tilde, "=": _equal_or_tilde, "!=": _not_equal, ">": _greater, "<": _less,
    ">=": _greater_equal, "=>": _greater_equal, "<=": _less_equal, "=<": _less_equal,
    "~": _tilde, "~>": _tilde, "^": _caret,
}


def _parse_term(text: str) -> _Term:
    """One `op version` (constraints.go parseConstraint): a wildcard or a missing part zeroes the rest."""
    match = _ONE.fullmatch(text)
    if match is None:
        raise ConstraintError(f"improper constraint: {text.strip()!r}")
    op, written, major, minor, patch, pre = match.groups()
    minor, patch = (minor or "").lstrip("."), (patch or "").lstrip(".")
    pre = pre or ""
    dirty = minor_dirty = patch_dirty = False
    if major in _WILD:
        dirty, version_text = True, f"0.0.0{pre}"
    elif not minor or minor in _WILD:
        dirty = minor_dirty = True
        version_text = f"{major}.0.0{pre}"
    elif not patch or patch in _WILD:
        dirty = patch_dirty = True
        version_text = f"{major}.{minor}.0{pre}"
    else:
        version_text = written
    version = parse_version(version_text)
    if version is None:
        raise ConstraintError(f"improper constraint: {text.strip()!r}")
    return _Term(op, version, dirty, minor_dirty, patch_dirty)


@dataclass(frozen=True)
class Constraint:
    """A parsed version constraint: OR groups (`||`) of AND terms (`,` or space)."""

    text: str
    groups: tuple[tuple[_Term, ...], ...]

    @classmethod
    def parse(cls, text: str) -> Constraint:
        """Parse as Masterminds' NewConstraint does; an empty text is `*`, the latest stable (source-controller)."""
        if not isinstance(text, str) or len(text) > MAX_TEXT:
            raise ConstraintError("a version constraint must be a string of at most 256 characters")
        # fluxcd/source-controller internal/helm/repository chart_repository.go getChartVersion: "" means "*".
        source = text if text.strip() else "*"
        rewritten = _RANGE.sub(lambda m: f">= {m.group(1)}, <= {m.group(2)} ", source)
        groups = []
        for segment in rewritten.split("||"):
            if not _VALID.fullmatch(segment):
                raise ConstraintError(f"improper constraint: {segment.strip()!r}")
            groups.append(tuple(_parse_term(term) for term in _FIND.findall(segment)))
        return cls(text, tuple(groups))

    def check(self, version: Version) -> bool:
        """Whether `version` satisfies some OR group; a prerelease only counts where its group names one."""
        for group in self.groups:
            include_pre = any(term.version.prerelease for term in group)
            if all(term.check(version, include_pre) for term in group):
                return True
        return False


def highest_match(constraint: Constraint, versions: Iterable[str]) -> str | None:
    """The highest of `versions` that satisfies `constraint` (the first of equals), or None.

    As source-controller does (chart_repository.go getChartVersion, oci_chart_repository.go
    getLastMatchingVersionOrConstraint), a version written exactly as the constraint wins first, even when it is
    not semver; versions that do not parse are skipped.
    """
    candidates = list(versions)
    if constraint.text and constraint.text in candidates:
        return constraint.text
    best: tuple[Version, str] | None = None
    for text in candidates:
        version = parse_version(text)
        if version is None or not constraint.check(version):
            continue
        if best is None or version > best[0]:
            best = (version, text)
    return None if best is None else best[1]


def resolve_version(text: str, versions: Iterable[str]) -> str | None:
    """The version `text` selects among `versions`: the exact string first (even a non-semver one), else the constraint.

    Raises `ConstraintError` when `text` is neither one of `versions` nor a constraint.
    """
    candidates = list(versions)
    if text and text in candidates:
        return text
    return highest_match(Constraint.parse(text), candidates)
