"""The synthetic benchmark repository: deterministic, the requested size, and clean under check."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from bench.synth import generate, touch_one_tier
from bot.pipeline.check import CheckOptions, check_repository
from bot.engine.core.model import Severity

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


def test_the_charts_synth_has_the_size_the_issue_asks_for(tmp_path: Path) -> None:
    import yaml

    repo = generate(tmp_path / "big", tiers=200, objects=20000, releases=150, git=False)
    kinds: dict[str, int] = {}
    for path in (repo.root / "tiers").rglob("releases.yaml"):  # the HelmReleases and their values ConfigMaps
        for doc in yaml.load_all(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
            if isinstance(doc, dict) and "kind" in doc:
                kinds[doc["kind"]] = kinds.get(doc["kind"], 0) + 1
    flux_kustomizations = len(list((repo.root / "clusters" / "base").glob("tier-*.yaml")))
    assert flux_kustomizations >= 200 and len(repo.tiers) >= 200
    assert kinds["HelmRelease"] == len(repo.releases) >= 150
    charts = sorted(p.parent.name for p in (repo.root / "charts").glob("*/Chart.yaml"))
    assert charts == sorted(repo.charts) and len(charts) >= 10
    assert {r.chart for r in repo.releases} == set(charts)
    assert [c for c in charts if len(list((repo.root / "charts" / c / "crds").glob("*.yaml"))) >= 5]  # operators
    assert [c for c in charts if list((repo.root / "charts" / c / "charts").glob("*/Chart.yaml"))]  # subcharts
    assert kinds["ConfigMap"] == sum(r.values_from for r in repo.releases) > 0
    assert repo.objects == sum(repo.tier_objects.values())


def test_a_tiny_charts_synth_renders_every_chart_and_checks_clean(tmp_path: Path) -> None:
    from bench.synth import bump_chart
    from bench.synth_charts import SINGLE_RELEASE_CHART

    repo = generate(tmp_path / "tiny", tiers=8, objects=120, releases=14, seed=3)
    report = check_repository(repo.root, "dev", CheckOptions(jobs=2))
    assert [f"{f.check}: {f.message}" for f in report.findings if f.severity != Severity.INFO] == []
    assert (report.releases, report.releases_not_rendered) == (len(repo.releases), 0) == (14, 0)
    # The operators' CRDs (crds/ of a rendered chart) provide the custom resources of the tiers after them.
    crs = list((repo.root / "tiers").glob("*/operator-resources.yaml"))
    assert crs
    version = bump_chart(repo.root, SINGLE_RELEASE_CHART, commit=True)
    assert f"version: {version}" in (repo.root / "charts" / SINGLE_RELEASE_CHART / "Chart.yaml").read_text()
