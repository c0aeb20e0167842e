"""One pass over a cluster from its entry spec: finish each built tier once its substituteFrom sources are known,
follow the Kustomizations it applies within the limits, and find the entry's own spec (pure: where and when
tiers build is `Builds`, passed in; bot/pipeline/renderer.py builds in a thread pool, tests/engine/builders.py in memory).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable, Mapping, NamedTuple, Protocol, Sequence

from bot.engine.render.artifacts import Artifact, Placement, generated_artifacts, is_artifact_generator, place
from bot.engine.render.clusterobjects import MAX_LIVE_SOURCES, ClusterObject, ConfigFetcher, ConfigKey, declared_objects
from bot.engine.render.config import RepoConfig
from bot.engine.render.discovery import Locate, PatchSync, RenderLimits, bootstrap_spec, child_specs, in_repo, operator_entry, within_artifact
from bot.engine.render.finish import FinishStore, finish_built, missing_sources, sources_present, with_injected
from bot.engine.render.fluxversion import FluxVersion, cluster_flux_version, empty_kustomization_fails, strict_substitution
from bot.engine.core.model import Finding, Manifest, Severity, SourceLocation, SubstituteFrom, TierId, TierSpec
from bot.engine.render.remote import RemoteBasesRefused, no_remote_bases, remote_finding
from bot.engine.render.rendered import RawDocument, RawTier, RenderedTier, is_discovery_object, redefined, render_failed, same_tier
from bot.engine.render.resourceset import expand as expand_resourcesets, is_input_provider, is_resourceset
from bot.engine.core.tree import RepoTree

# The Kustomizations a finished tier applies: (tier, entry, findings) → specs (`child_specs`, or a memo of it).
Children = Callable[[RenderedTier, str, list[Finding]], list[TierSpec]]


class Builds(Protocol):
    """Where a pass's tiers build: started as they are discovered, taken as they arrive."""

    def start(self, spec: TierSpec) -> None:
        """Build this tier (now, or when `arrived` is next called)."""

    def arrived(self) -> Sequence[RawTier]:
        """At least one build started and not taken yet (waiting for one), and every other one ready."""


@dataclass(frozen=True)
class ClusterSettings:
    """What a cluster's render takes from `.fluxwarden.yaml` and the tree besides its entry."""

    injected: tuple[SubstituteFrom, ...] = ()  # `clusters.<name>.substitute_from`: substituted into every tier
    declared: Mapping[ConfigKey, ClusterObject] | None = None  # `clusters.<name>.cluster_objects`: what only the cluster has
    strict: bool = False  # strict substitution: `.fluxwarden.yaml`, else the cluster's Flux version
    flux: FluxVersion | None = None  # the cluster's Flux release (None: unknown), where its builds differ by version
    refused: RemoteBasesRefused | None = None  # its kustomize-controller refuses remote bases (None: it fetches them, the default)


def cluster_settings(tree: RepoTree, config: RepoConfig, cluster: str, entry: str) -> ClusterSettings:
    """The settings of one cluster whose entry path is `entry`."""
    setting = config.strict_setting if config.strict_setting is not None else (True if config.strict_substitution else None)
    flux = cluster_flux_version(tree, entry, config.flux_versions.get(cluster))
    return ClusterSettings(
        config.cluster_substitutes.get(cluster, ()), declared_objects(tree, config.cluster_objects.get(cluster, ())),
        strict_substitution(setting, flux), flux, no_remote_bases(tree, entry),
    )


class PassResult(NamedTuple):
    """One pass: its tiers and findings (those of finishing each tier too), or the better entry spec it stopped for."""

    tiers: dict[TierId, RenderedTier]
    finish_findings: dict[TierId, list[Finding]]
    findings: list[Finding]
    better_entry: TierSpec | None


def settle_entry(entry_spec: TierSpec, run: Callable[[TierSpec, bool], PassResult]) -> PassResult:
    """Passes from the entry spec until it is the one git holds: the spec found renders the same again, or once
    more (it may substitute itself); `run(spec, last)`."""
    for attempt in range(3):
        result = run(entry_spec, attempt == 2)
        if result.better_entry is None:
            break
        entry_spec = result.better_entry
    return result


class _StopForEntry(Exception):
    """The entry tier's own Kustomization says how it is built: the pass starts again with it."""

    def __init__(self, spec: TierSpec) -> None:
        self.spec = spec


def _no_interrupt() -> None:
    return None


