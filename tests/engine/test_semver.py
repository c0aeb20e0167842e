"""Masterminds/semver v3 constraints as Helm and Flux read chart versions (README "Checking Version Constraints")."""

from __future__ import annotations

import pytest

from bot.engine.core.errors import UserError
from bot.engine.render.semver import Constraint, ConstraintError, highest_match, parse_version, resolve_version

# (constraint, version, satisfied). Each block names the README rule it checks.
CASES = [
    # Basic comparisons: `=`, `!=`, `>`, `<`, `>=`, `<=` (and the `=>`, `=<` spellings).
    ("=1.2.3", "1.2.3", True),
    ("1.2.3", "1.2.4", False),
    ("!=1.2.3", "1.2.4", True),
    ("!=1.2.3", "1.2.3", False),
    (">1.2.3", "1.2.4", True),
    (">1.2.3", "1.2.3", False),
    ("<1.2.3", "1.2.2", True),
    (">=1.2.3", "1.2.3", True),
    ("=>1.2.3", "1.3.0", True),
    ("<=1.2.3", "1.2.4", False),
    ("=<1.2.3", "1.2.3", True),
    ("v1.2.3", "1.2.3", True),  # a `v` in the constraint is allowed
    ("1.2.3", "1.2.3+build.7", True),  # build metadata is not part of precedence
    # Partial versions: `>11` wants 12 or higher; `>11.1` wants 11.2 or higher; `<=2` allows all of 2.x.
    (">11", "11.1.0", False),
    (">11", "12.0.0", True),
    (">11.1", "11.1.9", False),
    (">11.1", "11.2.0", True),
    ("<=2", "2.9.9", True),
    ("<=2.1", "2.2.0", False),
    # AND: comma or space.
    (">= 1.2, < 3.0.0", "2.5.0", True),
    (">= 1.2 < 3.0.0", "3.0.0", False),
    (">1.1 <2", "1.1.5", False),
    # OR: `||`.
    ("<2.0.0 || >=3.1", "2.5.0", False),
    ("<2.0.0 || >=3.1", "3.1.0", True),
    ("<2.0.0 || >=3.1", "1.9.9", True),
    # Hyphen ranges: `1.2 - 1.4.5` is `>= 1.2, <= 1.4.5`; `2.3.4 - 4.5` is `>= 2.3.4, <= 4.5`.
    ("1.2 - 1.4.5", "1.4.5", True),
    ("1.2 - 1.4.5", "1.4.6", False),
    ("1.2 - 1.4.5", "1.1.9", False),
    ("2.3.4 - 4.5", "4.5.9", True),
    ("2.3.4 - 4.5", "4.6.0", False),
    # Wildcards: `1.2.x` is `>= 1.2.0, < 1.3.0`; `>= 1.2.x` is `>= 1.2.0`; `<= 2.x` is `< 3`; `*` is `>= 0.0.0`.
    ("1.2.x", "1.2.9", True),
    ("1.2.X", "1.3.0", False),
    ("1.2.*", "1.2.0", True),
    (">= 1.2.x", "5.0.0", True),
    ("<= 2.x", "2.99.0", True),
    ("<= 2.x", "3.0.0", False),
    ("*", "0.0.1", True),
    ("x", "9.9.9", True),
    ("!=4.x", "4.2.0", False),
    ("!=4.x", "5.0.0", True),
    ("!=4.1.x", "4.2.0", True),
    # Tilde: `~1.2.3` is `>= 1.2.3, < 1.3.0`; `~1` is `>= 1, < 2`; `~2.3` is `>= 2.3, < 2.4`; `~1.x` is `< 2`.
    ("~1.2.3", "1.2.9", True),
    ("~1.2.3", "1.3.0", False),
    ("~1.2.3", "1.2.2", False),
    ("~1", "1.9.0", True),
    ("~1", "2.0.0", False),
    ("~2.3", "2.4.0", False),
    ("~1.x", "1.5.0", True),
    ("~>1.2", "1.2.7", True),
    ("~0.0.0", "7.0.0", True),
    # Caret: `^1.2.3` is `>= 1.2.3, < 2.0.0`; `^0.2.3` is `>= 0.2.3, < 0.3.0`; `^0.0.3` is `>= 0.0.3, < 0.0.4`;
    # `^0.0` is `>= 0.0.0, < 0.1.0`; `^0` is `>= 0.0.0, < 1.0.0`; `^2.x` is `>= 2.0.0, < 3`.
    ("^1.2.3", "1.9.9", True),
    ("^1.2.3", "2.0.0", False),
    ("^1.2.3", "1.2.2", False),
    ("^0.2.3", "0.2.9", True),
    ("^0.2.3", "0.3.0", False),
    ("^0.0.3", "0.0.3", True),
    ("^0.0.3", "0.0.4", False),
    ("^0.0", "0.0.9", True),
    ("^0.0", "0.1.0", False),
    ("^0", "0.9.0", True),
    ("^0", "1.0.0", False),
    ("^2.x", "2.7.0", True),
    ("^2.x", "3.0.0", False),
    # Prereleases: left out unless the AND group names one; `-0` opts a range in.
    (">=1.2.3", "1.3.0-beta.1", False),
    ("*", "2.0.0-rc.1", False),
    (">=1.2.3-beta.1", "1.2.3-beta.2", True),
    (">=1.2.3-beta.1", "1.2.3-alpha", False),
    (">=1.2.3-beta.1", "1.2.3", True),
    (">=1.2.3-0", "1.3.0-rc.1", True),
    ("^1.2.0-0", "1.5.0-alpha", True),
    (">=1.0.0-0 <2.0.0", "1.5.0-alpha", True),  # one term naming a prerelease opts in its whole AND group
    ("<1.0.0 || >=2.0.0-0", "0.9.0-alpha", False),  # but not another OR group
    ("<1.0.0 || >=2.0.0-0", "2.1.0-alpha", True),
]


