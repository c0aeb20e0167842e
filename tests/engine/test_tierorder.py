"""Tests for bot.tierorder: reading, checking, ordering and minimally rewriting tier lists."""

from __future__ import annotations

import difflib
import random

import pytest

from bot.engine.core.errors import TierOrderError
from bot.engine.ordering.tierorder import (
    StaleReason,
    TierOrder,
    read_tier_order,
    rewrite_tier_order,
    stable_order,
    stale_reasons,
)

VAR = "TIER_ORDER"

SEED_SCRIPT = """\
#!/usr/bin/env bash
set -euo pipefail

# order matters: each tier waits for the previous
TIER_ORDER=(
  platform        # CNI, storage
  platform-config
  apps
  apps-vms
)

for tier in "${TIER_ORDER[@]}"; do
  flux reconcile kustomization "$tier" --with-source
done
"""

SEED_DEPS: dict[str, set[str]] = {
    "platform": set(),
    "platform-config": {"platform"},
    "platform-config-cdi": {"platform-config"},
    "apps": {"platform-config"},
    "apps-vms": {"apps", "platform-config-cdi"},
}


# --------------------------------------------------------------------------------------------
# read_tier_order

PARSE_CASES = [
    pytest.param(SEED_SCRIPT, "array-multiline", ["platform", "platform-config", "apps", "apps-vms"], 5, id="multiline-comments"),
    pytest.param(
        "TIER_ORDER=(\n\n  # foundation\n  platform   # CNI (cilium)\n\n  # workloads\n  apps\n  # apps-old\n)\n",
        "array-multiline",
        ["platform", "apps"],
        1,
        id="multiline-blank-and-comment-lines",
    ),
    pytest.param("TIER_ORDER=(platform platform-config apps)\n", "array-inline", ["platform", "platform-config", "apps"], 1, id="inline"),
    pytest.param("TIER_ORDER=( \"platform\" 'apps' )  # quoted words\n", "array-inline", ["platform", "apps"], 1, id="inline-quoted-words"),
    pytest.param('TIER_ORDER="platform platform-config apps"\n', "string", ["platform", "platform-config", "apps"], 1, id="double-quoted"),
    pytest.param("TIER_ORDER='platform  platform-config\tapps'\n", "string", ["platform", "platform-config", "apps"], 1, id="single-quoted"),
    pytest.param('set -e\nexport TIER_ORDER="platform apps"\n', "string", ["platform", "apps"], 2, id="export"),
    pytest.param("declare -a TIER_ORDER=(platform apps)\n", "array-inline", ["platform", "apps"], 1, id="declare-a"),
    pytest.param("declare -r -a TIER_ORDER=(\n  platform\n  apps\n)\n", "array-multiline", ["platform", "apps"], 1, id="declare-r-a"),
    pytest.param("readonly -a TIER_ORDER=(platform apps)\n", "array-inline", ["platform", "apps"], 1, id="readonly-a"),
    pytest.param("readonly TIER_ORDER='platform apps'\n", "string", ["platform", "apps"], 1, id="readonly-string"),
    pytest.param(
        "main() {\n  local -a TIER_ORDER=(\n    platform\n    apps\n  )\n}\n",
        "array-multiline",
        ["platform", "apps"],
        2,
        id="local-in-function",
    ),
    pytest.param(
        "#!/bin/bash\r\nTIER_ORDER=(\r\n  platform  # CNI\r\n  apps\r\n)\r\n",
        "array-multiline",
        ["platform", "apps"],
        2,
        id="crlf",
    ),
    pytest.param('TIER_ORDER="platform apps"\r\necho done\r\n', "string", ["platform", "apps"], 1, id="crlf-string"),
    pytest.param("TIER_ORDER=platform\n", "string", ["platform"], 1, id="bare-word"),
    pytest.param("TIER_ORDER=\n", "string", [], 1, id="bare-empty"),
    pytest.param("TIER_ORDER=()\n", "array-inline", [], 1, id="empty-array"),
    pytest.param('TIER_ORDER="\n  platform\n  apps\n"\n', "string", ["platform", "apps"], 1, id="multiline-string"),
    pytest.param("TIER_ORDER=(platform \\\n  apps)\n", "array-multiline", ["platform", "apps"], 1, id="continuation"),
    pytest.param(
        "TIER_ORDER=(flux-system/platform flux-system/apps.v2)\n",
        "array-inline",
        ["flux-system/platform", "flux-system/apps.v2"],
        1,
        id="namespace-qualified",
    ),
    pytest.param(
        "TIER_ORDER=(platform apps)\nTIER_ORDER=(other)\n", "array-inline", ["platform", "apps"], 1, id="first-assignment-wins"
    ),
    pytest.param(
        "# TIER_ORDER=(commented out)\n"
        "cat <<EOF\nTIER_ORDER=(in heredoc)\nEOF\n"
        "cat <<-'END'\n\tTIER_ORDER=(in tab heredoc)\n\tEND\n"
        'echo "text\nTIER_ORDER=(in a string)\n"\n'
        "echo $(\n  printf x\n) # TIER_ORDER=(x)\n"
        "OLD_TIER_ORDER=(old)\nTIER_ORDER_X=(x)\n"
        "TIER_ORDER=(real)\n",
        "array-inline",
        ["real"],
        16,
        id="skips-comments-heredocs-strings-other-vars",
    ),
    pytest.param(
        "x=1 \\\nTIER_ORDER=(continued)\nTIER_ORDER=(real)\n", "array-inline", ["real"], 3, id="continued-line-is-not-a-statement"
    ),
    pytest.param(
        "x=1 \\\r\nTIER_ORDER=(continued)\r\nTIER_ORDER=(real)\r\n", "array-inline", ["real"], 3, id="crlf-continuation"
    ),
    pytest.param(
        "n=$(( 1 << 2 ))\n(( n <<= 1 ))\nTIER_ORDER=(real)\n", "array-inline", ["real"], 3, id="arithmetic-shift-is-not-heredoc"
    ),
    pytest.param("cat <<NOPE\nTIER_ORDER=(real)\n", "array-inline", ["real"], 2, id="unterminated-heredoc-ignored"),
    pytest.param(
        'echo "${x#pre}" it\\\'s  # don\'t\nTIER_ORDER=(\n  platform  # it\'s the CNI (cilium)\n)\n',
        "array-multiline",
        ["platform"],
        2,
        id="apostrophes-in-comments-and-escapes",
    ),
]


