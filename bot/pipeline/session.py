"""The one way to open a render: a `Session` is a snapshot, its configuration, kustomize, the build cache and this run's memo.

Every use case (`check`, `review`, `drift`, `tier_state`) opens its sessions through `open_run`, so each
run takes kustomize's version from the cache, writes within a quarter of the cache's budget, and prunes
the cache when it is done.
"""

from __future__ import annotations

import gc
import tempfile
import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from bot.adapters.cache import BuildCache, cache_budget
from bot.adapters.kustomize import KustomizeBinary, KustomizeProbes, locate_kustomize, remember_version
from bot.adapters.memory import release_free_memory
from bot.adapters.workspace import Snapshot, build_snapshot
from bot.engine.render.clusterobjects import ConfigFetcher
from bot.engine.render.config import RepoConfig, snapshot_config, with_artifact_sources
from bot.engine.render.discovery import RenderLimits
from bot.engine.render.yamlio import clear_resolve_cache
from bot.pipeline.memo import RunMemo
from bot.pipeline.progress import Progress
from bot.pipeline.releases import ChartOptions, ChartStage
from bot.pipeline.renderer import Renderer


@dataclass(frozen=True)
class CheckOptions:
    """How to run a check: which kustomize, how many parallel builds, the per-build timeout, the build cache."""

    kustomize: str | None = None
    jobs: int | None = None
    timeout: float = 120.0
    cache_dir: Path | None = None  # None: no on-disk cache
    bootstrap: bool = True  # False (`--no-bootstrap`): judge a bare cluster, nothing installed before Flux
    charts: ChartOptions = field(default_factory=ChartOptions)  # how HelmReleases' charts are fetched and rendered
    progress: Progress | None = field(default=None, compare=False)  # counters for a progress line (the CLI on a terminal)
    # Reads substituteFrom ConfigMaps/Secrets that git lacks from the live cluster (`--live`, the bot's live access).
    live_config: ConfigFetcher | None = field(default=None, compare=False)
    # What the process learnt of its kustomize binaries (versions, whether they start): the service keeps one for
    # its life, so each binary is probed once per process. None: the run keeps its own (the CLI: one run a process).
    probes: KustomizeProbes | None = field(default=None, compare=False)


@dataclass(frozen=True)
class Session:
    """One snapshot to render, with the configuration that judges it, kustomize, the build cache and the run's memo."""

    snapshot: Snapshot
    config: RepoConfig
    binary: KustomizeBinary
    cache: BuildCache | None = None
    jobs: int | None = None
    timeout: float = 120.0
    memo: RunMemo = field(default_factory=RunMemo)  # shared by the sessions of one run (both sides of a review)
    charts: ChartStage | None = None  # the run's chart fetcher and Helm workers; None: HelmReleases are not rendered
    progress: Progress | None = None
    live_config: ConfigFetcher | None = None

    @classmethod
    def of(
        cls, snapshot: Snapshot, binary: KustomizeBinary, options: CheckOptions = CheckOptions(), *, cache: BuildCache | None = None,
        config: RepoConfig | None = None, memo: RunMemo | None = None, charts: ChartStage | None = None,
    ) -> "Session":
        """A session of a snapshot with `config`; None: the snapshot's own `.fluxwarden.yaml` (a UserError when unreadable).

        The one place a render's configuration is chosen: the CLI may name a file (`--config`), a review
        gives both sides the same one, and the bot may pass the base branch's.
        """
        return cls(
            snapshot, with_artifact_sources(config if config is not None else snapshot_config(snapshot), snapshot), binary, cache,
            options.jobs, options.timeout, memo if memo is not None else RunMemo(), charts, options.progress, options.live_config,
        )

    def renderer(self, limits: RenderLimits = RenderLimits()) -> Renderer:
        """A renderer of this session's snapshot (its builds, finished tiers and facts go to the session's memos)."""
        return Renderer(
            self.snapshot, self.config, self.binary, jobs=self.jobs, timeout=self.timeout, cache=self.cache, memo=self.memo, limits=limits,
            charts=self.charts, progress=self.progress, live_config=self.live_config,
        )


