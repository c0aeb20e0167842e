"""Render a cluster the way kustomize-controller would: entry path, then every Kustomization on this repo.

The scheduling half: tiers build in a thread pool (bot/pipeline/build.py); bot/engine/render/clusterpass.py finishes
them as their substituteFrom sources arrive and follows their children; every memo is bot/pipeline/memo.py's.
A `Session` opens renderers.
"""

from __future__ import annotations

import os
import posixpath
import queue
import tempfile
import threading
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from bot.adapters.cache import BuildCache
from bot.adapters.kustomize import KustomizeBinary
from bot.adapters.memory import check_stop
from bot.adapters.workspace import Snapshot
from bot.engine.render.clusterobjects import ConfigFetcher
from bot.engine.render.clusterpass import ClusterPass, PassResult, cluster_settings, settle_entry
from bot.engine.render.config import CONFIG_FILE, RepoConfig
from bot.engine.render.discovery import RenderLimits, child_specs
from bot.engine.render.facts import ObjectStub
from bot.engine.render.flux import entry_tier
from bot.engine.core.model import Finding, Manifest, SourceLocation, TierSpec
from bot.engine.render.rendered import ClusterRender, RawTier, RenderedTier, build_key
from bot.pipeline.build import Locator, TierBuilder, with_ancestors
from bot.pipeline.memo import BuildMemo, FinishMemo, LineMemo, RunMemo, TreeBuild, children_key, render_key, tree_key
from bot.pipeline.progress import Progress
from bot.pipeline.releases import ChartStage


@dataclass(frozen=True)
class PriorBuilds:
    """The other side of a review and the paths that differ from it: a tier whose inputs no changed
    path touches builds exactly as it did there, so its build is reused without reading a file."""

    renderer: "Renderer"
    changed: frozenset[str]

    def _touches_everything(self) -> bool:
        if self.renderer.snapshot.has_symlinks or CONFIG_FILE in self.changed:
            return True
        return any(posixpath.basename(p) == ".sourceignore" for p in self.changed)  # it can hide or reveal files anywhere below it

    def reusable(self, key: str) -> RawTier | None:
        """The other side's build for this build key, when no changed path can have altered it."""
        if self._touches_everything():
            return None
        raw = self.renderer.built(key)
        if raw is None or raw.failed or not raw.inputs:
            return None
        # A tier's inputs are the files it reads and the directories it reads or lists: a change to a
        # file in one of them, or anywhere below a generated one, has one of them as path or ancestor.
        return None if raw.inputs & with_ancestors(self.changed) else raw

    def touched(self) -> list[TierSpec]:
        """The other side's tiers whose inputs a changed path touches, known before it renders when its
        commit was seen before (from its tree memo): the builds a review will need on this side."""
        if self._touches_everything():
            return []
        changed = with_ancestors(self.changed)
        return [b.spec for b in self.renderer.tree_builds() if b.inputs & changed]


def default_jobs() -> int:
    """Parallel builds: one per core plus one, so a core is not idle while Python parses a finished build."""
    return (os.cpu_count() or 1) + 1