@pytest.mark.parametrize(("text", "style", "names", "line"), PARSE_CASES)
def test_read_tier_order(text: str, style: str, names: list[str], line: int) -> None:
    order = read_tier_order(text, VAR)
    assert order.variable == VAR
    assert order.style == style
    assert list(order.names) == names
    assert order.line == line
    for entry in order.entries:
        # Offsets point at the name itself (inside any quotes) and lines are 1-based.
        assert text[entry.start : entry.end] == entry.name
        assert entry.line == text.count("\n", 0, entry.start) + 1


def test_read_entry_positions() -> None:
    order = read_tier_order(SEED_SCRIPT, VAR)
    assert [(e.name, e.line) for e in order.entries] == [
        ("platform", 6),
        ("platform-config", 7),
        ("apps", 8),
        ("apps-vms", 9),
    ]
    quoted = read_tier_order('TIER_ORDER=("platform")\n', VAR)
    assert (quoted.entries[0].start, quoted.entries[0].end) == (13, 21)


def test_tier_order_is_frozen() -> None:
    order = read_tier_order("TIER_ORDER=(a)\n", VAR)
    with pytest.raises(AttributeError):
        order.style = "string"  # type: ignore[misc]


ERROR_CASES = [
    pytest.param("echo hello\n", VAR, "no assignment of TIER_ORDER", id="absent"),
    pytest.param("# TIER_ORDER=(platform)\n", VAR, "no assignment", id="only-in-comment"),
    pytest.param("TIER_ORDER_OLD=(platform)\n", VAR, "no assignment", id="only-prefixed-name"),
    pytest.param("TIER_ORDER=$(cat tiers.txt)\n", VAR, "$(cat tiers.txt)", id="command-substitution"),
    pytest.param("TIER_ORDER=(platform $(ls tiers))\n", VAR, "cannot be read statically", id="substitution-in-array"),
    pytest.param("TIER_ORDER=(platform $EXTRA)\n", VAR, "parameter or command expansion", id="variable-in-array"),
    pytest.param('TIER_ORDER=("${BASE}" apps)\n', VAR, "expansion", id="expansion-in-quotes"),
    pytest.param('TIER_ORDER="$BASE apps"\n', VAR, "expansion", id="expansion-in-string"),
    pytest.param("TIER_ORDER=(`cat tiers`)\n", VAR, "command substitution", id="backticks"),
    pytest.param("TIER_ORDER=(apps-*)\n", VAR, "glob", id="glob"),
    pytest.param("TIER_ORDER=(apps-{a,b})\n", VAR, "brace expansion", id="brace"),
    pytest.param("TIER_ORDER=(platform)\nTIER_ORDER+=(apps)\n", VAR, "appended to at line 2", id="append"),
    pytest.param("TIER_ORDER[0]=platform\n", VAR, "element by element", id="element-assignment"),
    pytest.param("TIER_ORDER=(\n  platform\n  apps\n", VAR, "never closed", id="unterminated-array"),
    pytest.param('TIER_ORDER="platform apps\n', VAR, "unterminated", id="unterminated-string"),
    pytest.param("TIER_ORDER=(Platform)\n", VAR, "not a Kubernetes name", id="uppercase-name"),
    pytest.param('TIER_ORDER=("plat"form)\n', VAR, "mixes quoted", id="mixed-quoting"),
    pytest.param("TIER_ORDER=(platform)\n", "TIER-ORDER", "not a valid shell variable", id="bad-variable"),
]


