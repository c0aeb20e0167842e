"""Every use case opens its renders through one Session: the build cache, kustomize's version and pruning for all."""

from __future__ import annotations

import os
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


_RSS_CHILD = """
import gc, json, os, sys
import os
from pathlib import Path
from bot.adapters.memory import release_free_memory, rss_of
from bot.engine.render import yamlio
from bot.pipeline.check import CheckOptions, check_repository, tune_gc
from bot.pipeline.session import release_idle_memory
tune_gc()  # as `fluxwarden serve` runs
gc.collect(); release_free_memory()
idle = rss_of(os.getpid())
report = check_repository(Path(sys.argv[1]), "dev", CheckOptions(jobs=2))
del report
assert release_idle_memory()  # as the service does once a run is over (bot/service/runs.py)
after = rss_of(os.getpid())
caches = [len(yamlio.FastSafeLoader._resolved)]  # document heads and discoveries live with the run (RunMemo, Snapshot.memo)
print(json.dumps({"idle": idle, "after": after, "caches": caches}))
"""


def test_a_long_lived_process_returns_near_its_idle_rss_after_a_run(tmp_path: Path) -> None:
    """Issue 23: a replica kept ~350 MiB more resident after a big check than before it, for the rest of its life.

    The end of the last open run empties the module caches (allocated among the run's garbage, they pin the heap
    pages around them), and `release_idle_memory` (the service calls it once a run is over) hands the freed heap
    back; a process of its own measures itself, as the image runs it
    (PYTHONMALLOC=malloc, Dockerfile): at 8,000 objects it kept ~40 MiB more with the caches, now a few MiB."""
    import json
    import subprocess
    import sys

    from bench.synth import generate

    repo = tmp_path / "synth"
    generate(repo, tiers=40, objects=8000, clusters=("dev",))
    env = {"PATH": os.environ.get("PATH", os.defpath), "HOME": str(tmp_path), "LANG": "C.UTF-8", "PYTHONMALLOC": "malloc",
           "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    proc = subprocess.run([sys.executable, "-c", _RSS_CHILD, str(repo)], capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    grown = (out["after"] - out["idle"]) / 2**20
    print(f"FIGURE rss_growth_after_a_run = {grown:.1f} MiB (idle {out['idle'] / 2**20:.0f} MiB)")
    assert out["caches"] == [0], "the process-wide caches outlived the run"
    assert grown < 50, f"{grown:.0f} MiB more resident after the run than before it"


def test_runs_sharing_probes_read_kustomize_s_version_once(tmp_path: Path) -> None:
    """The service's runs share one `KustomizeProbes`: kustomize's version is read once per process, not per run."""
    from bot.adapters.kustomize import KustomizeProbes

    binary, log = logging_binary(tmp_path, locate_kustomize())
    shared = CheckOptions(kustomize=binary.path, probes=KustomizeProbes())
    for _ in range(2):
        with open_run(shared) as run:
            assert run.binary.version != "unknown"
    assert log.read_text().split().count("--client") == 1
    with open_run(CheckOptions(kustomize=binary.path)) as run:  # a CLI run: its own record
        assert run.binary.version != "unknown"
    assert log.read_text().split().count("--client") == 2