class Renderer:
    """Renders clusters of one snapshot; tiers build in parallel, bounded by cores. Opened by a `Session`."""

    def __init__(
        self,
        snapshot: Snapshot,
        config: RepoConfig,
        binary: KustomizeBinary,
        *,
        jobs: int | None,
        timeout: float,
        cache: BuildCache | None,
        memo: RunMemo,
        limits: RenderLimits = RenderLimits(),
        charts: ChartStage | None = None,
        progress: Progress | None = None,
        live_config: ConfigFetcher | None = None,
    ) -> None:
        self.snapshot = snapshot
        # Reads the substituteFrom sources no build holds from the live cluster (None: not live; the declared file only).
        self.live_config = live_config
        self.progress = progress  # bumped as tiers are scheduled and finished (None: nobody reads it)
        self.charts = charts  # the run's chart fetcher and Helm workers (bot/pipeline/releases.py); None: charts not rendered
        self.config = config
        self.binary = binary
        self.jobs = jobs or default_jobs()
        self.limits = limits
        self.cache = cache
        self.memo = memo  # shared by the base and head renderers of a review (finished tiers, their facts)
        self.prior: PriorBuilds | None = None  # see `reuse`
        self.builds = BuildMemo(cache, tree_key(snapshot, binary) if cache is not None else None)
        self.finished = FinishMemo(cache, memo)
        work = Path(tempfile.mkdtemp(prefix="overlays-", dir=snapshot.root.parent))
        self.builder = TierBuilder(snapshot, binary, work, self.builds, timeout=timeout, max_objects=limits.tier_objects)
        self.locator = Locator(LineMemo(snapshot, memo.heads))
        self._ahead: dict[str, Future[RawTier]] = {}  # builds started before the render asks (`build_ahead`)
        self._ahead_lock = threading.Lock()
        self._config_digest: str | None = None

    @property
    def builds_run(self) -> int:
        """kustomize builds this renderer actually ran (the rest came from a memo)."""
        return self.builder.builds_run

    def locate(self, manifest: Manifest | ObjectStub) -> SourceLocation | None:
        """The `file:line` of the document that produced an object (found on demand)."""
        return self.locator.locate(manifest)

    def sanitise(self, message: str, workdir: Path | None = None) -> str:
        """Make kustomize's message postable (see TierBuilder.sanitise)."""
        return self.builder.sanitise(message, workdir)

    # -- one tier -------------------------------------------------------------------------------

    def build_tier(self, spec: TierSpec) -> RawTier:
        """kustomize build of one tier's path plus its Flux overlay (memoised by what the build reads from the spec)."""
        hit = self.known_build(spec)
        if hit is not None:
            return hit
        key = build_key(spec)
        with self._ahead_lock:
            ahead = self._ahead.pop(key, None)
        raw = ahead.result() if ahead is not None else None
        if raw is None or raw.failed:  # a failure built for another spec would point at that spec: build again
            raw = self.builder.build(spec)
        return self.builds.keep(key, raw).for_spec(spec)

    def build_ahead(self, specs: Sequence[TierSpec]) -> None:
        """Start building these tiers now, in the background (at most one per job); `build_tier` takes the results.

        A review starts the head's builds of the tiers its change touches before the base renders.
        """
        if not specs:
            return
        pool = ThreadPoolExecutor(max_workers=self.jobs, thread_name_prefix="ahead")
        for spec in specs[: self.jobs]:
            self._ahead.setdefault(build_key(spec), pool.submit(self.builder.build, spec))
        pool.shutdown(wait=False)  # its threads end with these builds

    def settle(self) -> None:
        """Cancel the builds started ahead that nobody took, and wait for the running ones (before the work dir goes)."""
        with self._ahead_lock:
            ahead, self._ahead = list(self._ahead.values()), {}
        for future in ahead:
            future.cancel()
        wait(ahead)

    def reuse(self, prior: PriorBuilds) -> None:
        """Take the other side's builds of tiers no changed path touches (see PriorBuilds)."""
        self.prior = prior if not self.snapshot.has_symlinks else None

    def tree_builds(self) -> list[TreeBuild]:
        """This commit's builds as its tree memo knows them (empty for a working tree or a commit not seen before)."""
        return self.builds.tree_builds()

    def built(self, key: str) -> RawTier | None:
        """This commit's build for a build key (see `build_key`): made by this renderer, or in its tree memo."""
        return self.builds.built(key)

    def known_build(self, spec: TierSpec) -> RawTier | None:
        """This renderer's build for the spec's build key, or the other side's when it is reusable (no I/O)."""
        key = build_key(spec)
        hit = self.builds.get(key)
        if hit is None and self.prior is not None:
            hit = self.prior.reusable(key)
            if hit is not None:
                hit = self.builds.keep(key, hit)
        return hit.for_spec(spec) if hit is not None else None

    def child_specs(self, tier: RenderedTier, entry: str, findings: list[Finding]) -> list[TierSpec]:
        """The Kustomizations a finished tier applies (`child_specs`), from the cache when the same tier was followed before.

        Locating each in its file reads and parses that file: for an entry tier of hundreds of Kustomizations, most of a warm render.
        """
        if not tier.flux_kustomizations():
            return []
        if self._config_digest is None:
            self._config_digest = self.config.digest()
        key = children_key(self.snapshot, self._config_digest, tier, entry) if self.cache is not None else None
        hit = self.cache.get(key) if self.cache is not None and key is not None else None
        if isinstance(hit, tuple) and len(hit) == 2:
            findings.extend(hit[1])
            return list(hit[0])
        found: list[Finding] = []
        specs = child_specs(tier, entry, self.config, self.locate, found)
        findings.extend(found)
        if self.cache is not None and key is not None:
            self.cache.put(key, (tuple(specs), tuple(found)))
        return specs

    # -- a whole cluster ------------------------------------------------------------------------

    def render_cluster(
        self, cluster: str, entry: str, *, graph_only: bool = False, on_finished: Callable[[RenderedTier], object] | None = None
    ) -> ClusterRender:
        """Render the entry path and follow every Kustomization on this repository, to any depth.

        The entry tier is the cluster's own sync Kustomization when git holds it (`flux bootstrap`'s
        gotk-sync in the entry path, or a FluxInstance's `spec.sync`), else the one `flux bootstrap`
        would create. `graph_only` keeps only the Flux Kustomizations of each tier (and the objects
        that define sources and the sync). `on_finished` is called with each finished tier while
        other tiers may still be building.
        """
        # Not with a live cluster: what it holds changes between runs.
        key = render_key(self.snapshot, self.config, self.binary.version, cluster, entry, graph_only) if self.cache is not None and self.live_config is None else None
        if key is not None:
            remembered = self.finished.get_render(key, cluster, entry, self.snapshot)
            if remembered is not None:
                return remembered
        settings = cluster_settings(self.snapshot, self.config, cluster, entry)  # (from the snapshot and its configuration: the key covers it)

        def run(entry_spec: TierSpec, last: bool) -> PassResult:
            with ThreadPoolExecutor(max_workers=self.jobs, thread_name_prefix="render") as pool:
                return ClusterPass(
                    self.snapshot, self.config, entry, entry_spec, _PoolBuilds(self, pool, graph_only),
                    locate=self.locate, patch=self.builder.patched_sync, settings=settings, graph_only=graph_only, limits=self.limits,
                    children=self.child_specs, store=self.finished, live_config=self.live_config,
                    output_bytes=lambda: self.builder.output_bytes, interrupt=check_stop, on_finished=self._finished_hook(graph_only, on_finished),
                ).run(last=last)

        result = settle_entry(entry_tier(entry), run)
        self.builds.save()
        if key is not None and not any(t.failed for t in result.tiers.values()):  # a failure may be a timeout
            self.finished.put_render(key, result.tiers, result.finish_findings, result.findings)
        return ClusterRender(cluster, entry, result.tiers, tuple(result.findings), self.snapshot)

    def _finished_hook(self, graph_only: bool, on_finished: Callable[[RenderedTier], object] | None) -> Callable[[RenderedTier], object] | None:
        """What a pass calls with each finished tier: the caller's hook, then the progress count (not for a graph)."""
        progress = self.progress if not graph_only else None
        if progress is None:
            return on_finished

        def finished(tier: RenderedTier) -> None:
            if on_finished is not None:
                on_finished(tier)
            progress.tier_done()

        return finished


