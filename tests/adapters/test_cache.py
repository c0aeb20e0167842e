"""The build cache on disk: least-recently-used pruning, reads that mark entries used, and the code fingerprint of its keys."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import grimp
import pytest

from bot.adapters.cache import FINGERPRINTED, BuildCache, cache_budget, code_fingerprint, fingerprint

HOUR = 3600


def _age(cache: BuildCache, key: str, seconds: float) -> None:
    path = cache.directory / key[:2] / f"{key}.pickle"
    then = time.time() - seconds
    os.utime(path, (then, then))


def _filled(tmp_path: Path) -> BuildCache:
    """Ten 10 KB entries, k0 the least recently used, k9 the most (all older than the grace)."""
    cache = BuildCache(tmp_path / "builds")
    for i in range(10):
        cache.put(f"k{i}", b"x" * 10_000)
        _age(cache, f"k{i}", 10 * HOUR - i * 60)
    return cache


def test_nothing_goes_under_the_budget(tmp_path: Path) -> None:
    cache = _filled(tmp_path)
    removed, left = cache.prune(10**6)
    assert removed == 0 and left > 100_000
    assert all(cache.contains(f"k{i}") for i in range(10))


def test_over_the_budget_the_least_recently_used_go_to_80_percent(tmp_path: Path) -> None:
    cache = _filled(tmp_path)
    assert cache.get("k0") == b"x" * 10_000  # read now: most recently used
    size = (cache.directory / "k0" / "k0.pickle").stat().st_size
    removed, left = cache.prune(5 * size)
    assert left <= 4 * size and removed == 6
    assert [i for i in range(10) if cache.contains(f"k{i}")] == [0, 7, 8, 9]


def test_entries_used_within_the_grace_stay_and_other_files_are_left_alone(tmp_path: Path) -> None:
    cache = _filled(tmp_path)
    for i in range(10):
        assert cache.contains(f"k{i}")  # marks each used now
    mirrors = tmp_path / "builds" / "mirrors"
    mirrors.mkdir()
    (mirrors / "HEAD").write_text("ref: refs/heads/main\n")
    stale_tmp = cache.directory / "k0" / "abandoned.tmp"
    stale_tmp.write_bytes(b"half")
    os.utime(stale_tmp, (time.time() - 2 * HOUR,) * 2)
    removed, _ = cache.prune(1)
    assert removed == 0 and all(cache.contains(f"k{i}") for i in range(10))
    assert (mirrors / "HEAD").exists() and not stale_tmp.exists()


def test_pruning_is_due_once_per_interval(tmp_path: Path) -> None:
    cache = _filled(tmp_path)
    assert cache.prune_if_due(1) is not None
    assert cache.prune_if_due(1) is None  # walked a moment ago
    os.utime(cache.directory / ".pruned", (time.time() - HOUR,) * 2)
    assert cache.prune_if_due(1) is not None


@pytest.mark.parametrize("value, expected", [("", 2 * 1024**3), ("1000", 1000), ("lots", 2 * 1024**3), ("-5", 0)])
def test_budget_from_the_environment(monkeypatch: pytest.MonkeyPatch, value: str, expected: int) -> None:
    monkeypatch.setenv("FLUXWARDEN_CACHE_MAX_BYTES", value)
    assert cache_budget() == expected


def test_a_review_after_its_cache_was_pruned_to_nothing_still_works(tmp_path: Path) -> None:
    """Pruned entries are misses: the next review rebuilds what it needs and finds the same."""
    from bot.pipeline.review import review_repository
    from tests.gitrepo import EXAMPLE, commit_all, init_repo

    root = tmp_path / "repo"
    repo = init_repo(root, EXAMPLE)
    base = repo.head.commit.hexsha
    whoami = root / "apps/whoami/whoami.yaml"
    whoami.write_text(whoami.read_text().replace("replicas: 2", "replicas: 3"))
    head = commit_all(repo, "scale")
    first = review_repository(root, "prod", base, head, cache_dir=tmp_path / "cache")
    cache = BuildCache(tmp_path / "cache")
    for path in cache.directory.rglob("*.pickle"):
        os.utime(path, (time.time() - 2 * HOUR,) * 2)
    cache.prune(1)
    assert not list(cache.directory.rglob("*.pickle"))
    again = review_repository(root, "prod", base, head, cache_dir=tmp_path / "cache")
    assert again.findings == first.findings and again.diff == first.diff and again.kustomize_builds == first.kustomize_builds


def test_one_run_writes_at_most_its_bound(tmp_path: Path) -> None:
    """A run that would write without end (a self-recreating Kustomization) stops caching at its bound."""
    cache = BuildCache(tmp_path, max_write_bytes=10_000)
    for i in range(50):
        cache.put(f"{i:04d}entry", "x" * 1_000)
    stored = [i for i in range(50) if cache.get(f"{i:04d}entry") is not None]
    assert 5 <= len(stored) < 10 and stored == list(range(len(stored)))
    assert cache.written_bytes <= 10_000
    assert sum(p.stat().st_size for p in tmp_path.rglob("*") if p.is_file()) <= 10_000
    assert not list(tmp_path.rglob("*.tmp"))


def _package_copy(tmp_path: Path) -> Path:
    """A copy of the `bot` package to edit (the installed one stays as it is)."""
    package = Path(__file__).resolve().parents[2] / "bot"
    copy = tmp_path / "bot"
    shutil.copytree(package, copy, ignore=shutil.ignore_patterns("__pycache__"))
    return copy


def test_the_fingerprint_is_the_installed_code() -> None:
    assert code_fingerprint() == fingerprint(Path(__file__).resolve().parents[2] / "bot")


@pytest.mark.parametrize(
    "module", ["engine/tiergraph/checks/crds.py", "engine/data/knowledge.yaml", "pipeline/renderer.py", "adapters/kustomize.py", "adapters/workspace.py", "adapters/sourceignore.py"]
)
def test_a_change_that_can_change_a_result_changes_the_fingerprint(tmp_path: Path, module: str) -> None:
    package = _package_copy(tmp_path)
    before = fingerprint(package)
    with (package / module).open("a", encoding="utf-8") as handle:
        handle.write("\n# edited\n")
    assert fingerprint(package) != before


def test_every_adapter_the_pipeline_runs_on_is_fingerprinted() -> None:
    """An adapter the pipeline imports shapes what it caches, unless it only reads a live cluster (never cached)."""
    graph = grimp.build_graph("bot", cache_dir=None)
    used = {m for m in graph.find_upstream_modules("bot.pipeline", as_package=True) if m.startswith("bot.adapters.")}
    live_only = {"bot.adapters.kube"}  # drift's and --live's cluster reads: compared fresh every run
    named = {"bot." + name.removesuffix(".py").replace("/", ".") for name in FINGERPRINTED}
    assert used - live_only <= named, f"add to FINGERPRINTED: {sorted(used - live_only - named)}"
    assert used >= live_only


@pytest.mark.parametrize("module", ["service/app.py", "service/settings.py", "adapters/github.py", "adapters/kube.py"])
def test_a_service_change_keeps_the_fingerprint(tmp_path: Path, module: str) -> None:
    package = _package_copy(tmp_path)
    before = fingerprint(package)
    with (package / module).open("a", encoding="utf-8") as handle:
        handle.write("\n# edited\n")
    assert fingerprint(package) == before