class ClusterPass:
    """One pass over a cluster from an entry spec: schedule builds, finish tiers as their sources arrive, follow children."""

    def __init__(
        self, tree: RepoTree, config: RepoConfig, entry: str, entry_spec: TierSpec, builds: Builds, *,
        locate: Locate, patch: PatchSync, settings: ClusterSettings = ClusterSettings(), graph_only: bool = False,
        limits: RenderLimits = RenderLimits(), children: Children | None = None, store: FinishStore | None = None,
        live_config: ConfigFetcher | None = None, output_bytes: Callable[[], int] = lambda: 0,
        interrupt: Callable[[], None] = _no_interrupt, on_finished: Callable[[RenderedTier], object] | None = None,
    ) -> None:
        self.tree, self.config, self.entry, self.entry_spec, self.builds = tree, config, entry, entry_spec, builds
        self.locate, self.patch, self.limits, self.store = locate, patch, limits, store
        self.children: Children = children or (lambda tier, entry, found: child_specs(tier, entry, config, locate, found))
        # Reads the substituteFrom sources no build holds from the live cluster (None: not live; the declared file only).
        self.live_config = live_config
        self.output_bytes = output_bytes  # kustomize output so far (for RenderLimits)
        self.interrupt = interrupt  # raises when the process is shutting down: no more tiers are finished or scheduled
        self.strict, self.flux, self.injected = settings.strict, settings.flux, settings.injected
        self.refused = settings.refused  # the cluster's kustomize-controller refuses remote bases
        # The ConfigMaps/Secrets only the cluster has: declared, then what the live cluster answered (found or
        # absent) over them; a failed read leaves a declared one in place.
        self.external: dict[ConfigKey, ClusterObject] = dict(settings.declared or {})
        self.asked: set[ConfigKey] = set()  # read live already (answered or not)
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
        self.outstanding = 0  # builds started and not arrived

    def run(self, *, last: bool) -> PassResult:
        """The pass; unless `last`, it stops early when the entry tier shows a better entry spec, or returns one a FluxInstance shows."""
        try:
            self._schedule(self.entry_spec)
            while self.outstanding or self.built or self.waiting:
                self.interrupt()
                if not (self.outstanding or self.built):  # only tiers on artifacts no tier in git generates
                    for spec in self.waiting:
                        self._not_rendered(spec, f"{spec.id} applies {spec.source}, which no ArtifactGenerator in git produces; its content is not rendered")
                    self.waiting = []
                    break
                if self.outstanding:
                    self._take(self.builds.arrived())
                self._finish_ready(last)
        except _StopForEntry as stop:
            return PassResult({}, {}, [], stop.spec)
        better = None
        if self.entry_spec.origin is None and not last:
            better = operator_entry(self.tiers, self.entry, self.entry_spec, self.findings, self.config, self.locate, self.patch, self._config_map)
        return PassResult(self.tiers, self.finish_findings, self.findings, better)

    def _config_map(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        """A ConfigMap the cluster's builds hold (for a flux-instance release's valuesFrom)."""
        found = self.objects.get(("ConfigMap", namespace, name))
        return found[0][found[1]].body if found is not None else None

    def _not_rendered(self, spec: TierSpec, message: str) -> None:
        self.tiers[spec.id] = RenderedTier(spec=spec)
        self.findings.append(Finding("not-rendered", Severity.INFO, message, kustomization=spec.id, location=spec.origin))

    def _schedule(self, spec: TierSpec) -> None:
        self.outstanding += 1
        self.builds.start(spec)

    def _admit(self, spec: TierSpec) -> bool:
        """Schedule a discovered tier, or say why its content is not rendered; False: its artifact is not known yet."""
        if spec.source.kind == "ExternalArtifact":
            artifact = self.artifacts.get((spec.source.namespace, spec.source.name))
            if artifact is None:
                return False
            placement = place(artifact, spec.path, spec.components)
            if isinstance(placement, str):
                self._not_rendered(spec, f"{spec.id} applies {spec.source}: {placement}; its content is not rendered")
                return True
            self.placed[spec.id] = (artifact, placement)
            self._schedule(replace(spec, path=placement.path, source_path=spec.path))
        elif self.config.is_this_repo(spec.source):
            self._schedule(in_repo(spec, self.config))
        else:
            self._not_rendered(spec, f"{spec.id} applies {spec.source}, not this repository; its content is not rendered")
        return True

    def _take(self, arrived: Sequence[RawTier]) -> None:
        """Take arrived builds: the cluster's Flux version judges an empty kustomization, an artifact what a build
        reads; index their ConfigMaps and Secrets."""
        self.outstanding -= len(arrived)
        for raw in arrived:
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
        reader = self.live_config
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
        self._read_live()
        for tid in list(self.built):
            raw = self.built[tid]
            if self.outstanding and not sources_present(with_injected(raw.spec, self.injected), self.objects):
                continue  # its substituteFrom may be rendered by a tier still building
            self.interrupt()
            del self.built[tid]
            rendered, tier_findings = finish_built(
                raw, self.objects, self.tree, strict=self.strict, graph_only=self.graph_only, injected=self.injected,
                external=self.external, store=self.store,
            )
            rendered, tier_findings = self._with_resourcesets(rendered, tier_findings)
            if tid == self.entry_spec.id:
                own = bootstrap_spec(rendered, self.entry, self.config, self.locate)
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
        new_artifacts = False
        for manifest in rendered.discovery_objects():
            if is_artifact_generator(manifest):
                for key, artifact in generated_artifacts(manifest, self.config.source_root, self.tree).items():
                    new_artifacts |= self.artifacts.setdefault(key, artifact) is artifact
        for spec in self.children(rendered, self.entry, self.findings):
            if spec.id in self.scheduled:
                # A Kustomization whose path holds its own file applies itself again: one definition.
                if not same_tier(self.scheduled[spec.id], spec) and spec.id != self.entry_spec.id:
                    self.findings.append(render_failed(spec.id, redefined(self.scheduled[spec.id], spec), spec.origin, Severity.WARNING))
                continue
            chain = (*self.lineage.get(tid, (rendered.spec,)), spec)
            beyond = self.limits.beyond(chain, len(self.scheduled), self.rendered_objects, self.output_bytes())
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
