"""bot.engine.ordering.tierfix: one order for every cluster, the minimal edit, the explanation, and reading a tree's graphs."""

from __future__ import annotations

import difflib
import os
import shutil
from pathlib import Path

import pytest

from bot.engine.core.errors import TierOrderError, UserError
from bot.engine.ordering.tierfix import (
    Change,
    Edge,
    IncompleteRender,
    StaleCommit,
    TierOrderConflict,
    TreeState,
    first_stale,
    graph_changes,
    plan_tier_fix,
    union_graph,
)
from bot.engine.ordering.tierorder import read_tier_order, stale_reasons
from bot.pipeline.tier_state import read_tier_order_file, read_tree_state
from tests.gitrepo import EXAMPLE, pre_fix

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
"""

SEED = {
    "platform": set(),
    "platform-config": {"platform"},
    "platform-config-cdi": {"platform-config"},
    "apps": {"platform-config"},
    "apps-vms": {"apps", "platform-config", "platform-config-cdi"},
}
FILE, VAR = "bootstrap/standup.sh", "TIER_ORDER"


def plan(graphs, text=SEED_SCRIPT):
    return plan_tier_fix(graphs, text, file=FILE, variable=VAR)


def changed_lines(old: str, new: str) -> list[str]:
    return [
        line
        for line in difflib.unified_diff(old.splitlines(), new.splitlines(), lineterm="", n=0)
        if line[:1] in "+-" and not line.startswith(("+++", "---"))
    ]


# --------------------------------------------------------------------------------------------
# plan_tier_fix


def test_seed_missing_tier_goes_right_after_platform_config_and_only_that_line_changes() -> None:
    fix = plan({"dev": SEED, "prod": SEED})
    assert fix.needed
    assert fix.order == ("platform", "platform-config", "platform-config-cdi", "apps", "apps-vms")
    assert changed_lines(fix.old_text, fix.new_text) == ["+  platform-config-cdi"]
    assert fix.added == ("platform-config-cdi",) and fix.moved == () and fix.removed == ()
    [change] = fix.changes
    assert (change.kind, change.tier, change.after) == ("added", "platform-config-cdi", "platform-config")
    assert Edge("platform-config-cdi", "platform-config", ("dev", "prod")) in change.edges
    assert Edge("apps-vms", "platform-config-cdi", ("dev", "prod")) in change.edges
    assert [r.kind for r in fix.reasons] == ["missing"]
    # The result is a valid order for every cluster.
    assert stale_reasons(read_tier_order(fix.new_text, VAR).names, SEED) == []


def test_commit_message_says_which_tiers_and_which_edges() -> None:
    fix = plan({"dev": SEED, "prod": SEED})
    stale = StaleCommit("a" * 40, "fix(gitops): CDI deadlock", None, ("new tier `platform-config-cdi` in dev, prod",))
    message = fix.commit_message(stale)
    subject, blank, *body = message.splitlines()
    assert subject == "fix(bootstrap): add platform-config-cdi to TIER_ORDER"
    assert blank == ""
    text = "\n".join(body)
    assert "platform-config-cdi is not listed; it depends on platform-config" in text
    assert "platform-config-cdi dependsOn platform-config (dev, prod)" in text
    assert "apps-vms dependsOn platform-config-cdi (dev, prod)" in text
    assert "New order: platform platform-config platform-config-cdi apps apps-vms" in text
    assert f"Made stale by {'a' * 40} (fix(gitops): CDI deadlock)." in text


def test_pr_title_and_body_explain_the_graph_change_and_link_the_commit() -> None:
    fix = plan({"dev": SEED, "prod": SEED})
    url = "https://github.com/home-ops/cluster/commit/" + "b" * 40
    stale = StaleCommit("b" * 40, "split <CDI> @alice", url, ("new tier `platform-config-cdi` (dependsOn `platform-config`) in dev, prod",))
    assert fix.pr_title() == "Tier order: add platform-config-cdi to TIER_ORDER (bootstrap/standup.sh)"
    body = fix.pr_body(repo="home-ops/cluster", base="main", stale=stale)
    assert body.startswith("<!-- fluxwarden:tier-order stale-since=" + "b" * 40 + " -->\n")
    assert f"[`{'b' * 12}`]({url})" in body
    assert "new tier `platform-config-cdi` (dependsOn `platform-config`) in dev, prod" in body
    assert "@alice" not in body and "<CDI>" not in body  # a commit subject cannot mention or inject HTML
    assert "adds `platform-config-cdi` right after `platform-config`" in body
    assert "| after | `platform` `platform-config` `platform-config-cdi` `apps` `apps-vms` |" in body
    unknown = fix.pr_body(stale_unknown="The order was already stale 32 commits back.")
    assert "stale-since=unknown" in unknown and "already stale 32 commits back" in unknown


def test_already_correct_needs_nothing() -> None:
    text = SEED_SCRIPT.replace("  platform-config\n", "  platform-config\n  platform-config-cdi\n")
    fix = plan({"dev": SEED, "prod": SEED}, text)
    assert not fix.needed
    assert fix.new_text == text and fix.changes == () and fix.reasons == ()
    assert fix.diff() == ""
    assert "is in dependency order for dev and prod" in fix.report()


def test_wrong_position_moves_only_the_dependent() -> None:
    graph = {"platform": set(), "platform-config": {"platform"}, "apps": {"platform-config"}, "monitoring": set()}
    text = "TIER_ORDER=(\n  apps  # workloads\n  platform\n  platform-config\n  monitoring\n)\n"
    fix = plan({"dev": graph}, text)
    assert fix.order == ("platform", "platform-config", "apps", "monitoring")
    [change] = fix.changes
    assert (change.kind, change.tier, change.after) == ("moved", "apps", "platform-config")
    assert change.edges == (Edge("apps", "platform-config", ("dev",)),)
    # The moved line keeps its comment; nothing else changes.
    assert changed_lines(text, fix.new_text) == ["-  apps  # workloads", "+  apps  # workloads"]
    assert fix.pr_title() == "Tier order: move apps in TIER_ORDER (bootstrap/standup.sh)"


def test_a_tier_of_only_one_cluster_still_gets_its_place() -> None:
    prod = {**SEED, "monitoring": {"platform"}, "platform-config-cdi": {"platform-config"}}
    text = SEED_SCRIPT.replace("  platform-config\n", "  platform-config\n  platform-config-cdi\n")
    fix = plan({"dev": SEED, "prod": prod}, text)
    assert fix.order == ("platform", "monitoring", "platform-config", "platform-config-cdi", "apps", "apps-vms")
    [change] = fix.changes
    assert change.tier == "monitoring" and change.edges == (Edge("monitoring", "platform", ("prod",)),)
    assert fix.clusters == ("dev", "prod")


def test_union_of_constraints_satisfies_every_cluster() -> None:
    # dev orders a before b, prod orders b before c: the one list must do both.
    dev = {"a": set(), "b": {"a"}, "c": set()}
    prod = {"a": set(), "b": set(), "c": {"b"}}
    fix = plan({"dev": dev, "prod": prod}, "TIER_ORDER=(c b a)\n")
    assert fix.order == ("a", "b", "c")
    for graph in (dev, prod):
        assert stale_reasons(fix.order, graph) == []
    assert fix.new_text == "TIER_ORDER=(a b c)\n"


def test_clusters_that_disagree_have_no_fix() -> None:
    dev = {"platform": set(), "platform-config": {"platform"}, "apps": {"platform-config"}}
    prod = {"platform": set(), "platform-config": {"platform", "apps"}, "apps": {"platform"}}
    with pytest.raises(TierOrderConflict) as info:
        plan({"dev": dev, "prod": prod}, "TIER_ORDER=(platform platform-config apps)\n")
    conflict = info.value
    assert conflict.cycle == ("apps", "platform-config", "apps")
    assert conflict.edges == (Edge("apps", "platform-config", ("dev",)), Edge("platform-config", "apps", ("prod",)))
    message = str(conflict)
    assert "the clusters' graphs disagree" in message
    assert "apps dependsOn platform-config (dev)" in message and "platform-config dependsOn apps (prod)" in message
    assert "\n" not in message  # one line for the CLI
    assert "- `platform-config` dependsOn `apps` (prod)" in conflict.markdown()
    assert isinstance(conflict, UserError)


def test_a_cycle_inside_every_cluster_is_named_as_such() -> None:
    graph = {"a": {"b"}, "b": {"a"}}
    with pytest.raises(TierOrderConflict, match=r"the graph of dev and prod itself has a dependency cycle"):
        plan({"dev": graph, "prod": graph}, "TIER_ORDER=(a b)\n")


def test_unknown_and_duplicate_entries_are_removed() -> None:
    fix = plan({"dev": {"platform": set(), "apps": {"platform"}}}, "TIER_ORDER=(platform legacy apps platform)\n")
    assert fix.order == ("platform", "apps")
    assert [(c.kind, c.tier) for c in fix.changes] == [("removed", "platform"), ("removed", "legacy")]
    assert fix.changes[1] == Change("removed", "legacy", note="not a Kustomization of any cluster")
    assert fix.headline() == "remove duplicate platform and legacy from TIER_ORDER"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param('TIER_ORDER="platform platform-config apps apps-vms"  # keep\n',
                     'TIER_ORDER="platform platform-config platform-config-cdi apps apps-vms"  # keep\n', id="string"),
        pytest.param("TIER_ORDER=(platform platform-config apps apps-vms)\n",
                     "TIER_ORDER=(platform platform-config platform-config-cdi apps apps-vms)\n", id="inline"),
        pytest.param("TIER_ORDER=(\r\n  platform\r\n  platform-config\r\n  apps\r\n  apps-vms\r\n)\r\n",
                     "TIER_ORDER=(\r\n  platform\r\n  platform-config\r\n  platform-config-cdi\r\n  apps\r\n  apps-vms\r\n)\r\n", id="crlf"),
    ],
)
def test_other_list_styles_are_edited_in_place(text: str, expected: str) -> None:
    assert plan({"dev": SEED}, text).new_text == expected


def test_unreadable_list_is_an_error() -> None:
    with pytest.raises(TierOrderError):
        plan({"dev": SEED}, "TIER_ORDER=$(cat tiers)\n")


def test_union_graph_records_the_clusters_of_each_tier_and_edge() -> None:
    union = union_graph({"prod": {"a": {"b"}}, "dev": {"a": {"b"}, "c": set()}})
    assert union.clusters == ("dev", "prod")
    assert union.tiers == {"a": ("dev", "prod"), "b": ("dev", "prod"), "c": ("dev",)}
    assert union.edges == {("a", "b"): ("dev", "prod")}
    assert union.deps == {"a": frozenset({"b"}), "b": frozenset(), "c": frozenset()}


# --------------------------------------------------------------------------------------------
# graph_changes and first_stale


def test_graph_changes_name_tiers_edges_and_clusters() -> None:
    old = {"dev": {"a": set(), "b": {"a"}, "gone": set()}, "prod": {"a": set(), "b": {"a"}}}
    new = {"dev": {"a": set(), "b": {"a", "c"}, "c": {"a"}}, "prod": {"a": set(), "b": set(), "c": {"a"}}}
    assert graph_changes(old, new) == [
        "new tier `c` (dependsOn `a`) in dev, prod",
        "tier `gone` removed in dev",
        "`b` now dependsOn `c` in dev",
        "`b` no longer dependsOn `a` in prod",
    ]


def test_first_stale_bisects() -> None:
    commits = [f"c{i}" for i in range(20)]
    asked: list[str] = []

    def stale(sha: str) -> bool:
        asked.append(sha)
        return int(sha[1:]) >= 13

    assert first_stale(commits, stale) == 13
    assert len(asked) <= 6
    assert first_stale(commits, lambda sha: True) is None  # already stale at the oldest
    assert first_stale(commits, lambda sha: None if sha == "c9" else int(sha[1:]) >= 13) is None
    assert first_stale(["only"], lambda sha: True) is None
    assert first_stale([], lambda sha: True) is None


# --------------------------------------------------------------------------------------------
# Reading a tree


def test_read_tree_state_renders_every_cluster_of_the_example(tmp_path: Path) -> None:
    state = read_tree_state(EXAMPLE)
    assert (state.file, state.variable) == (FILE, VAR)
    assert state.text == (EXAMPLE / FILE).read_text()
    assert set(state.graphs) == {"dev", "prod"}
    assert state.graphs["dev"] == state.graphs["prod"] == {k: frozenset(v - {"apps"}) if k == "apps-vms" else frozenset(v) for k, v in SEED.items()}
    fix = state.plan()
    assert fix.added == ("platform-config-cdi",)


def test_read_tree_state_pre_fix_is_already_correct(tmp_path: Path) -> None:
    tree = tmp_path / "repo"
    shutil.copytree(EXAMPLE, tree)
    pre_fix(tree)
    assert not read_tree_state(tree).plan().needed


def test_tree_without_tier_order_or_file(tmp_path: Path) -> None:
    tree = tmp_path / "repo"
    shutil.copytree(EXAMPLE, tree)
    (tree / ".fluxwarden.yaml").write_text("clusters:\n  dev: {path: clusters/dev}\n")
    state = read_tree_state(tree)
    assert state.file is None
    with pytest.raises(UserError, match="no tier order configured"):
        state.plan()
    (tree / ".fluxwarden.yaml").write_text("tier_order: {file: bootstrap/missing.sh, variable: TIER_ORDER}\n")
    with pytest.raises(UserError, match="bootstrap/missing.sh is not in the repository"):
        read_tree_state(tree).plan()


def test_a_tier_that_does_not_render_stops_the_fix(tmp_path: Path) -> None:
    tree = tmp_path / "repo"
    shutil.copytree(EXAMPLE, tree)
    shutil.rmtree(tree / "platform-config-cdi")  # its Kustomization's path is gone: the build fails
    with pytest.raises(IncompleteRender, match="flux-system/platform-config-cdi could not be rendered"):
        read_tree_state(tree)


def test_symlinked_tier_order_file_is_refused(tmp_path: Path) -> None:
    tree = tmp_path / "repo"
    tree.mkdir()
    (tmp_path / "outside.sh").write_text("TIER_ORDER=(a)\n")
    (tree / "bootstrap").mkdir()
    os.symlink(tmp_path / "outside.sh", tree / "bootstrap" / "standup.sh")
    with pytest.raises(UserError, match="symlink"):
        read_tier_order_file(tree, FILE)
    assert read_tier_order_file(tree, "bootstrap/none.sh") is None


def test_tree_state_plan_needs_clusters() -> None:
    with pytest.raises(UserError, match="no clusters found"):
        TreeState(FILE, VAR, SEED_SCRIPT, {}).plan()
