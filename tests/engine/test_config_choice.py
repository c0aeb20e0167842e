"""Which `.fluxwarden.yaml` a run uses: never hidden by `.sourceignore`, `--config FILE`, one config for both sides of a review."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from bot.service.cli import main
from bot.engine.render.config import load_repo_config, snapshot_config
from bot.engine.core.errors import ConfigError
from bot.adapters.workspace import build_snapshot
from tests.fluxrepo import dump, ks, kustomization, obj, write_tree
from tests.gitrepo import commit_all, init_repo

# The shape of fluxcd/flux2-kustomize-helm-example: `/*` ignored, the manifest directories re-included.
SOURCEIGNORE = "/*\n!/kubernetes/\n!/apps/\n"
CONFIG = "clusters: {main: {path: kubernetes/main}}\n"


def small_repo(root: Path, *, cycle: bool = False, config: str | None = CONFIG, sourceignore: bool = True) -> Path:
    """An entry `kubernetes/main` (not under clusters/, so only the config names it) applying two tiers."""
    files = {
        "kubernetes/main/kustomization.yaml": kustomization("a.yaml", "b.yaml"),
        "kubernetes/main/a.yaml": dump(ks("a", "./apps/a", depends_on=["b"] if cycle else [])),
        "kubernetes/main/b.yaml": dump(ks("b", "./apps/b", depends_on=["a"])),
        "apps/a/kustomization.yaml": kustomization("cm.yaml"),
        "apps/a/cm.yaml": dump(obj("v1", "ConfigMap", "a", "default", data={"k": "v"})),
        "apps/b/kustomization.yaml": kustomization("cm.yaml"),
        "apps/b/cm.yaml": dump(obj("v1", "ConfigMap", "b", "default", data={"k": "v"})),
    }
    if sourceignore:
        files[".sourceignore"] = SOURCEIGNORE
    if config is not None:
        files[".fluxwarden.yaml"] = config
    return write_tree(root, files)


def test_sourceignore_does_not_hide_the_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    repo = small_repo(tmp_path / "repo")
    code = main(["check", "--repo", str(repo), "--cluster", "main", "--no-cache", "--format", "json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    report = json.loads(captured.out)
    assert {k["name"]: k["path"] for k in report["kustomizations"]}["flux-system"] == "kubernetes/main"
    assert {k["name"]: k["objects"] for k in report["kustomizations"]} == {"flux-system": 2, "a": 1, "b": 1}


def test_the_artifact_still_leaves_the_config_out(tmp_path: Path) -> None:
    """It configures the check; Flux never ships it, so the snapshot kustomize reads stays as the artifact is."""
    snapshot = build_snapshot(small_repo(tmp_path / "repo"), tmp_path / "snap")
    assert not snapshot.exists(".fluxwarden.yaml") and not snapshot.exists(".sourceignore")
    assert snapshot_config(snapshot).clusters == {"main": "kubernetes/main"}


def test_a_config_symlinked_out_of_the_repo_is_refused(tmp_path: Path) -> None:
    outside = tmp_path / "outside.yaml"
    outside.write_text(CONFIG)
    repo = small_repo(tmp_path / "repo", config=None)
    os.symlink(outside, repo / ".fluxwarden.yaml")
    snapshot = build_snapshot(repo, tmp_path / "snap")
    with pytest.raises(ConfigError, match="resolves outside the repository"):
        snapshot_config(snapshot)


def test_config_file_from_outside_the_repo(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    repo = small_repo(tmp_path / "repo", config="clusters: {other: {path: apps}}\n")
    elsewhere = tmp_path / "elsewhere.yaml"
    elsewhere.write_text(CONFIG)
    assert main(["check", "--repo", str(repo), "--cluster", "main", "--no-cache"]) == 2
    assert "unknown cluster 'main' (known: other)" in capsys.readouterr().err
    assert main(["check", "--repo", str(repo), "--cluster", "main", "--no-cache", "--config", str(elsewhere)]) == 0
    assert "tiers of main (entry kubernetes/main)" in capsys.readouterr().out


def test_missing_config_file_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    repo = small_repo(tmp_path / "repo")
    assert main(["check", "--repo", str(repo), "--cluster", "main", "--config", str(tmp_path / "absent.yaml")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("fluxwarden: error: --config") and "No such file" in err and len(err.splitlines()) == 1


@pytest.mark.parametrize(
    "extra,message",
    [
        (["--config-from-commit"], "--config-from-commit needs --base"),
        (["--base", "HEAD", "--config-from-commit", "--config", "x.yaml"], "--config and --config-from-commit exclude each other"),
    ],
)
def test_config_flag_combinations(tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], message: str) -> None:
    repo = small_repo(tmp_path / "repo")
    assert main(["check", "--repo", str(repo), "--cluster", "main", *extra]) == 2
    assert message in capsys.readouterr().err


def test_tier_order_reads_config_from_outside(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    repo = small_repo(tmp_path / "repo", config=None)
    (repo / "standup.sh").write_text("TIER_ORDER=(b a)\n")
    elsewhere = tmp_path / "fw.yaml"
    elsewhere.write_text(CONFIG + "tier_order: {file: standup.sh, variable: TIER_ORDER}\n")
    assert main(["tier-order", "--repo", str(repo)]) == 2  # the repo itself configures no tier order
    assert "no tier order configured" in capsys.readouterr().err
    assert main(["tier-order", "--repo", str(repo), "--config", str(elsewhere)]) == 1  # b is applied before a needs it
    assert "standup.sh" in capsys.readouterr().out


def test_drift_render_takes_the_config(tmp_path: Path) -> None:
    from bot.pipeline.drift import render_cluster

    repo = small_repo(tmp_path / "repo", config=None)
    rendered = render_cluster(repo, "main", config=load_repo_config(CONFIG))
    assert rendered.render.entry == "kubernetes/main" and len(rendered.render.tiers) == 3


# -- reviews -------------------------------------------------------------------------------------


@pytest.fixture()
def uncommitted_config(tmp_path: Path) -> tuple[Path, str, str]:
    """Two commits with a dependency cycle in both and no `.fluxwarden.yaml`; the working tree adds one."""
    root = small_repo(tmp_path / "repo", cycle=True, config=None, sourceignore=False)
    repo = init_repo(root)
    base = repo.head.commit.hexsha
    (root / "apps/a/cm.yaml").write_text(dump(obj("v1", "ConfigMap", "a", "default", data={"k": "changed"})))
    head = commit_all(repo, "change a")
    (root / ".fluxwarden.yaml").write_text(CONFIG)  # not committed
    return root, base, head


@pytest.mark.parametrize("with_head", [False, True], ids=["working-tree", "committed-head"])
def test_review_uses_the_working_tree_config_for_both_sides(
    uncommitted_config: tuple[Path, str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str], with_head: bool
) -> None:
    root, base, head = uncommitted_config
    argv = ["check", "--repo", str(root), "--cluster", "main", "--base", base, "--cache-dir", str(tmp_path / "c"), "--format", "json"]
    argv += ["--head", head] if with_head else []
    code = main(argv)
    report = json.loads(capsys.readouterr().out)
    errors = {(f["check"], f["new"]) for f in report["findings"] if f["severity"] == "error"}
    assert errors == {("dependency-cycle", False)}  # the cycle was there before the change
    assert code == 0
    assert report["addedTiers"] == []  # the base rendered the same cluster, not nothing
    assert [(c["tier"], c["kind"]) for c in report["changes"]] == [("flux-system/a", "changed")]


def test_config_from_commit_reads_each_sides_own(uncommitted_config: tuple[Path, str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root, base, head = uncommitted_config
    argv = ["check", "--repo", str(root), "--cluster", "main", "--base", base, "--head", head, "--no-cache", "--config-from-commit"]
    assert main(argv) == 2  # neither commit has the configuration that names cluster `main`
    assert "unknown cluster 'main'" in capsys.readouterr().err


def test_config_from_commit_is_not_hidden_by_sourceignore(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A commit's `.fluxwarden.yaml` is read from git whatever its `.sourceignore` says."""
    root = small_repo(tmp_path / "repo", cycle=True)
    repo = init_repo(root)
    base = repo.head.commit.hexsha
    (root / "apps/a/cm.yaml").write_text(dump(obj("v1", "ConfigMap", "a", "default", data={"k": "changed"})))
    head = commit_all(repo, "change a")
    (root / ".fluxwarden.yaml").write_text("clusters: {other: {path: apps}}\n")  # the working tree's would not know `main`
    argv = ["check", "--repo", str(root), "--cluster", "main", "--base", base, "--head", head, "--cache-dir", str(tmp_path / "c"),
            "--config-from-commit", "--format", "json"]
    assert main(argv) == 0
    report = json.loads(capsys.readouterr().out)
    assert {(f["check"], f["new"]) for f in report["findings"] if f["severity"] == "error"} == {("dependency-cycle", False)}