@pytest.mark.parametrize(("text", "variable", "message"), ERROR_CASES)
def test_read_tier_order_errors(text: str, variable: str, message: str) -> None:
    with pytest.raises(TierOrderError) as info:
        read_tier_order(text, variable)
    assert message in str(info.value)


# --------------------------------------------------------------------------------------------
# stale_reasons

STALE_CASES = [
    pytest.param(["platform", "platform-config", "platform-config-cdi", "apps", "apps-vms"], SEED_DEPS, [], id="valid"),
    pytest.param(
        ["platform", "platform-config", "apps", "apps-vms"],
        SEED_DEPS,
        [StaleReason("missing", "platform-config-cdi", "platform-config-cdi is not listed; it depends on platform-config")],
        id="missing",
    ),
    pytest.param(
        ["platform", "legacy", "apps"],
        {"platform": set(), "apps": {"platform"}},
        [StaleReason("unknown", "legacy", "legacy is listed but is not a tier in the dependency graph")],
        id="unknown",
    ),
    pytest.param(
        ["apps", "platform"],
        {"platform": set(), "apps": {"platform"}},
        [StaleReason("before-dependency", "apps", "apps is listed before platform, which it depends on", "platform")],
        id="wrong-position",
    ),
    pytest.param(
        ["platform", "apps", "platform"],
        {"platform": set(), "apps": {"platform"}},
        [StaleReason("duplicate", "platform", "platform is listed 2 times (positions 1 and 3)")],
        id="duplicate",
    ),
    pytest.param(
        ["apps", "x", "platform", "x", "x"],
        {"platform": set(), "apps": {"platform", "crds"}, "monitoring": {"crds", "platform"}},
        [
            StaleReason("before-dependency", "apps", "apps is listed before platform, which it depends on", "platform"),
            StaleReason("unknown", "x", "x is listed but is not a tier in the dependency graph"),
            StaleReason("duplicate", "x", "x is listed 3 times (positions 2, 4 and 5)"),
            # `crds` is only named as a dependency: it is still a tier that must be listed.
            StaleReason("missing", "crds", "crds is not listed"),
            StaleReason("missing", "monitoring", "monitoring is not listed; it depends on crds and platform"),
        ],
        id="combined-in-list-order-then-missing",
    ),
    pytest.param([], {}, [], id="empty"),
]


@pytest.mark.parametrize(("names", "deps", "expected"), STALE_CASES)
def test_stale_reasons(names: list[str], deps: dict[str, set[str]], expected: list[StaleReason]) -> None:
    assert stale_reasons(names, deps) == expected


