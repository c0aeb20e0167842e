"""Render a cluster the way kustomize-controller would: entry path, then every Kustomization on this repo.

The scheduling half: tiers build in a thread pool (bot/pipeline/build.py), are finished as their
substituteFrom sources arrive (bot/engine/finish.py), and their children are discovered
(bot/engine/discovery.py); every memo is bot/pipeline/memo.py's. A `Session` opens renderers.
"""

from __future__ import annotations

import os
import posixpath
import queue
import tempfile
import threading
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Mapping, NamedTuple, Sequence

from bot.adapters.cache import BuildCache
from bot.adapters.kustomize import KustomizeBinary
from bot.adapters.memory import check_stop
from bot.adapters.workspace import Snapshot
from bot.engine.artifacts import Artifact, Placement, generated_artifacts, is_artifact_generator, place
from bot.engine.config import CONFIG_FILE, RepoConfig
from bot.engine.discovery import RenderLimits, bootstrap_spec, child_specs, in_repo, operator_entry, within_artifact
from bot.engine.facts import ObjectStub
from bot.engine.clusterobjects import MAX_LIVE_SOURCES, ClusterObject, ConfigFetcher, ConfigKey, declared_objects
from bot.engine.finish import finish_key, finish_tier, missing_sources, sources_present, tier_variables, with_injected
from bot.engine.fluxversion import FluxVersion, cluster_flux_version, empty_kustomization_fails, strict_substitution
from bot.engine.flux import entry_tier
from bot.engine.remote import RemoteBasesRefused, no_remote_bases, remote_finding
from bot.engine.model import Finding, Manifest, Severity, SourceLocation, SubstituteFrom, TierId, TierSpec
from bot.engine.rendered import (
    ClusterRender, RawDocument, RawTier, RenderedTier, SourceIndex, build_key, is_discovery_object, redefined, render_failed, same_tier,
)
from bot.engine.resourceset import expand as expand_resourcesets, is_input_provider, is_resourceset
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

    def finish(
        self, raw: RawTier, objects: SourceIndex, graph_only: bool = False, injected: tuple[SubstituteFrom, ...] = (),
        external: dict[ConfigKey, ClusterObject] | None = None, strict: bool | None = None,
    ) -> tuple[RenderedTier, list[Finding]]:
        """postBuild substitution and commonMetadata for one built tier, from the finish memo when it was done before.

        `external`: the ConfigMaps and Secrets only the cluster has; `strict`: None, as `.fluxwarden.yaml` says."""
        spec = with_injected(raw.spec, injected)
        raw = raw if spec is raw.spec else replace(raw, spec=spec)
        if raw.failed and not raw.documents:
            return RenderedTier(spec=spec, failed=True, inputs=raw.inputs), []
        variables = tier_variables(spec, objects, external)
        # A graph needs a build's Flux Kustomizations only: without one there is nothing to finish, or to cache.
        strict = self.config.strict_substitution if strict is None else strict
        key = None if graph_only and not raw.document_index.kustomizations else finish_key(raw, variables, graph_only, strict)
        remembered = self.finished.get(key)
        if remembered is not None:
            rendered, memo_findings = remembered
            return replace(rendered, spec=spec, inputs=raw.inputs), list(memo_findings)
        root = self.snapshot.real_path(spec.path) or spec.path  # where kustomize built it (origins are relative to it)
        rendered, findings = finish_tier(raw, variables, root=root, strict=strict, graph_only=graph_only, key=key)
        if key is not None:
            self.finished.put(key, rendered, findings)
        return rendered, findings

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
        entry_spec = entry_tier(entry)
        declared = declared_objects(self.snapshot, self.config.cluster_objects.get(cluster, ()))
        config = self.config
        setting = config.strict_setting if config.strict_setting is not None else (True if config.strict_substitution else None)
        # (From the snapshot and its configuration: the render key above covers it.)
        flux = cluster_flux_version(self.snapshot, entry, config.flux_versions.get(cluster))
        strict = strict_substitution(setting, flux)
        refused = no_remote_bases(self.snapshot, entry)
        for attempt in range(3):  # the spec found in git renders the same again, or once more (it may substitute itself)
            run = _ClusterPass(
                self, entry, entry_spec, graph_only, on_finished, self.config.cluster_substitutes.get(cluster, ()), declared, strict, flux, refused,
            ).run(last=attempt == 2)
            if run.better_entry is None:
                break
            entry_spec = run.better_entry
        self.builds.save()
        if key is not None and not any(t.failed for t in run.tiers.values()):  # a failure may be a timeout
            self.finished.put_render(key, run.tiers, run.finish_findings, run.findings)
        return ClusterRender(cluster, entry, run.tiers, tuple(run.findings), self.snapshot)