class _PoolBuilds:
    """A pass's builds in the renderer's thread pool; a memoised or reused one arrives without a thread."""

    def __init__(self, renderer: Renderer, pool: ThreadPoolExecutor, graph_only: bool) -> None:
        self.renderer, self.pool = renderer, pool
        self.progress = renderer.progress if not graph_only else None
        # Builds report through a queue: waiting on a set of futures costs a pass over all of them
        # each time, and a commit seen before schedules hundreds of tiers that are ready at once.
        self.done: queue.SimpleQueue[Future[RawTier]] = queue.SimpleQueue()

    def start(self, spec: TierSpec) -> None:
        """Build a tier in the pool, or take the build known already (no I/O, no thread)."""
        if self.progress is not None:
            self.progress.tier_known()
        known = self.renderer.known_build(spec)
        if known is not None:
            future: Future[RawTier] = Future()
            future.set_result(known)
            self.done.put(future)
        else:
            self.pool.submit(self._build, spec).add_done_callback(self.done.put)

    def _build(self, spec: TierSpec) -> RawTier:
        check_stop()  # a build queued before shutdown began does not start
        return self.renderer.build_tier(spec)

    def arrived(self) -> list[RawTier]:
        """Wait for a build, then take whatever else is ready."""
        arrived = [self.done.get()]
        while True:
            try:
                arrived.append(self.done.get_nowait())
            except queue.Empty:
                break
        return [future.result() for future in arrived]