@dataclass(frozen=True)
class Run:
    """One run's kustomize, build cache, scratch directory and memo: it opens the sessions of the trees it renders."""

    binary: KustomizeBinary
    cache: BuildCache | None
    options: CheckOptions
    work: Path
    stack: ExitStack
    memo: RunMemo = field(default_factory=RunMemo)
    charts: ChartStage | None = None

    def tree(self, path: Path, *, config: RepoConfig | None = None, name: str = "tree") -> Session:
        """The session of a working tree (snapshotted under the run's scratch directory)."""
        return self.session(build_snapshot(path, self.work / name), config=config)

    def commit(self, repo: Path, rev: str, *, name: str) -> tuple[str, Snapshot]:
        """A commit's SHA and snapshot, kept until the run ends (git is read lazily; see bot/adapters/git.py)."""
        from bot.adapters import git as gitrepo  # GitPython: only for committed trees

        return self.stack.enter_context(gitrepo.commit_snapshot(repo, rev, self.work / name, self.cache))

    def session(self, snapshot: Snapshot, *, config: RepoConfig | None = None) -> Session:
        """The session of a snapshot (see `Session.of`), sharing this run's cache and memo."""
        return Session.of(snapshot, self.binary, self.options, cache=self.cache, config=config, memo=self.memo, charts=self.charts)


_WORK_DIRS: set[str] = set()  # the scratch directories of the runs in progress (set.add/discard are atomic)


def work_dirs() -> list[str]:
    """The scratch directories of the runs in progress (a shutdown that cannot wait for a run removes them itself)."""
    return sorted(_WORK_DIRS)


@contextmanager
def open_run(options: CheckOptions = CheckOptions(), *, prefix: str = "fluxwarden-") -> Iterator[Run]:
    """A run with `options.cache_dir`'s cache (None: none): kustomize located, its scratch directory removed at the end."""
    binary = locate_kustomize(options.kustomize, options.probes)
    _enter_run()
    try:
        with run_cache(options.cache_dir, binary) as cache, tempfile.TemporaryDirectory(prefix=prefix) as tmp, ExitStack() as stack:
            _WORK_DIRS.add(tmp)
            stack.callback(_WORK_DIRS.discard, tmp)
            charts = ChartStage(options.charts, options.cache_dir, cache, binary, Path(tmp)) if options.charts.render else None
            if charts is not None:
                stack.callback(charts.close)
            yield Run(binary, cache, options, Path(tmp), stack, charts=charts)
    finally:
        _leave_run()


_OPEN_RUNS = [0]  # runs open in this process (the service runs `workers` at once)
_OPEN_RUNS_LOCK = threading.Lock()


def _enter_run() -> None:
    with _OPEN_RUNS_LOCK:
        _OPEN_RUNS[0] += 1


def _leave_run() -> None:
    """The end of a run; the last open one empties the process-wide cache of scalar tags.

    What a run leaves in a module cache (scalar tags) is small, but it was allocated among the run's garbage and
    pins the heap pages around it: a 60,000-object check kept ~40 MiB resident for ~1 MiB of live cache (see
    `release_idle_memory`).
    """
    with _OPEN_RUNS_LOCK:
        _OPEN_RUNS[0] -= 1
        if _OPEN_RUNS[0] == 0:
            clear_resolve_cache()


def release_idle_memory() -> bool:
    """When no run is open: collect the runs' reference cycles and hand the freed heap back; False when a run is open.

    A long-lived process (the service) calls it once a run's result is dropped, not at the end of `open_run`:
    there the caller's frame still holds both renders, so a trim finds nothing to return, and the pages freed a
    moment later stay resident. The service's review threads allocate in glibc's per-thread arenas, which give
    pages back only from their top: a 20,000-object review left ~110 MiB free but resident until `malloc_trim`
    (the image runs with PYTHONMALLOC=malloc, Dockerfile: pymalloc's 1 MiB arenas are kept whole by one live
    object). ~0.2 s after such a review; a CLI run is followed by the process's exit instead.
    """
    with _OPEN_RUNS_LOCK:
        if _OPEN_RUNS[0]:
            return False
    gc.collect()  # the run's cycles (trees of frozen models) before the trim, not at some later collection
    release_free_memory()
    return True


@contextmanager
def run_cache(directory: Path | None, binary: KustomizeBinary) -> Iterator[BuildCache | None]:
    """The build cache of one run (None: no cache): kustomize's version taken from it, kept under its budget after."""
    if directory is None:
        yield None
        return
    budget = cache_budget()
    cache = BuildCache(directory, max_write_bytes=budget // 4)  # one run may fill a quarter of the budget
    remember_version(binary, cache)
    yield cache
    cache.prune_if_due(budget)