class _PassResult(NamedTuple):
    """One pass of `render_cluster`: its tiers and findings, or the better entry spec it stopped for."""

    tiers: dict[TierId, RenderedTier]
    finish_findings: dict[TierId, list[Finding]]
    findings: list[Finding]
    better_entry: TierSpec | None


class _StopForEntry(Exception):
    """The entry tier's own Kustomization says how it is built: the pass starts again with it."""

    def __init__(self, spec: TierSpec) -> None:
        self.spec = spec


class _ClusterPass:
    """One pass over a cluster from an entry spec: schedule builds, finish tiers as their sources arrive, follow children."""

    def __init__(
        self, renderer: Renderer, entry: str, entry_spec: TierSpec, graph_only: bool, on_finished: Callable[[RenderedTier], object] | None,
        injected: tuple[SubstituteFrom, ...] = (),
        declared: dict[ConfigKey, ClusterObject] | None = None,
        strict: bool = False,
        flux: FluxVersion | None = None,
        refused: RemoteBasesRefused | None = None,
    ) -> None:
        self.renderer, self.entry, self.entry_spec = renderer, entry, entry_spec
        self.refused = refused  # the cluster's kustomize-controller refuses remote bases (None: it fetches them, the default)
        self.strict = strict  # strict substitution: `.fluxwarden.yaml`, else the cluster's Flux version
        self.flux = flux  # the cluster's Flux release (None: unknown), where its builds differ by version
        # The ConfigMaps/Secrets only the cluster has: declared (`clusters.<name>.cluster_objects`), then what the
        # live cluster answered (found or absent) over them; a failed read leaves a declared one in place.
        self.external: dict[ConfigKey, ClusterObject] = dict(declared or {})
        self.asked: set[ConfigKey] = set()  # read live already (answered or not)
        self.injected = injected  # `clusters.<name>.substitute_from`: what the cluster substitutes into every tier
        self.graph_only, self.on_finished = graph_only, on_finished
        self.findings: list[Finding] = []
        self.tiers: dict[TierId, RenderedTier] = {}
        self.finish_findings: dict[TierId, list[Finding]] = {}
        self.built: dict[TierId, RawTier] = {}
        self.objects: dict[tuple[str, str, str], tuple[Sequence[RawDocument], int]] = {}
        self.artifacts: dict[tuple[str, str], Artifact] = {}  # (namespace, name) → what an ArtifactGenerator in git makes
        self.placed: dict[TierId, tuple[Artifact, Placement]] = {}
        self.waiting: list[TierSpec] = []  # ExternalArtifact tiers whose generator has not been rendered yet
        self.scheduled: dict[TierId, TierSpec] = {entry_spec.id: entry_spec}
        # Each tier's chain of applying Kustomizations, entry first (for RenderLimits).
        self.lineage: dict[TierId, tuple[TierSpec, ...]] = {entry_spec.id: (entry_spec,)}
        self.rendered_objects = 0
        # The ResourceSetInputProviders of the tiers finished so far: a ResourceSet reads those of its namespace.
        self.providers: list[Manifest] = []
        # Builds report through a queue: waiting on a set of futures costs a pass over all of them
        # each time, and a commit seen before schedules hundreds of tiers that are ready at once.
        self.done: queue.SimpleQueue[Future[RawTier]] = queue.SimpleQueue()
        self.outstanding = 0
        self.pool: ThreadPoolExecutor | None = None

    def run(self, *, last: bool) -> _PassResult:
        """The pass; unless `last`, it stops early when the entry tier shows a better entry spec, or returns one a FluxInstance shows."""
        renderer = self.renderer
        try:
            with ThreadPoolExecutor(max_workers=renderer.jobs, thread_name_prefix="render") as self.pool:
                self._schedule(self.entry_spec)
                while self.outstanding or self.built or self.waiting:
                    check_stop()  # shutting down: no more tiers are finished or scheduled
                    if not (self.outstanding or self.built):  # only tiers on artifacts no tier in git generates
                        for spec in self.waiting:
                            self._not_rendered(spec, f"{spec.id} applies {spec.source}, which no ArtifactGenerator in git produces; its content is not rendered")
                        self.waiting = []
                        break
                    self._take_arrived()
                    self._finish_ready(last)
        except _StopForEntry as stop:
            return _PassResult({}, {}, [], stop.spec)
        better = None
        if self.entry_spec.origin is None and not last:
            better = operator_entry(
                self.tiers, self.entry, self.entry_spec, self.findings, renderer.config, renderer.locate, renderer.builder.patched_sync,
                self._config_map,
            )
        return _PassResult(self.tiers, self.finish_findings, self.findings, better)

    def _config_map(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        """A ConfigMap the cluster's builds hold (for a flux-instance release's valuesFrom)."""
        found = self.objects.get(("ConfigMap", namespace, name))
        return found[0][found[1]].body if found is not None else None

    def _not_rendered(self, spec: TierSpec, message: str) -> None:
        self.tiers[spec.id] = RenderedTier(spec=spec)
        self.findings.append(Finding("not-rendered", Severity.INFO, message, kustomization=spec.id, location=spec.origin))

    def _schedule(self, spec: TierSpec) -> None:
        self.outstanding += 1
        if self.renderer.progress is not None and not self.graph_only:
            self.renderer.progress.tier_known()
        known = self.renderer.known_build(spec)
        if known is not None:  # memoised or reused: no I/O, no thread
            future: Future[RawTier] = Future()
            future.set_result(known)
            self.done.put(future)
        else:
            assert self.pool is not None
            self.pool.submit(self._build, spec).add_done_callback(self.done.put)

    def _build(self, spec: TierSpec) -> RawTier:
        check_stop()  # a build queued before shutdown began does not start
        return self.renderer.build_tier(spec)

    def _admit(self, spec: TierSpec) -> bool:
        """Schedule a discovered tier, or say why its content is not rendered; False: its artifact is not known yet."""
        if spec.source.kind == "ExternalArtifact":
            artifact = self.artifacts.get((spec.source.namespace, spec.source.name))
            if artifact is None:
                return False
            placement = place(artifact, spec.path)
            if isinstance(placement, str):
                self._not_rendered(spec, f"{spec.id} applies {spec.source}: {placement}; its content is not rendered")
                return True
            self.placed[spec.id] = (artifact, placement)
            self._schedule(replace(spec, path=placement.path, source_path=spec.path))
        elif self.renderer.config.is_this_repo(spec.source):
            self._schedule(in_repo(spec, self.renderer.config))
        else:
            self._not_rendered(spec, f"{spec.id} applies {spec.source}, not this repository; its content is not rendered")
        return True

    def _take_arrived(self) -> None:
        """Wait for a build (when any is outstanding), take whatever else is ready, index their ConfigMaps and Secrets."""
        arrived = [self.done.get()] if self.outstanding else []
        while True:
            try:
                arrived.append(self.done.get_nowait())
            except queue.Empty:
                break
        self.outstanding -= len(arrived)
        for future in arrived:
            raw = future.result()
            if raw.empty is not None and not raw.failed and (why := empty_kustomization_fails(raw.empty.file, raw.empty.generated, self.flux)):
                location = raw.spec.origin if raw.empty.generated else SourceLocation(raw.empty.file)
                raw = RawTier(raw.spec, inputs=raw.inputs, failed=True, findings=(render_failed(raw.spec.id, why, location),))
            if raw.remote and not raw.failed:
                remote = remote_finding(raw.spec, raw.remote, self.refused)
                if remote.severity is Severity.ERROR:
                    raw = RawTier(raw.spec, inputs=raw.inputs, failed=True)
                raw = replace(raw, findings=(*raw.findings, remote))
            if raw.spec.id in self.placed and not raw.failed:
                raw, why = within_artifact(raw, *self.placed[raw.spec.id])
                if why is not None:
                    self._not_rendered(raw.spec, why)
                    continue
            self.built[raw.spec.id] = raw
            self.findings.extend(raw.findings)
            for key, position in raw.document_index.config.items():
                self.objects.setdefault(key, (raw.documents, position))

    def _read_live(self) -> None:
        """Read from the live cluster, in one batch, the substituteFrom sources no build holds of every tier waiting to finish."""
        reader = self.renderer.live_config
        if reader is None or self.outstanding:
            return
        wanted: dict[ConfigKey, None] = {}
        for raw in self.built.values():
            wanted.update(dict.fromkeys(k for k in missing_sources(with_injected(raw.spec, self.injected), self.objects) if k not in self.asked))
        if not wanted:
            return
        budget = max(0, MAX_LIVE_SOURCES - len(self.asked))
        keys = list(wanted)
        self.asked.update(keys)
        for key in keys[budget:]:
            if key not in self.external:
                self.external[key] = ClusterObject(*key, error=f"not read: more than {MAX_LIVE_SOURCES} substituteFrom sources outside git")
        for found in reader(keys[:budget]):
            if found.error is None or found.key not in self.external:
                self.external[found.key] = found

    def _finish_ready(self, last: bool) -> None:
        """Finish every built tier whose substituteFrom sources are known (or can no longer arrive), then follow its children."""
        renderer = self.renderer
        self._read_live()
        for tid in list(self.built):
            raw = self.built[tid]
            if self.outstanding and not sources_present(with_injected(raw.spec, self.injected), self.objects):
                continue  # its substituteFrom may be rendered by a tier still building
            check_stop()
            del self.built[tid]
            rendered, tier_findings = renderer.finish(raw, self.objects, self.graph_only, self.injected, self.external, self.strict)
            rendered, tier_findings = self._with_resourcesets(rendered, tier_findings)
            if tid == self.entry_spec.id:
                own = bootstrap_spec(rendered, self.entry, renderer.config, renderer.locate)
                if own is not None and not same_tier(own, self.entry_spec) and not last:
                    raise _StopForEntry(own)
                if own is not None and same_tier(own, self.entry_spec):
                    self.entry_spec = own
                    rendered = replace(rendered, spec=own)
            self.tiers[tid] = rendered
            self.rendered_objects += len(rendered.manifests)
            self.finish_findings[tid] = tier_findings
            if self.on_finished is not None:
                self.on_finished(rendered)
            if renderer.progress is not None and not self.graph_only:
                renderer.progress.tier_done()
            self.findings.extend(tier_findings)
            self._follow(tid, rendered)

    def _with_resourcesets(self, rendered: RenderedTier, findings: list[Finding]) -> tuple[RenderedTier, list[Finding]]:
        """The tier with what its ResourceSets create, as if it applied them: the Flux Operator applies them
        once the ResourceSet is applied, so for the checks they belong to this tier (its Kustomizations are
        its children). A provider in a tier finished later is not seen (the operator would wait for it)."""
        discovered = rendered.discovery_objects()
        self.providers += [m for m in discovered if is_input_provider(m)]
        if not any(is_resourceset(m) for m in discovered):
            return rendered, findings
        created, more = expand_resourcesets(discovered, self.providers, rendered.spec.id)
        self.providers += [m for m in created if is_input_provider(m)]
        if not created and not more:
            return rendered, findings
        discovery = None if rendered.discovery is None else (*rendered.discovery, *(m for m in created if is_discovery_object(m)))
        return replace(rendered, manifests=(*rendered.manifests, *created), discovery=discovery), [*findings, *more]

    def _follow(self, tid: TierId, rendered: RenderedTier) -> None:
        """Learn a finished tier's artifacts and schedule the Kustomizations it applies (within the limits)."""
        renderer = self.renderer
        new_artifacts = False
        for manifest in rendered.discovery_objects():
            if is_artifact_generator(manifest):
                for key, artifact in generated_artifacts(manifest, renderer.config.is_this_repo, renderer.snapshot).items():
                    new_artifacts |= self.artifacts.setdefault(key, artifact) is artifact
        for spec in renderer.child_specs(rendered, self.entry, self.findings):
            if spec.id in self.scheduled:
                # A Kustomization whose path holds its own file applies itself again: one definition.
                if not same_tier(self.scheduled[spec.id], spec) and spec.id != self.entry_spec.id:
                    self.findings.append(render_failed(spec.id, redefined(self.scheduled[spec.id], spec), spec.origin, Severity.WARNING))
                continue
            chain = (*self.lineage.get(tid, (rendered.spec,)), spec)
            beyond = renderer.limits.beyond(chain, len(self.scheduled), self.rendered_objects, renderer.builder.output_bytes)
            if beyond is not None:
                self.tiers[spec.id] = RenderedTier(spec=spec, failed=True)  # failed: the render is not cached
                self.findings.append(Finding("render-limit", Severity.ERROR, beyond, kustomization=spec.id, location=spec.origin))
                continue
            self.scheduled[spec.id] = spec
            self.lineage[spec.id] = chain
            if rendered.spec.kube_config is not None:
                # Applied to another cluster as an object: that cluster's Flux reconciles it, with its sources.
                self._not_rendered(
                    replace(spec, kube_config=rendered.spec.kube_config),
                    f"{spec.id} is applied by {tid} to the cluster of {rendered.spec.kube_config}; it is reconciled there, not rendered here",
                )
            elif not self._admit(spec):
                self.waiting.append(spec)
        if new_artifacts:
            self.waiting = [spec for spec in self.waiting if not self._admit(spec)]