def test_stale_reasons_accepts_tuples_and_frozensets() -> None:
    deps = {"platform": frozenset(), "apps": frozenset({"platform"})}
    assert stale_reasons(("platform", "apps"), deps) == []


# --------------------------------------------------------------------------------------------
# stable_order

ORDER_CASES = [
    pytest.param(
        ["platform", "platform-config", "apps", "apps-vms"],
        SEED_DEPS,
        ["platform", "platform-config", "platform-config-cdi", "apps", "apps-vms"],
        id="seed-missing-after-last-dependency",
    ),
    pytest.param(
        ["platform", "platform-config", "platform-config-cdi", "apps", "apps-vms"],
        SEED_DEPS,
        ["platform", "platform-config", "platform-config-cdi", "apps", "apps-vms"],
        id="already-correct",
    ),
    pytest.param(
        ["monitoring", "platform", "apps", "batch"],
        {"platform": set(), "apps": {"platform"}, "monitoring": set(), "batch": set()},
        ["monitoring", "platform", "apps", "batch"],
        id="valid-non-topological-order-kept",
    ),
    pytest.param(
        ["apps", "platform", "platform-config", "monitoring"],
        {"platform": set(), "platform-config": {"platform"}, "apps": {"platform-config"}, "monitoring": set()},
        ["platform", "platform-config", "apps", "monitoring"],
        id="moved-right-after-last-dependency",
    ),
    pytest.param(
        ["a", "b", "c", "d", "e"],
        {"a": {"d"}, "b": set(), "c": set(), "d": set(), "e": set()},
        ["b", "c", "d", "a", "e"],
        id="only-the-dependent-moves",
    ),
    pytest.param(
        ["platform-config", "platform", "apps"],
        {"platform": set(), "platform-config": {"platform"}, "apps": {"platform-config"}},
        ["platform", "platform-config", "apps"],
        id="swap",
    ),
    pytest.param(
        ["platform", "legacy", "apps", "platform"],
        {"platform": set(), "apps": {"platform"}},
        ["platform", "apps"],
        id="unknown-and-duplicates-dropped",
    ),
    pytest.param(
        ["platform", "apps"],
        {"platform": set(), "apps": {"platform"}, "observability": set()},
        ["platform", "apps", "observability"],
        id="missing-without-dependencies-appended",
    ),
    pytest.param(
        ["platform", "apps", "monitoring"],
        {"platform": set(), "apps": {"platform", "crds"}, "monitoring": set(), "crds": set()},
        ["platform", "crds", "apps", "monitoring"],
        id="missing-without-dependencies-before-first-user",
    ),
    pytest.param(
        ["platform", "apps"],
        {"platform": set(), "apps": {"platform", "crds"}},
        ["platform", "crds", "apps"],
        id="dependency-only-tier-added",
    ),
    pytest.param(
        ["platform", "apps"],
        # net-dns sorts before net-policies, but the chain net -> net-policies stays together.
        {"platform": set(), "apps": {"platform"}, "net": {"platform"}, "net-policies": {"net"}, "net-dns": {"platform"}},
        ["platform", "net", "net-policies", "net-dns", "apps"],
        id="missing-chain-kept-together",
    ),
    pytest.param(
        [],
        {"c": {"b"}, "b": {"a"}, "a": set()},
        ["a", "b", "c"],
        id="empty-current",
    ),
    pytest.param(
        ["x", "y"],
        {},
        [],
        id="empty-graph",
    ),
]


@pytest.mark.parametrize(("current", "deps", "expected"), ORDER_CASES)
def test_stable_order(current: list[str], deps: dict[str, set[str]], expected: list[str]) -> None:
    result = stable_order(current, deps)
    assert result == expected
    assert stale_reasons(result, deps) == []  # always a valid order for the graph


def test_stable_order_is_deterministic() -> None:
    deps = {f"t{i}": {f"t{j}" for j in range(i) if (i + j) % 3 == 0} for i in range(12)}
    reversed_deps = dict(reversed(list(deps.items())))
    current = ["t5", "t1", "t9"]
    assert stable_order(current, deps) == stable_order(current, reversed_deps)
    assert stale_reasons(stable_order(current, deps), deps) == []


