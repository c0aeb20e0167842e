"""`.helmignore` read as Helm's pkg/ignore reads it: Go's filepath.Match, no `**`, `dir/`, `/anchored`, Helm's `!`."""

from __future__ import annotations

import pytest

from bot.engine.render.helmignore import HelmIgnore, HelmIgnoreError, go_match_regex


def test_the_default_rule_drops_dotfiles_under_templates_only() -> None:
    rules = HelmIgnore.parse(None)
    assert rules.ignored("templates/.secret.yaml", False)
    assert not rules.ignored(".helmignore", False) and not rules.ignored("templates/x.yaml", False)
    assert not rules.ignored("templates/sub/.hidden", False)  # `*` and `?` never cross a `/`


def test_a_pattern_without_slash_matches_the_base_name_at_any_depth() -> None:
    rules = HelmIgnore.parse("# editor files\n*.swp\n\n  README.md  \n")
    assert rules.ignored("templates/deep/a.swp", False) and rules.ignored("docs/README.md", True)
    assert not rules.ignored("README.md.txt", False)


def test_a_pattern_with_slash_matches_the_whole_path_and_a_leading_slash_anchors_it() -> None:
    rules = HelmIgnore.parse("templates/test-*.yaml\n/ci\n")
    assert rules.ignored("templates/test-only.yaml", False)
    assert not rules.ignored("sub/templates/test-only.yaml", False)
    assert rules.ignored("ci", True) and not rules.ignored("charts/ci", True)


def test_a_trailing_slash_ignores_directories_only() -> None:
    rules = HelmIgnore.parse("docs/\n")
    assert rules.ignored("docs", True) and rules.ignored("sub/docs", True)
    assert not rules.ignored("docs", False)


def test_negation_keeps_helms_own_semantics() -> None:
    # rules.go Ignore: the first matching rule decides; a `!` rule ignores whatever it does NOT match.
    rules = HelmIgnore.parse("*.txt\n!keep.txt\n")
    assert rules.ignored("keep.txt", False)  # `*.txt` came first
    assert rules.ignored("values.yaml", False)  # `!keep.txt` does not match it: ignored
    only = HelmIgnore.parse("!templates\n")
    assert not only.ignored("templates", True)


def test_the_root_is_never_ignored() -> None:
    assert not HelmIgnore.parse("*\n").ignored("", True)
    assert HelmIgnore.parse("*\n").ignored("Chart.yaml", False)


@pytest.mark.parametrize("text", ["**/*.md", "docs/**", "[", "a[]", "a[z-", "trailing\\", "[a-]"])
def test_helm_refuses_double_star_and_malformed_patterns(text: str) -> None:
    with pytest.raises(HelmIgnoreError):
        HelmIgnore.parse(text)


@pytest.mark.parametrize(
    ("pattern", "name", "matched"),
    [
        ("a?c", "abc", True), ("a?c", "a/c", False), ("[a-c]x", "bx", True), ("[^a-c]x", "dx", True),
        ("[^a-c]x", "ax", False), ("[^a]", "/", True), ("\\*", "*", True), ("\\*", "a", False),
        ("[\\]]", "]", True), ("*.yaml", "x.yaml", True), ("*.yaml", "d/x.yaml", False), ("[z-a]", "m", False),
    ],
)
def test_go_filepath_match(pattern: str, name: str, matched: bool) -> None:
    assert (go_match_regex(pattern).fullmatch(name) is not None) is matched