@pytest.mark.parametrize(("constraint", "version", "expected"), CASES)
def test_constraint_check(constraint: str, version: str, expected: bool) -> None:
    parsed = parse_version(version)
    assert parsed is not None
    assert Constraint.parse(constraint).check(parsed) is expected


@pytest.mark.parametrize(
    ("text", "parts"),
    [
        ("1.2.3", (1, 2, 3, "", "")),
        ("v1.2.3-beta.1+exp.sha.5114f85", (1, 2, 3, "beta.1", "exp.sha.5114f85")),
        ("1.2", (1, 2, 0, "", "")),
        ("2", (2, 0, 0, "", "")),
        ("01.02.03", (1, 2, 3, "", "")),  # leading zeros coerced (v3.4 CoerceNewVersion)
    ],
)
def test_parse_version(text: str, parts: tuple[int, int, int, str, str]) -> None:
    v = parse_version(text)
    assert v is not None
    assert (v.major, v.minor, v.patch, v.prerelease, v.build) == parts
    assert v.original == text


@pytest.mark.parametrize("text", ["", "latest", "1.2.3.4", "1.2.3-01", "1.2.3-", "1.2.3+", "a1.2.3", "1" * 300])
def test_parse_version_refuses(text: str) -> None:
    assert parse_version(text) is None


def test_semver_ordering() -> None:
    """semver 2.0 item 11's example chain, shuffled and sorted back."""
    chain = ["1.0.0-alpha", "1.0.0-alpha.1", "1.0.0-alpha.beta", "1.0.0-beta", "1.0.0-beta.2", "1.0.0-beta.11",
             "1.0.0-rc.1", "1.0.0", "2.0.0", "2.1.0", "2.1.1"]
    parsed = [parse_version(t) for t in reversed(chain)]
    assert all(p is not None for p in parsed)
    assert [p.original for p in sorted(parsed)] == chain  # type: ignore[union-attr]
    assert parse_version("1.0.0+a") == parse_version("1.0.0+b")


@pytest.mark.parametrize("text", ["> 1.2.3 garbage", "=>>1", "1.2.3 -", "~", "1.2.3 ||| 2", "=1.2.3-", "x" * 300])
def test_bad_constraint_is_a_user_error(text: str) -> None:
    with pytest.raises(ConstraintError) as caught:
        Constraint.parse(text)
    assert isinstance(caught.value, UserError)


def test_highest_match() -> None:
    versions = ["1.0.0", "1.2.0", "1.10.1", "2.0.0-rc.1", "1.9.0", "not-semver", "v1.11.0"]
    assert highest_match(Constraint.parse("^1.0"), versions) == "v1.11.0"
    assert highest_match(Constraint.parse("~1.2"), versions) == "1.2.0"
    assert highest_match(Constraint.parse(""), versions) == "v1.11.0"  # empty is `*`: latest stable
    assert highest_match(Constraint.parse(">=2.0.0-0"), versions) == "2.0.0-rc.1"
    assert highest_match(Constraint.parse(">=3"), versions) is None
    assert highest_match(Constraint.parse("1.2.0"), ["1.2.0+b", "1.2.0"]) == "1.2.0"  # the exact text first


def test_exact_text_wins_even_when_not_semver() -> None:
    """source-controller checks for the exact version string before it reads the constraint."""
    assert resolve_version("latest", ["1.0.0", "latest"]) == "latest"
    assert resolve_version("~1.0", ["1.0.0", "1.0.7", "latest"]) == "1.0.7"
    with pytest.raises(ConstraintError):
        resolve_version("latest", ["1.0.0"])