CYCLE_CASES = [
    pytest.param({"a": {"b"}, "b": {"a"}}, "a -> b -> a", id="two"),
    pytest.param({"apps": {"apps"}}, "apps -> apps", id="self"),
    pytest.param({"z": {"x"}, "x": {"y"}, "y": {"z"}, "ok": set()}, "x -> y -> z -> x", id="three"),
]


@pytest.mark.parametrize(("deps", "cycle"), CYCLE_CASES)
def test_stable_order_cycle(deps: dict[str, set[str]], cycle: str) -> None:
    with pytest.raises(TierOrderError) as info:
        stable_order(list(deps), deps)
    assert f"cycle: {cycle}" in str(info.value)


# --------------------------------------------------------------------------------------------
# rewrite_tier_order


def changed_lines(before: str, after: str) -> list[str]:
    """The -/+ lines of a zero-context diff (line endings stripped)."""
    diff = difflib.unified_diff(before.splitlines(), after.splitlines(), lineterm="", n=0)
    return [line for line in diff if line[:1] in "+-" and not line.startswith(("+++", "---"))]


REWRITE_CASES = [
    pytest.param(
        SEED_SCRIPT,
        ["platform", "platform-config", "platform-config-cdi", "apps", "apps-vms"],
        SEED_SCRIPT.replace("  platform-config\n", "  platform-config\n  platform-config-cdi\n"),
        ["+  platform-config-cdi"],
        id="seed-insert",
    ),
    pytest.param(
        "TIER_ORDER=(\n  platform        # CNI, storage\n  legacy          # remove me\n  apps\n)\n",
        ["platform", "apps"],
        "TIER_ORDER=(\n  platform        # CNI, storage\n  apps\n)\n",
        ["-  legacy          # remove me"],
        id="remove-line-with-comment",
    ),
    pytest.param(
        "TIER_ORDER=(\n  apps            # needs platform\n  platform        # CNI\n  monitoring\n)\n",
        ["platform", "apps", "monitoring"],
        "TIER_ORDER=(\n  platform        # CNI\n  apps            # needs platform\n  monitoring\n)\n",
        # difflib reports the swap as platform moving up; the text itself is asserted exactly.
        ["+  platform        # CNI", "-  platform        # CNI"],
        id="move-line-with-comment",
    ),
    pytest.param(
        "TIER_ORDER=(\n  # foundation\n  platform\n\n  # workloads\n  apps\n)\n",
        ["platform", "platform-config", "apps"],
        "TIER_ORDER=(\n  # foundation\n  platform\n  platform-config\n\n  # workloads\n  apps\n)\n",
        ["+  platform-config"],
        id="insert-keeps-blank-and-comment-lines",
    ),
    pytest.param(
        "TIER_ORDER=(\n  # foundation\n  platform\n  apps\n)\n",
        ["crds", "platform", "apps"],
        "TIER_ORDER=(\n  # foundation\n  crds\n  platform\n  apps\n)\n",
        ["+  crds"],
        id="insert-first",
    ),
    pytest.param(
        "main() {\n\tTIER_ORDER=(\n\t\tplatform\n\t\tapps\n\t)\n}\n",
        ["platform", "apps", "batch"],
        "main() {\n\tTIER_ORDER=(\n\t\tplatform\n\t\tapps\n\t\tbatch\n\t)\n}\n",
        ["+\t\tbatch"],
        id="tab-indentation",
    ),
    pytest.param(
        "TIER_ORDER=(\r\n  platform  # CNI\r\n  apps\r\n)\r\n",
        ["platform", "platform-config", "apps"],
        "TIER_ORDER=(\r\n  platform  # CNI\r\n  platform-config\r\n  apps\r\n)\r\n",
        ["+  platform-config"],
        id="crlf",
    ),
    pytest.param(
        "TIER_ORDER=(\n)\n",
        ["platform", "apps"],
        "TIER_ORDER=(\n  platform\n  apps\n)\n",
        ["+  platform", "+  apps"],
        id="empty-multiline",
    ),
    pytest.param(
        "TIER_ORDER=(\n  platform\n  apps\n  apps\n)\n",
        ["platform", "apps"],
        "TIER_ORDER=(\n  platform\n  apps\n)\n",
        ["-  apps"],
        id="duplicate-removed",
    ),
    pytest.param(
        "# tiers\nTIER_ORDER=(platform apps)  # keep\necho ok\n",
        ["platform", "platform-config", "apps"],
        "# tiers\nTIER_ORDER=(platform platform-config apps)  # keep\necho ok\n",
        ["-TIER_ORDER=(platform apps)  # keep", "+TIER_ORDER=(platform platform-config apps)  # keep"],
        id="inline-insert",
    ),
    pytest.param(
        "TIER_ORDER=(apps platform legacy)\n",
        ["platform", "apps"],
        "TIER_ORDER=(platform apps)\n",
        ["-TIER_ORDER=(apps platform legacy)", "+TIER_ORDER=(platform apps)"],
        id="inline-reorder-and-remove",
    ),
    pytest.param(
        'declare -a TIER_ORDER=("platform" "apps")\n',
        ["crds", "platform", "apps"],
        'declare -a TIER_ORDER=("crds" "platform" "apps")\n',
        ['-declare -a TIER_ORDER=("platform" "apps")', '+declare -a TIER_ORDER=("crds" "platform" "apps")'],
        id="inline-quoted-words",
    ),
    pytest.param(
        "TIER_ORDER=()\n",
        ["platform"],
        "TIER_ORDER=(platform)\n",
        ["-TIER_ORDER=()", "+TIER_ORDER=(platform)"],
        id="inline-empty",
    ),
    pytest.param(
        'export TIER_ORDER="platform apps"  # space separated\n',
        ["platform", "platform-config", "apps"],
        'export TIER_ORDER="platform platform-config apps"  # space separated\n',
        [
            '-export TIER_ORDER="platform apps"  # space separated',
            '+export TIER_ORDER="platform platform-config apps"  # space separated',
        ],
        id="double-quoted-string",
    ),
    pytest.param(
        "readonly TIER_ORDER='platform,apps'\n".replace(",", "  "),
        ["platform", "apps", "batch"],
        "readonly TIER_ORDER='platform  apps  batch'\n",
        ["-readonly TIER_ORDER='platform  apps'", "+readonly TIER_ORDER='platform  apps  batch'"],
        id="single-quoted-string-keeps-separator",
    ),
    pytest.param(
        'TIER_ORDER="\n  platform\n  apps\n"\n',
        ["platform", "platform-config", "apps"],
        'TIER_ORDER="\n  platform\n  platform-config\n  apps\n"\n',
        ["+  platform-config"],
        id="multiline-string",
    ),
    pytest.param(
        "TIER_ORDER=platform\n",
        ["platform", "apps"],
        'TIER_ORDER="platform apps"\n',
        ["-TIER_ORDER=platform", '+TIER_ORDER="platform apps"'],
        id="bare-word-gains-quotes",
    ),
    pytest.param(
        "TIER_ORDER=(platform\n  platform-config\n  apps)\n",
        ["platform", "platform-config", "apps", "apps-vms"],
        "TIER_ORDER=(platform\n  platform-config\n  apps apps-vms)\n",
        ["-  apps)", "+  apps apps-vms)"],
        id="entries-on-bracket-lines",
    ),
    pytest.param(
        "TIER_ORDER=(\n  platform platform-config  # base\n  apps\n)\n",
        ["platform", "platform-config", "apps"][::2],
        "TIER_ORDER=(\n  platform  # base\n  apps\n)\n",
        ["-  platform platform-config  # base", "+  platform  # base"],
        id="two-per-line-remove-one",
    ),
]


