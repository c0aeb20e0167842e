"""The synthetic benchmark repository: deterministic, the requested size, and clean under check."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from bench.synth import generate, touch_one_tier
from bot.pipeline.check import CheckOptions, check_repository
from bot.engine.model import Severity

TIERS, OBJECTS = 6, 60


def _files(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and ".git" not in p.relative_to(root).parts
    }


@pytest.fixture(scope="module")
def synth(tmp_path_factory: pytest.TempPathFactory):
    return generate(tmp_path_factory.mktemp("synth") / "repo", tiers=TIERS, objects=OBJECTS, seed=7)


def test_same_seed_writes_identical_files(synth, tmp_path: Path) -> None:
    again = generate(tmp_path / "again", tiers=TIERS, objects=OBJECTS, seed=7)
    assert _files(again.root) == _files(synth.root)
    assert again.commit == synth.commit  # fixed author and dates: the commit is deterministic too
    other = generate(tmp_path / "other", tiers=TIERS, objects=OBJECTS, seed=8)
    assert _files(other.root) != _files(synth.root)


def test_requested_counts(synth) -> None:
    assert len(synth.tiers) == TIERS
    assert synth.objects == OBJECTS == sum(synth.tier_objects.values())
    assert len(_files(synth.root)) == synth.files
    assert len({p.name for p in (synth.root / "clusters" / "base").glob("tier-*.yaml")}) == TIERS
    assert synth.crd_tiers and synth.cr_tiers and synth.roots
    assert len(synth.generated_tiers) == 2
    for tier in synth.generated_tiers:
        assert not (synth.tier_dir(tier) / "kustomization.yaml").exists()
    # every CR tier depends directly on a CRD tier, and CRD tiers wait
    for tier in synth.cr_tiers:
        assert set(synth.depends_on[tier]) & set(synth.crd_tiers)
    assert set(synth.crd_tiers) <= set(synth.wait_tiers)
    assert (synth.root / ".git").is_dir() and len(synth.commit) == 40


@pytest.mark.parametrize("cluster", ["dev", "prod"])
def test_checks_clean_and_sees_every_tier(synth, cluster: str) -> None:
    report = check_repository(synth.root, cluster, CheckOptions(jobs=2))
    errors = [f for f in report.findings if f.severity == Severity.ERROR]
    assert errors == []
    assert report.warnings == 0
    seen = {t.id.name for t in report.tiers}
    assert seen == {"flux-system", *synth.tiers}
    assert all(t.rendered for t in report.tiers)
    assert report.objects == synth.report_objects


def test_touch_one_tier_changes_one_file(tmp_path: Path) -> None:
    repo = generate(tmp_path / "repo", tiers=TIERS, objects=OBJECTS, seed=7)
    before = _files(repo.root)
    tier = touch_one_tier(repo.root, 3)
    after = _files(repo.root)
    changed = [p for p in after if after[p] != before[p]]
    assert tier == repo.tiers[3]
    assert len(changed) == 1 and changed[0].startswith(f"tiers/{tier}/")
    report = check_repository(repo.root, "dev", CheckOptions(jobs=2))
    assert report.errors == 0
    touch_one_tier(repo.root, 3, commit=True)  # a second bump, committed: HEAD~1 is the PR's base
    log = subprocess.run(["git", "log", "--format=%H"], cwd=repo.root, capture_output=True, text=True, check=True)
    assert log.stdout.split()[1] == repo.commit