def test_cached_results_of_a_commit_follow_the_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A commit's render and findings are cached by its tree id: the configuration must be part of the key."""
    root = small_repo(tmp_path / "repo", cycle=True, config=None)
    write_tree(root, {"kubernetes/calm/kustomization.yaml": kustomization("a.yaml"), "kubernetes/calm/a.yaml": dump(ks("a", "./apps/a"))})
    repo = init_repo(root)
    sha = repo.head.commit.hexsha
    cycle, calm = tmp_path / "cycle.yaml", tmp_path / "calm.yaml"
    cycle.write_text(CONFIG)
    calm.write_text("clusters: {main: {path: kubernetes/calm}}\n")
    cache = str(tmp_path / "c")
    common = ["check", "--repo", str(root), "--cluster", "main", "--base", sha, "--head", sha, "--cache-dir", cache, "--format", "json"]
    main([*common, "--config", str(cycle)])
    first = json.loads(capsys.readouterr().out)
    main([*common, "--config", str(calm)])
    second = json.loads(capsys.readouterr().out)
    assert [f["check"] for f in first["findings"] if f["severity"] == "error"] == ["dependency-cycle"]
    assert [f["check"] for f in second["findings"] if f["severity"] == "error"] == []
    assert sorted(k["name"] for k in second["kustomizations"]) == ["a", "flux-system"]