@pytest.mark.parametrize(("before", "new_names", "after", "changes"), REWRITE_CASES)
def test_rewrite_tier_order(before: str, new_names: list[str], after: str, changes: list[str]) -> None:
    order = read_tier_order(before, VAR)
    result = rewrite_tier_order(before, order, new_names)
    assert result == after
    assert changed_lines(before, result) == changes
    assert list(read_tier_order(result, VAR).names) == new_names


def test_rewrite_unchanged_returns_same_text() -> None:
    order = read_tier_order(SEED_SCRIPT, VAR)
    assert rewrite_tier_order(SEED_SCRIPT, order, list(order.names)) == SEED_SCRIPT


def test_rewrite_refuses_stale_order() -> None:
    order = read_tier_order(SEED_SCRIPT, VAR)
    edited = SEED_SCRIPT.replace("  apps\n", "  apps\n  batch\n")
    with pytest.raises(TierOrderError, match="changed since it was read"):
        rewrite_tier_order(edited, order, ["platform"])


@pytest.mark.parametrize("bad", [["Platform"], ["a b"], ["platform", "platform"], ["$(rm -rf /)"]])
def test_rewrite_rejects_bad_names(bad: list[str]) -> None:
    order = read_tier_order(SEED_SCRIPT, VAR)
    with pytest.raises(ValueError):
        rewrite_tier_order(SEED_SCRIPT, order, bad)


