"""Every use case opens its renders through one Session: the build cache, kustomize's version and pruning for all."""

from __future__ import annotations

from pathlib import Path

from bot.adapters.kustomize import locate_kustomize
from bot.pipeline.drift import render_cluster
from bot.pipeline.session import CheckOptions, open_run
from bot.pipeline.tier_state import read_tree_state
from tests.gitrepo import EXAMPLE
from tests.pipeline.test_render import logging_binary


def _builds(log: Path) -> list[str]:
    """The build directories a logging kustomize was run on (version probes aside)."""
    return [line for line in log.read_text().split() if line != "--client"] if log.exists() else []


def test_tier_order_reads_the_build_cache_and_prunes_it(tmp_path: Path) -> None:
    binary, log = logging_binary(tmp_path, locate_kustomize())
    cache = tmp_path / "cache"
    first = read_tree_state(EXAMPLE, kustomize=binary.path, cache_dir=cache)
    assert _builds(log)
    assert (cache / ".pruned").exists()  # the run kept the cache under its budget
    log.unlink()
    assert read_tree_state(EXAMPLE, kustomize=binary.path, cache_dir=cache) == first
    assert _builds(log) == []  # every build came from the cache


def test_drift_reads_the_build_cache_and_prunes_it(tmp_path: Path) -> None:
    binary, log = logging_binary(tmp_path, locate_kustomize())
    cache = tmp_path / "cache"
    options = CheckOptions(kustomize=binary.path)
    first = render_cluster(EXAMPLE, "prod", options, cache_dir=cache)
    assert _builds(log)
    assert (cache / ".pruned").exists()
    log.unlink()
    again = render_cluster(EXAMPLE, "prod", options, cache_dir=cache)
    assert _builds(log) == []
    assert {tid: [m.ref for m in t.manifests] for tid, t in again.render.tiers.items()} == {
        tid: [m.ref for m in t.manifests] for tid, t in first.render.tiers.items()
    }


def test_the_sessions_of_one_run_share_its_cache_and_memo(tmp_path: Path) -> None:
    with open_run(CheckOptions(cache_dir=tmp_path / "cache")) as run:
        one, two = run.tree(EXAMPLE, name="one"), run.tree(EXAMPLE, name="two")
        assert one.cache is two.cache is run.cache and one.memo is two.memo is run.memo
        assert one.snapshot.root != two.snapshot.root
        assert one.renderer().memo is run.memo