def test_seed_end_to_end() -> None:
    order = read_tier_order(SEED_SCRIPT, VAR)
    assert [r.kind for r in stale_reasons(order.names, SEED_DEPS)] == ["missing"]
    fixed = rewrite_tier_order(SEED_SCRIPT, order, stable_order(order.names, SEED_DEPS))
    assert changed_lines(SEED_SCRIPT, fixed) == ["+  platform-config-cdi"]
    assert stale_reasons(read_tier_order(fixed, VAR).names, SEED_DEPS) == []


def test_end_to_end_reorder_keeps_comments() -> None:
    before = (
        "TIER_ORDER=(\n"
        "  apps            # user workloads\n"
        "  platform        # CNI, storage\n"
        "  platform-config # cluster config\n"
        "  legacy\n"
        ")\n"
    )
    deps = {"platform": set(), "platform-config": {"platform"}, "apps": {"platform-config"}, "batch": {"apps"}}
    order = read_tier_order(before, VAR)
    fixed = rewrite_tier_order(before, order, stable_order(order.names, deps))
    assert fixed == (
        "TIER_ORDER=(\n"
        "  platform        # CNI, storage\n"
        "  platform-config # cluster config\n"
        "  apps            # user workloads\n"
        "  batch\n"
        ")\n"
    )
    assert changed_lines(before, fixed) == [
        "-  apps            # user workloads",
        "-  legacy",
        "+  apps            # user workloads",
        "+  batch",
    ]
    assert isinstance(read_tier_order(fixed, VAR), TierOrder)


LAYOUTS = {
    "multiline": lambda names: "set -e\nTIER_ORDER=(\n" + "".join(f"  {n}  # {n}\n" for n in names) + ")\necho done\n",
    "quoted-multiline": lambda names: "set -e\nTIER_ORDER=(\n" + "".join(f'  "{n}"\n' for n in names) + ")\necho done\n",
    "crlf": lambda names: "set -e\r\nTIER_ORDER=(\r\n" + "".join(f"  {n}\r\n" for n in names) + ")\r\necho done\r\n",
    "inline": lambda names: "set -e\nTIER_ORDER=(" + " ".join(names) + ")  # tiers\necho done\n",
    "string": lambda names: "set -e\nexport TIER_ORDER='" + " ".join(names) + "'\necho done\n",
    "mixed": lambda names: "set -e\nTIER_ORDER=(" + "\n  ".join(" ".join(names[i : i + 2]) for i in range(0, len(names), 2)) + ")\necho done\n",
}


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_rewrite_round_trips(layout: str) -> None:
    """Any old list, any new list: the result reads back as the new list, and only the value changed."""
    rnd = random.Random(layout)
    pool = ["platform", "platform-config", "apps", "apps-vms", "batch", "flux-system/edge"]
    for _ in range(300):
        old = [rnd.choice(pool) for _ in range(rnd.randint(0, 6))]
        new = rnd.sample(pool, rnd.randint(0, len(pool)))
        before = LAYOUTS[layout](old)
        after = rewrite_tier_order(before, read_tier_order(before, VAR), new)
        assert list(read_tier_order(after, VAR).names) == new
        eol = "\r\n" if layout == "crlf" else "\n"
        assert after.startswith("set -e" + eol) and after.endswith("echo done" + eol)
        if layout == "crlf":
            assert "\n" not in after.replace("\r\n", "")
        if layout == "multiline":
            # Every kept entry keeps its own line, comment included.
            assert all(f"  {n}  # {n}\n" in after for n in set(old) & set(new))
