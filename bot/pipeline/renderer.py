"""Render a cluster the way kustomize-controller would: entry path, then every Kustomization on this repo."""

from __future__ import annotations

import base64
import hashlib
import binascii
import dataclasses
import itertools
import json
import threading
import os
import posixpath
import queue
import re
import tempfile
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, NamedTuple, Sequence

import yaml

from bot.engine import substitute as envsubst
from bot.engine.artifacts import Artifact, Placement, generated_artifacts, is_artifact_generator, place, unreadable
from bot.adapters.cache import BuildCache, ContentHasher, versioned_key
from bot.engine.config import CONFIG_FILE, RepoConfig
from bot.engine.errors import InputError, RenderError, SubstitutionError
from bot.engine.flux import (
    KUSTOMIZATION_GROUP, SUBSTITUTE_ANNOTATION, OperatorSync, TierSpecError, TierSpecShapeError, entry_tier, is_flux_kustomization, operator_sync, tier_spec,
)
from bot.engine.generate import _REMOTE as REMOTE_REFERENCE, KustomizationIndex
from bot.adapters.workspace import write_build_root
from bot.adapters.kustomize import KustomizeBinary, run_build
from bot.engine.model import Finding, Manifest, ObjectRef, Severity, SourceLocation, TierId, TierSpec, plural
from bot.adapters.workspace import Snapshot
from bot.engine.tree import normalise_repo_path
from bot.engine.yamlio import FastSafeLoader, check_aliases, document_heads, find_duplicate_key, split_documents

if TYPE_CHECKING:
    from bot.engine.facts import ObjectStub

ORIGIN_ANNOTATION = "config.kubernetes.io/origin"
# The owner labels kustomize-controller stamps on every object it applies (its API group + /name, /namespace).
OWNER_NAME_LABEL = f"{KUSTOMIZATION_GROUP}/name"
OWNER_NAMESPACE_LABEL = f"{KUSTOMIZATION_GROUP}/namespace"
_ORIGIN_PATH = re.compile(r"^(?:path|configuredIn): *(.+)$", re.MULTILINE)
_MAY_SUBSTITUTE = re.compile(r"\$\{|\$\$")
_CONFIG_KIND = re.compile(r"^kind: (?:ConfigMap|Secret)[ \t]*$", re.MULTILINE)
# What a graph-only render keeps of a build: Flux Kustomizations, and the ArtifactGenerators and
# FluxInstances that say where some of them read and how the entry is built.
_FLUX_KUSTOMIZATION = re.compile(
    r"^apiVersion: (?:kustomize\.toolkit\.fluxcd\.io/[^\n]*\n(?:[^\n]*\n)*?kind: Kustomization"
    r"|source\.extensions\.fluxcd\.io/[^\n]*\n(?:[^\n]*\n)*?kind: ArtifactGenerator"
    r"|fluxcd\.controlplane\.io/[^\n]*\n(?:[^\n]*\n)*?kind: FluxInstance)[ \t]*$",
    re.MULTILINE,
)
# Values that come from a Secret are never shown; they render as this marker instead.
# (No leading `*`: kustomize emits `${S}` unquoted, and `**…` would then parse as a YAML alias.)
SECRET_MASK = "<masked:{name}>"
_SUBSTITUTE_DISABLED = re.compile(rf"{re.escape(SUBSTITUTE_ANNOTATION)}: ['\"]?disabled")


@dataclass(frozen=True)
class RawDocument:
    """One object of kustomize's output, before substitution.

    `body` is None for a document that substitution may change: it is parsed once, after
    substitution, instead of twice (the YAML parse is most of the Python time of a render).
    """

    text: str
    body: Mapping[str, Any] | None
    origin: SourceLocation | None

    @property
    def substitution_disabled(self) -> bool:
        """`kustomize.toolkit.fluxcd.io/substitute: disabled` as a label or an annotation
        (fluxcd/pkg kustomize/kustomize_varsub.go SubstituteVariables)."""
        if not _SUBSTITUTE_DISABLED.search(self.text):
            return False
        body = self.body
        if body is None:
            try:
                body = yaml.load(self.text, Loader=FastSafeLoader)
            except yaml.YAMLError:
                return True  # (kustomize wrote it: it parses; the text says disabled)
        meta = body.get("metadata") if isinstance(body, dict) else None
        if not isinstance(meta, dict):
            return False
        return any(isinstance(m, dict) and m.get(SUBSTITUTE_ANNOTATION) == "disabled" for m in (meta.get("labels"), meta.get("annotations")))


class CachedDocuments(Sequence[RawDocument]):
    """A cached build's documents, unpickled only when a tier must really be finished again."""

    def __init__(self, cache: BuildCache, key: str) -> None:
        self._cache, self._key, self._docs = cache, key, None

    def _load(self) -> tuple[RawDocument, ...]:
        if self._docs is None:
            loaded = self._cache.get(self._key)
            if loaded is None:  # removed between the lookup and now: forget the entry, the next run rebuilds it
                self._cache.discard(self._key + "-index")
                raise InputError("a cached build disappeared while it was in use; run again")
            self._docs = tuple(loaded)
        return self._docs

    def __len__(self) -> int:
        return len(self._load())

    def __getitem__(self, index):  # type: ignore[no-untyped-def]
        return self._load()[index]

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self._load())


class StoredManifests(Sequence[Manifest]):
    """A cached finished tier's objects: counted and its discovery objects known (`kustomizations`, see
    `is_discovery_object`), the rest unpickled on first use."""

    def __init__(self, cache: BuildCache, finish_key: str, count: int, kustomizations: tuple[Manifest, ...]) -> None:
        self._cache, self._key, self._manifests = cache, finish_key, None
        self.count, self.kustomizations = count, kustomizations

    def _load(self) -> tuple[Manifest, ...]:
        if self._manifests is None:
            loaded = self._cache.get(f"finished-{self._key}-objects")
            if loaded is None:  # removed between the lookup and now: forget the summary, the next run finishes it again
                self._cache.discard(f"finished-{self._key}")
                raise InputError("a cached render disappeared while it was in use; run again")
            self._manifests = tuple(loaded)
        return self._manifests

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, index):  # type: ignore[no-untyped-def]
        return self._load()[index]

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self._load())


class DocumentIndex(NamedTuple):
    """Positions in a build's documents: ConfigMaps and Secrets by (kind, namespace, name), first wins;
    Flux Kustomizations (what a graph-only render keeps)."""

    config: Mapping[tuple[str, str, str], int]
    kustomizations: tuple[int, ...]

    @classmethod
    def of(cls, documents: Sequence[RawDocument]) -> "DocumentIndex":
        config: dict[tuple[str, str, str], int] = {}
        kustomizations = []
        for position, doc in enumerate(documents):
            if doc.body is not None and _CONFIG_KIND.search(doc.text):
                ref = _ref(doc.body)
                if ref and ref.kind in ("ConfigMap", "Secret"):
                    config.setdefault((ref.kind, ref.namespace, ref.name), position)
            if _FLUX_KUSTOMIZATION.search(doc.text):
                kustomizations.append(position)
        return cls(config, tuple(kustomizations))


@dataclass(frozen=True)
class RawTier:
    """kustomize's output for one tier, or why there is none."""

    spec: TierSpec
    documents: Sequence[RawDocument] = ()
    inputs: frozenset[str] = frozenset()
    findings: tuple[Finding, ...] = ()
    failed: bool = False
    content_key: str | None = None  # the build cache key: equal keys, equal output
    index: DocumentIndex | None = None  # see `document_index`; None: read the documents

    @property
    def document_index(self) -> DocumentIndex:
        """Where its ConfigMaps, Secrets and Flux Kustomizations are, known for a cached build without
        unpickling its documents: only a tier's actual substituteFrom sources are read, and a graph-only
        render skips builds with no Kustomization."""
        return self.index if self.index is not None else DocumentIndex.of(self.documents)


# (kind, namespace, name) → (documents of the build that has it, index there): looked up lazily.
SourceIndex = Mapping[tuple[str, str, str], tuple[Sequence[RawDocument], int]]


@dataclass(frozen=True)
class RenderedTier:
    """One tier after kustomize, postBuild substitution and commonMetadata."""

    spec: TierSpec
    manifests: Sequence[Manifest] = ()
    rendered: bool = False  # False: another source, unsafe input or a failed build
    failed: bool = False
    substituted: bool = False  # postBuild substitution ran (at least one variable loaded)
    variables_open: bool = False  # some substituteFrom source is not in git, so the set is not known
    variables: frozenset[str] = frozenset()
    undefined: Mapping[str, tuple[Manifest, ...]] = field(default_factory=dict)
    inputs: frozenset[str] = frozenset()  # repo paths the build read
    token_candidates: frozenset[int] | None = None  # indices of manifests whose text has `${`; None: unknown
    finish_key: str | None = None  # the finish cache key: equal keys, equal objects; None when not cacheable

    def flux_kustomizations(self) -> Sequence[Manifest]:
        """Its Flux Kustomizations (known without loading a cached tier's other objects)."""
        return [m for m in self.discovery_objects() if is_flux_kustomization(m)]

    def discovery_objects(self) -> Sequence[Manifest]:
        """Its Flux Kustomizations, ArtifactGenerators and FluxInstances (see `is_discovery_object`), known
        without loading a cached tier's other objects."""
        if isinstance(self.manifests, StoredManifests):
            return self.manifests.kustomizations
        return [m for m in self.manifests if is_discovery_object(m)]


@dataclass(frozen=True)
class ClusterRender:
    """Every tier of one cluster, in discovery order, and the findings rendering produced."""

    cluster: str
    entry: str
    tiers: Mapping[TierId, RenderedTier]
    findings: tuple[Finding, ...]
    snapshot: Snapshot

    def manifests(self) -> list[tuple[TierId, Manifest]]:
        """Every rendered object with the tier that applies it."""
        return [(tid, m) for tid, tier in self.tiers.items() for m in tier.manifests]


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
        return None if raw.inputs & _with_ancestors(self.changed) else raw

    def touched(self) -> list[TierSpec]:
        """The other side's tiers whose inputs a changed path touches, known before it renders when its
        commit was seen before (from its tree memo): the builds a review will need on this side."""
        if self._touches_everything():
            return []
        changed = _with_ancestors(self.changed)
        return [b.spec for b in self.renderer.tree_builds() if b.inputs & changed]


def _with_ancestors(paths: frozenset[str]) -> set[str]:
    out = {""}
    for path in paths:
        while path:
            out.add(path)
            path = posixpath.dirname(path)
    return out


@dataclass(frozen=True)
class RenderLimits:
    """How far one cluster render may go before it stops with a `render-limit` finding.

    Far past what real repositories need (250+ tiers, a few levels of nested Kustomizations, tens of
    thousands of objects), far short of what a PR that makes Flux create Kustomizations without end takes
    (`name: loop-${P}` at `path: ./loop` with `postBuild.substitute: {P: "${P}a"}` grows a new tier per
    generation): the checker must never spend its memory on one.
    """

    tiers: int = 2_000  # tiers per cluster
    depth: int = 32  # Kustomizations nested inside Kustomizations
    path_repeats: int = 2  # times one path may recur among a tier's ancestors (a new namespace re-applies once)
    objects: int = 200_000  # rendered objects per cluster
    output_bytes: int = 1 << 30  # kustomize output per renderer (both sides of nothing else)


class TreeBuild(NamedTuple):
    """What a commit's tree memo keeps of one build: what it read, its cache key, a spec that makes it,
    and its document index (see `RawTier.document_index`)."""

    inputs: frozenset[str]
    cache_key: str
    spec: TierSpec
    index: DocumentIndex


class Renderer:
    """Renders clusters of one snapshot; tiers build in parallel, bounded by cores."""

    def __init__(
        self,
        snapshot: Snapshot,
        config: RepoConfig,
        binary: KustomizeBinary,
        *,
        jobs: int | None = None,
        timeout: float = 120.0,
        cache: BuildCache | None = None,
        limits: RenderLimits = RenderLimits(),
        finish_memo: dict[str, Any] | None = None,
    ) -> None:
        self.snapshot = snapshot
        self.config = config
        self.binary = binary
        self.jobs = jobs or default_jobs()
        self.timeout = timeout
        self.limits = limits
        self.output_bytes = 0  # kustomize output read by this renderer (see RenderLimits.output_bytes)
        self.index = KustomizationIndex(snapshot)
        self.cache = cache
        self.hasher = ContentHasher(snapshot)
        self.builds_run = 0
        # Shared by the base and head renderers of a review: a tier whose build and variables are the
        # same on both sides is substituted and parsed once (finish key → (tier, findings); the
        # engine's FactsStore keeps its `facts-…` entries in the same dict).
        self.finish_memo = finish_memo
        self.prior: PriorBuilds | None = None  # see `reuse`
        self._work = Path(tempfile.mkdtemp(prefix="overlays-", dir=snapshot.root.parent))
        self._counter = itertools.count(1)
        self._locations: dict[str, tuple[list, dict[tuple[str, str], int]]] = {}  # file → (document heads, line by kind and name)
        # dev and prod usually apply the same paths with the same overlay: build each once.
        self._builds: dict[str, RawTier] = {}
        self._builds_lock = threading.Lock()
        # A commit's builds, by build key (see TreeBuild): a commit seen before skips reading its
        # kustomization files and hashing inputs (the tree id says the content is the same).
        self._tree_key: str | None = None
        self._tree_builds: dict[str, TreeBuild] = {}
        self._ahead: dict[str, Future[RawTier]] = {}  # builds started before the render asks (`build_ahead`)
        self._tree_dirty = False
        if cache is not None and snapshot.tree is not None:
            self._tree_key = "tree-" + versioned_key(binary.version, snapshot.tree.oid)
            self._tree_builds = cache.get(self._tree_key) or {}

    # -- one tier -------------------------------------------------------------------------------

    def build_tier(self, spec: TierSpec) -> RawTier:
        """kustomize build of one tier's path plus its Flux overlay (memoised by what the build reads from the spec)."""
        hit = self._known_build(spec)
        if hit is not None:
            return hit
        key = _build_key(spec)
        with self._builds_lock:
            ahead = self._ahead.pop(key, None)
        raw = ahead.result() if ahead is not None else None
        if raw is None or raw.failed:  # a failure built for another spec would point at that spec: build again
            raw = self._build_tier(spec)
        with self._builds_lock:
            raw = self._builds.setdefault(key, raw)
        return _for_spec(raw, spec)

    def build_ahead(self, specs: Sequence[TierSpec]) -> None:
        """Start building these tiers now, in the background (at most one per job); `build_tier` takes the results.

        A review starts the head's builds of the tiers its change touches before the base renders.
        """
        if not specs:
            return
        pool = ThreadPoolExecutor(max_workers=self.jobs, thread_name_prefix="ahead")
        for spec in specs[: self.jobs]:
            self._ahead.setdefault(_build_key(spec), pool.submit(self._build_tier, spec))
        pool.shutdown(wait=False)  # its threads end with these builds

    def settle(self) -> None:
        """Cancel the builds started ahead that nobody took, and wait for the running ones (before the work dir goes)."""
        with self._builds_lock:
            ahead, self._ahead = list(self._ahead.values()), {}
        for future in ahead:
            future.cancel()
        wait(ahead)

    def reuse(self, prior: PriorBuilds) -> None:
        """Take the other side's builds of tiers no changed path touches (see PriorBuilds)."""
        self.prior = prior if not self.snapshot.has_symlinks else None

    def tree_builds(self) -> list[TreeBuild]:
        """This commit's builds as its tree memo knows them (empty for a working tree or a commit not seen before)."""
        with self._builds_lock:
            return list(self._tree_builds.values())

    def _known_build(self, spec: TierSpec) -> RawTier | None:
        """This renderer's build for the spec's build key, or the other side's when it is reusable (no I/O)."""
        key = _build_key(spec)
        with self._builds_lock:
            hit = self._builds.get(key)
        if hit is None and self.prior is not None:
            hit = self.prior.reusable(key)
            if hit is not None:
                with self._builds_lock:
                    hit = self._builds.setdefault(key, hit)
        return _for_spec(hit, spec) if hit is not None else None

    def built(self, key: str) -> RawTier | None:
        """This commit's build for a build key (see `_build_key`): made by this renderer, or in its tree memo."""
        with self._builds_lock:
            raw = self._builds.get(key)
        return raw if raw is not None else self._tree_build(key)

    def _tree_build(self, key: str) -> RawTier | None:
        """The build the tree memo records for a build key, its documents left in the cache until needed."""
        known = self._tree_builds.get(key)
        if known is None or self.cache is None or not self.cache.contains(known.cache_key):
            return None
        documents = CachedDocuments(self.cache, known.cache_key)
        return RawTier(known.spec, documents=documents, inputs=known.inputs, content_key=known.cache_key, index=known.index)

    def _build_tier(self, spec: TierSpec) -> RawTier:
        """kustomize build of one tier's path, its kustomization rewritten with the spec; never raises for bad input."""
        tier = spec.id
        # The controller builds at the path without symlinks (securejoin), and kustomize loads every
        # kustomization there: relative paths count from where a directory really is.
        root = self.snapshot.real_path(spec.path)
        if root is None:
            return RawTier(spec, failed=True, findings=(_unsafe(tier, f"path {spec.path!r} resolves through a symlink to outside the repository", spec.origin),))
        if not self.snapshot.is_dir(root):
            return RawTier(spec, failed=True, findings=(_failed(tier, f"path {spec.path or '.'!r} not found in the repository", spec.origin),))
        components: list[str] = []  # as written, for the kustomization file
        component_paths: list[str] = []  # joined to the path, as kustomize joins them
        component_dirs: list[str] = []  # where they are, for the pre-scan
        missing: set[str] = set()  # skipped components: the build changes when one appears
        for comp in spec.components:
            if posixpath.isabs(comp.strip()) or REMOTE_REFERENCE.search(comp):
                # fluxcd/pkg kustomize_generator.go: "component path must be local and relative".
                return RawTier(spec, failed=True, findings=(_unsafe(tier, f"component {comp!r} is not a path inside the repository", spec.origin),))
            normal = normalise_repo_path(posixpath.join(root, comp))
            if normal is None:
                return RawTier(spec, failed=True, findings=(_unsafe(tier, f"component {comp!r} climbs out of the repository", spec.origin),))
            real = self.snapshot.real_path(normal)
            if real is None:
                return RawTier(spec, failed=True, findings=(_unsafe(tier, f"component {comp!r} resolves through a symlink to outside the repository", spec.origin),))
            if not self.snapshot.exists(real):
                if spec.ignore_missing_components:
                    missing.add(real)
                    continue  # GenerateManifest skips it
                return RawTier(
                    spec,
                    failed=True,
                    findings=(_failed(tier, f"component {comp!r} not found ({normal or '.'}); without spec.ignoreMissingComponents the build fails", spec.origin),),
                )
            components.append(comp)
            component_paths.append(normal)
            component_dirs.append(real)
        known = self._tree_build(_build_key(spec))
        if known is not None:
            return _for_spec(known, spec)
        dirs, files, problems = self.index.reach(root, component_dirs, aliases=False)
        inputs = frozenset(dirs | files | missing)
        generated = {d for d in dirs if self.index.is_generated(d)}
        reached = _with_ancestors(inputs)
        refused = [r for r in self.snapshot.refused if r.path in reached or _under_any(r.path, generated)]
        cache_key = None
        if self.cache is not None and not (problems or refused):
            cache_key = self.hasher.key([self.binary.version, _build_key(spec)], inputs)
            cached = self._cached_build(spec, inputs, cache_key)
            if cached is not None:
                # Only a build that passed every check below is cached: this content was checked already.
                self._record_tree_build(cached)
                return cached
        problems += self.index.alias_problems(files)
        if problems or refused:
            findings = [
                (_failed if p.check == "render-failed" else _unsafe)(tier, f"{p.file}: {p.reference + ' ' if p.reference else ''}{p.reason}", SourceLocation(p.file))
                for p in problems
            ] + [_unsafe(tier, f"{r.path} {r.reason}", SourceLocation(r.path)) for r in refused]
            return RawTier(spec, inputs=inputs, failed=True, findings=tuple(findings))
        try:
            self.snapshot.materialize(dirs, files)
        except OSError as exc:  # e.g. a path too long for this filesystem
            return RawTier(spec, inputs=inputs, failed=True, findings=(_failed(tier, f"the tier's files cannot be written for kustomize ({exc.strerror})", spec.origin),))
        workdir = self._work / f"{next(self._counter):05d}"
        try:
            reached = [*self.index.info(root).references, *component_paths]
            build_dir = write_build_root(self.snapshot, spec, root, components, reached, workdir)
        except InputError as exc:
            location = SourceLocation(kustomization_path) if (kustomization_path := self.index.info(root).file) else spec.origin
            return RawTier(spec, inputs=inputs, failed=True, findings=(_failed(tier, str(exc), location),))
        except OSError as exc:
            return RawTier(spec, inputs=inputs, failed=True, findings=(_failed(tier, f"the tier's files cannot be written for kustomize ({exc.strerror})", spec.origin),))
        try:
            text = run_build(self.binary, build_dir, sandbox_home=self._work / "home", timeout=self.timeout)
        except RenderError as exc:
            message, location = self.sanitise(str(exc), workdir), spec.origin
            repeated = find_duplicate_key(message, files, self.snapshot.read_text)  # kustomize names no file for it
            if repeated is not None:
                message, location = f"{message} (in {repeated[0]}, line {repeated[1]})", SourceLocation(*repeated)
            return RawTier(spec, inputs=inputs, failed=True, findings=(_failed(tier, message, location),))
        with self._builds_lock:
            self.output_bytes += len(text)
        try:
            documents = self._parse(text, root)
        except InputError as exc:
            return RawTier(spec, inputs=inputs, failed=True, findings=(_failed(tier, self.sanitise(str(exc), workdir), spec.origin),))
        with self._builds_lock:  # worker threads count concurrently
            self.builds_run += 1
        raw = RawTier(spec, documents=tuple(documents), inputs=inputs, content_key=cache_key, index=DocumentIndex.of(documents))
        if cache_key is not None:
            self.cache.put(cache_key, raw.documents)
            # Written last: its presence says the build entry is complete.
            self.cache.put(cache_key + "-index", raw.document_index)
            self._record_tree_build(raw)
        return raw

    def _cached_build(self, spec: TierSpec, inputs: frozenset[str], cache_key: str) -> RawTier | None:
        """The cached build under `cache_key`; its documents are unpickled only when a tier needs them."""
        index = self.cache.get(cache_key + "-index") if self.cache is not None else None
        if not isinstance(index, DocumentIndex) or not self.cache.contains(cache_key):
            return None
        return RawTier(spec, documents=CachedDocuments(self.cache, cache_key), inputs=inputs, content_key=cache_key, index=index)

    def _record_tree_build(self, raw: RawTier) -> None:
        if self._tree_key is not None and raw.content_key is not None:
            with self._builds_lock:
                self._tree_builds[_build_key(raw.spec)] = TreeBuild(raw.inputs, raw.content_key, raw.spec, raw.document_index)
                self._tree_dirty = True

    def _save_tree_builds(self) -> None:
        if self._tree_key is not None and self._tree_dirty and self.cache is not None:
            with self._builds_lock:
                snapshot, self._tree_dirty = dict(self._tree_builds), False
            self.cache.put(self._tree_key, snapshot)

    def _parse(self, text: str, root: str) -> list[RawDocument]:
        """Split kustomize's output (built at repo path `root`); parse now what substitution cannot change, defer the rest."""
        texts = split_documents(text)
        eager = [i for i, t in enumerate(texts) if not _MAY_SUBSTITUTE.search(t) or _CONFIG_KIND.search(t)]
        joined = "---\n".join(texts[i] if texts[i].endswith("\n") else texts[i] + "\n" for i in eager)
        try:
            bodies = [b for b in yaml.load_all(joined, Loader=FastSafeLoader) if b is not None]
            if len(bodies) != len(eager):
                bodies = [yaml.load(texts[i], Loader=FastSafeLoader) for i in eager]
        except yaml.YAMLError as exc:
            raise InputError(f"kustomize output is not valid YAML: {exc}") from None
        parsed = dict(zip(eager, bodies))
        out = []
        for index, doc_text in enumerate(texts):
            body = parsed.get(index)
            if index in parsed and not isinstance(body, dict):
                raise InputError("kustomize output contains a document that is not a mapping")
            out.append(RawDocument(doc_text, body, _pop_origin(body, root) if body is not None else None))
        return out

    def sanitise(self, message: str, workdir: Path | None = None) -> str:
        """Make kustomize's message postable: repo-relative paths, nothing of the host's filesystem."""
        text = message
        # kustomize names files by the path it built (the mirror) or by their symlink-free one (the snapshot).
        roots = [workdir / "repo"] if workdir is not None else []
        for root in [*roots, self.snapshot.root]:
            for form in dict.fromkeys((str(root), os.path.realpath(root))):
                text = text.replace(form + "/", "").replace(form, ".")
        if workdir is not None:
            text = text.replace(str(workdir), "<overlay>")
        text = text.replace(str(self._work), "<work>")
        # (not after `]`: kustomize writes ids as `ConfigMap.v1.[noGrp]/name.[noNs]`)
        text = re.sub(r"(?<![\w.<\]])/(?:[\w.@+-]+/)*[\w.@+-]+", "<path outside the repository>", text)
        lines = [line for line in text.splitlines() if line.strip()]
        text = " ".join(lines[:6])
        return text if len(text) <= 800 else text[:797] + "..."

    def locate(self, manifest: Manifest | ObjectStub) -> SourceLocation | None:
        """The `file:line` of the document that produced an object (found on demand)."""
        origin = manifest.origin
        if origin is None or origin.line is not None:
            return origin
        located = self._locations.get(origin.file)
        if located is None:
            heads = _document_heads(self.snapshot, origin.file)
            exact: dict[tuple[str, str], int] = {}
            for head in heads:
                exact.setdefault((head.kind, head.name), head.line)
            located = self._locations[origin.file] = (heads, exact)
        heads, exact = located
        line = exact.get((manifest.ref.kind, manifest.ref.name))
        if line is not None:  # the name as written: nothing longer can match
            return SourceLocation(origin.file, line)
        # The longest written name inside the rendered one: `web` must not claim `x-web-config` (namePrefix).
        matches = [h for h in heads if h.kind == manifest.ref.kind and h.name and h.name in manifest.ref.name]
        if matches:
            return SourceLocation(origin.file, max(matches, key=lambda h: len(h.name)).line)
        return origin

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
        render_key = None
        if self.cache is not None and self.snapshot.tree is not None:
            # The configuration is part of the key: it need not be the commit's own (`--config`, a review).
            render_key = "render-" + versioned_key(self.binary.version, self.snapshot.tree.oid, self.config.digest(), cluster, entry, graph_only)
            remembered = self._remembered_render(render_key, cluster, entry)
            if remembered is not None:
                return remembered
        entry_spec = entry_tier(entry)
        for attempt in range(3):  # the spec found in git renders the same again, or once more (it may substitute itself)
            run = self._render_tiers(entry, entry_spec, graph_only, on_finished, last=attempt == 2)
            if run.better_entry is None:
                break
            entry_spec = run.better_entry
        self._save_tree_builds()
        if render_key is not None and not any(t.failed for t in run.tiers.values()):  # a failure may be a timeout
            self._remember_render(render_key, run.tiers, run.finish_findings, run.findings)
        return ClusterRender(cluster, entry, run.tiers, tuple(run.findings), self.snapshot)

    def _render_tiers(
        self, entry: str, entry_spec: TierSpec, graph_only: bool, on_finished: Callable[[RenderedTier], object] | None, *, last: bool
    ) -> "_TierRun":
        """One pass over the cluster from `entry_spec`; unless `last`, it stops early when the entry tier shows a better
        entry spec, or returns one a FluxInstance shows."""
        findings: list[Finding] = []
        tiers: dict[TierId, RenderedTier] = {}
        finish_findings: dict[TierId, list[Finding]] = {}
        built: dict[TierId, RawTier] = {}
        objects: dict[tuple[str, str, str], tuple[Sequence[RawDocument], int]] = {}
        artifacts: dict[tuple[str, str], Artifact] = {}  # (namespace, name) → what an ArtifactGenerator in git makes
        placed: dict[TierId, tuple[Artifact, Placement]] = {}
        waiting: list[TierSpec] = []  # ExternalArtifact tiers whose generator has not been rendered yet
        # Builds report through a queue: waiting on a set of futures costs a pass over all of them
        # each time, and a commit seen before schedules hundreds of tiers that are ready at once.
        done: queue.SimpleQueue[Future[RawTier]] = queue.SimpleQueue()
        outstanding = 0

        def not_rendered(spec: TierSpec, message: str) -> None:
            tiers[spec.id] = RenderedTier(spec=spec)
            findings.append(Finding("not-rendered", Severity.INFO, message, kustomization=spec.id, location=spec.origin))

        with ThreadPoolExecutor(max_workers=self.jobs, thread_name_prefix="render") as pool:

            def schedule(spec: TierSpec) -> None:
                nonlocal outstanding
                outstanding += 1
                known = self._known_build(spec)
                if known is not None:  # memoised or reused: no I/O, no thread
                    future: Future[RawTier] = Future()
                    future.set_result(known)
                    done.put(future)
                else:
                    pool.submit(self.build_tier, spec).add_done_callback(done.put)

            def admit(spec: TierSpec) -> bool:
                """Schedule a discovered tier, or say why its content is not rendered; False: its artifact is not known yet."""
                if spec.source.kind == "ExternalArtifact":
                    artifact = artifacts.get((spec.source.namespace, spec.source.name))
                    if artifact is None:
                        return False
                    placement = place(artifact, spec.path)
                    if isinstance(placement, str):
                        not_rendered(spec, f"{spec.id} applies {spec.source}: {placement}; its content is not rendered")
                        return True
                    mapped = replace(spec, path=placement.path, source_path=spec.path)
                    placed[spec.id] = (artifact, placement)
                    schedule(mapped)
                elif self.config.is_this_repo(spec.source):
                    schedule(spec)
                else:
                    not_rendered(spec, f"{spec.id} applies {spec.source}, not this repository; its content is not rendered")
                return True

            scheduled: dict[TierId, TierSpec] = {entry_spec.id: entry_spec}
            # Each tier's chain of applying Kustomizations, entry first (for RenderLimits).
            lineage: dict[TierId, tuple[TierSpec, ...]] = {entry_spec.id: (entry_spec,)}
            rendered_objects = 0
            schedule(entry_spec)
            while outstanding or built or waiting:
                if not (outstanding or built):  # only tiers on artifacts no tier in git generates
                    for spec in waiting:
                        not_rendered(spec, f"{spec.id} applies {spec.source}, which no ArtifactGenerator in git produces; its content is not rendered")
                    waiting = []
                    break
                arrived = [done.get()] if outstanding else []
                while True:  # and whatever else is ready
                    try:
                        arrived.append(done.get_nowait())
                    except queue.Empty:
                        break
                outstanding -= len(arrived)
                for future in arrived:
                    raw = future.result()
                    if raw.spec.id in placed and not raw.failed:
                        raw, why = self._within_artifact(raw, *placed[raw.spec.id])
                        if why is not None:
                            not_rendered(raw.spec, why)
                            continue
                    built[raw.spec.id] = raw
                    findings.extend(raw.findings)
                    for key, position in raw.document_index.config.items():
                        objects.setdefault(key, (raw.documents, position))
                for tid in list(built):
                    raw = built[tid]
                    if outstanding and not _sources_present(raw.spec, objects):
                        continue  # its substituteFrom may be rendered by a tier still building
                    del built[tid]
                    rendered, tier_findings = self._finish(raw, objects, graph_only)
                    if tid == entry_spec.id:
                        own = self._bootstrap_spec(rendered, entry)
                        if own is not None and not _same_tier(own, entry_spec) and not last:
                            return _TierRun({}, {}, [], own)  # the tier's own Kustomization says how it is built
                        if own is not None and _same_tier(own, entry_spec):
                            entry_spec = own
                            rendered = replace(rendered, spec=own)
                    tiers[tid] = rendered
                    rendered_objects += len(rendered.manifests)
                    finish_findings[tid] = tier_findings
                    if on_finished is not None:
                        on_finished(rendered)
                    findings.extend(tier_findings)
                    new_artifacts = False
                    for manifest in rendered.discovery_objects():
                        if is_artifact_generator(manifest):
                            for key, artifact in generated_artifacts(manifest, self.config.is_this_repo, self.snapshot).items():
                                new_artifacts |= artifacts.setdefault(key, artifact) is artifact
                    for spec in self._discover(rendered, entry, findings):
                        if spec.id in scheduled:
                            # A Kustomization whose path holds its own file applies itself again: one definition.
                            if not _same_tier(scheduled[spec.id], spec) and spec.id != entry_spec.id:
                                findings.append(_failed(spec.id, _redefined(scheduled[spec.id], spec), spec.origin, Severity.WARNING))
                            continue
                        chain = (*lineage.get(tid, (rendered.spec,)), spec)
                        beyond = self._beyond_limits(chain, len(scheduled), rendered_objects)
                        if beyond is not None:
                            tiers[spec.id] = RenderedTier(spec=spec, failed=True)  # failed: the render is not cached
                            findings.append(Finding("render-limit", Severity.ERROR, beyond, kustomization=spec.id, location=spec.origin))
                            continue
                        scheduled[spec.id] = spec
                        lineage[spec.id] = chain
                        if rendered.spec.kube_config is not None:
                            # Applied to another cluster as an object: that cluster's Flux reconciles it, with its sources.
                            not_rendered(
                                replace(spec, kube_config=rendered.spec.kube_config),
                                f"{spec.id} is applied by {tid} to the cluster of {rendered.spec.kube_config}; it is reconciled there, not rendered here",
                            )
                        elif not admit(spec):
                            waiting.append(spec)
                    if new_artifacts:
                        waiting = [spec for spec in waiting if not admit(spec)]
        better = self._operator_entry(tiers, entry, entry_spec, findings) if entry_spec.origin is None and not last else None
        return _TierRun(tiers, finish_findings, findings, better)

    def _bootstrap_spec(self, tier: RenderedTier, entry: str) -> TierSpec | None:
        """The Kustomization in the entry tier's own output that applies the entry path from this repository
        (`flux bootstrap`'s gotk-sync, as patched by its kustomization): the truth about the entry tier."""
        for manifest in tier.flux_kustomizations():
            try:
                spec = tier_spec(manifest, None)
            except TierSpecError:
                continue  # `_discover` reports it
            if spec.path == entry and self.config.is_this_repo(spec.source):
                return replace(spec, origin=self.locate(manifest))  # located only when found: a file read per tier
        return None

    def _operator_entry(
        self, tiers: dict[TierId, RenderedTier], entry: str, current: TierSpec, findings: list[Finding]
    ) -> TierSpec | None:
        """The sync Kustomization a FluxInstance in git (object or flux-instance HelmRelease) makes for the entry
        path, when it differs from `current`; its location becomes the entry tier's either way."""
        for tier in tiers.values():
            for manifest in tier.discovery_objects():
                sync = operator_sync(manifest)
                if sync is None or normalise_repo_path(str(sync.kustomization["spec"]["path"])) != entry:
                    continue
                origin = self.locate(manifest)
                body = self._patched_sync(sync, tier.spec.id, origin, findings)
                try:
                    spec = tier_spec(Manifest(_ref(body) or manifest.ref, body, origin), None)
                except TierSpecError:
                    continue
                if spec.path != entry or not self.config.is_this_repo(spec.source):
                    continue
                if _same_tier(spec, current) and current.id in tiers:
                    tiers[current.id] = replace(tiers[current.id], spec=spec)
                    return None
                return spec
        return None

    def _patched_sync(self, sync: OperatorSync, tier: TierId, origin: SourceLocation | None, findings: list[Finding]) -> Mapping[str, Any]:
        """The operator's sync Kustomization with the FluxInstance's patches that target it, applied by kustomize."""
        if not sync.patches:
            return sync.kustomization
        workdir = self._work / f"sync-{next(self._counter):05d}"
        workdir.mkdir(parents=True)
        (workdir / "sync.yaml").write_text(yaml.safe_dump(dict(sync.kustomization)), encoding="utf-8")
        kustomization = {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization", "resources": ["sync.yaml"], "patches": list(sync.patches)}
        (workdir / "kustomization.yaml").write_text(yaml.safe_dump(kustomization), encoding="utf-8")
        try:
            text = run_build(self.binary, workdir, sandbox_home=self._work / "home", timeout=self.timeout)
            body = yaml.load(text, Loader=FastSafeLoader)
        except (RenderError, yaml.YAMLError) as exc:
            findings.append(
                Finding(
                    "not-rendered",
                    Severity.INFO,
                    f"the FluxInstance's kustomize.patches could not be applied to its sync Kustomization ({self.sanitise(str(exc), workdir)}); "
                    "the entry tier is rendered without them",
                    kustomization=tier,
                    location=origin,
                )
            )
            return sync.kustomization
        return body if isinstance(body, dict) else sync.kustomization

    def _within_artifact(self, raw: RawTier, artifact: Artifact, placement: Placement) -> tuple[RawTier, str | None]:
        """A build of a tier on an ExternalArtifact, checked against what the artifact holds: failed when it
        reads what the artifact lacks; with a reason not to render it when it reads what the artifact holds
        from elsewhere in the repository."""
        spec = raw.spec
        absent, elsewhere = unreadable(artifact, placement, raw.inputs)
        if elsewhere:
            return raw, (
                f"{spec.id} applies {spec.source}, where {elsewhere[0]} is not at its place in the repository "
                f"({artifact.generator} assembles it from elsewhere); its content is not rendered"
            )
        if not absent:
            return raw, None
        shown = ", ".join(absent[:3]) + (f" and {len(absent) - 3} more" if len(absent) > 3 else "")
        message = (
            f"the build reads {shown}, which {artifact.generator} does not copy into {spec.source}: "
            "kustomize-controller cannot find it there"
        )
        return RawTier(spec, inputs=raw.inputs, failed=True, findings=(_failed(spec.id, message, spec.origin),)), None

    def _beyond_limits(self, chain: tuple[TierSpec, ...], tiers: int, objects: int) -> str | None:
        """Why the last Kustomization of `chain` (entry first) is not rendered, or None when it is within RenderLimits."""
        limits, spec = self.limits, chain[-1]
        repeats = sum(1 for s in chain[:-1] if (s.source, s.path) == (spec.source, spec.path))
        if repeats > limits.path_repeats:
            path = " → ".join(str(s.id) for s in chain if (s.source, s.path) == (spec.source, spec.path))
            return (
                f"{spec.id} renders path {spec.path or '.'!r} again under a new name ({path}): a Kustomization that "
                f"recreates itself never ends in Flux either; not rendered (limit: a path {limits.path_repeats + 1} times in one chain)"
            )
        if len(chain) - 1 > limits.depth:
            return f"{spec.id} is nested {len(chain) - 1} Kustomizations deep; not rendered (limit: {limits.depth})"
        if tiers >= limits.tiers:
            return f"the cluster has more than {limits.tiers} Kustomizations; {spec.id} and any after it are not rendered (limit: {limits.tiers})"
        if objects > limits.objects:
            return f"the cluster rendered more than {plural(limits.objects, 'object')}; {spec.id} and any after it are not rendered (limit: {limits.objects})"
        if self.output_bytes > limits.output_bytes:
            return f"kustomize produced more than {limits.output_bytes >> 20} MiB for this render; {spec.id} and any after it are not rendered"
        return None

    def _remember_render(
        self, key: str, tiers: Mapping[TierId, RenderedTier], finish_findings: Mapping[TierId, list[Finding]], findings: list[Finding]
    ) -> None:
        """Keep a commit's cluster render as one entry: each tier's summary (its objects stay in their own entries)."""
        assert self.cache is not None
        summaries = [(tid, _summary(t), list(finish_findings.get(tid, ()))) for tid, t in tiers.items()]
        self.cache.put(key, (summaries, tuple(findings)))

    def _remembered_render(self, key: str, cluster: str, entry: str) -> ClusterRender | None:
        """A commit's cluster render seen before: one entry instead of a pass over every tier (objects loaded on use)."""
        assert self.cache is not None
        stored = self.cache.get(key)
        if stored is None:
            return None
        summaries, findings = stored
        if not all(self.cache.contains(f"finished-{summary[0].finish_key}-objects") for _, summary, _ in summaries if summary[0].finish_key):
            return None
        tiers: dict[TierId, RenderedTier] = {}
        for tid, summary, tier_findings in summaries:
            tier = tiers[tid] = self._from_summary(summary)
            if tier.finish_key is not None and self.finish_memo is not None:  # the other side of a review finishes its equal tiers from here
                self.finish_memo.setdefault(tier.finish_key, (tier, tier_findings))
        return ClusterRender(cluster, entry, tiers, findings, self.snapshot)

    def _from_summary(self, summary: TierSummary) -> RenderedTier:
        """A finished tier back from its summary: its objects stay in the cache until used."""
        tier, count, kustomizations = summary
        if tier.finish_key is None or self.cache is None:
            return tier
        return replace(tier, manifests=StoredManifests(self.cache, tier.finish_key, count, kustomizations))

    def _discover(self, tier: RenderedTier, entry: str, findings: list[Finding]) -> list[TierSpec]:
        specs = []
        for manifest in tier.flux_kustomizations():
            try:
                spec = tier_spec(replace(manifest, origin=self.locate(manifest)), tier.spec.id)
            except TierSpecShapeError as exc:
                findings.append(_failed(tier.spec.id, str(exc), self.locate(manifest)))
                continue
            except TierSpecError as exc:
                findings.append(_unsafe(tier.spec.id, str(exc), manifest.origin))
                continue
            if spec.path == entry and self.config.is_this_repo(spec.source) and spec.id == tier.spec.id:
                continue  # the bootstrap Kustomization that applies the entry path itself
            specs.append(spec)
        return specs

    # -- substitution ---------------------------------------------------------------------------

    def _finish(
        self, raw: RawTier, objects: SourceIndex, graph_only: bool = False
    ) -> tuple[RenderedTier, list[Finding]]:
        """postBuild substitution and commonMetadata for one built tier (graph_only: its Kustomizations only)."""
        spec = raw.spec
        findings: list[Finding] = []
        if raw.failed and not raw.documents:
            return RenderedTier(spec=spec, failed=True, inputs=raw.inputs), findings
        variables, secret_names, open_set = self._variables(spec, objects, findings)
        # A graph needs a build's Flux Kustomizations only: without one there is nothing to finish, or to cache.
        kustomizations = raw.document_index.kustomizations if graph_only else ()
        finish_key = None if graph_only and not kustomizations else self._finish_key(raw, variables, secret_names, open_set, graph_only)
        remembered = self._remembered(finish_key)
        if remembered is not None:
            rendered, memo_findings = remembered
            return replace(rendered, spec=spec, inputs=raw.inputs), list(memo_findings)
        bad_names = envsubst.check_variable_names(variables)
        if bad_names:
            findings.append(_failed(spec.id, f"postBuild variable name(s) {', '.join(sorted(bad_names))} are invalid; the build fails", spec.origin))
        # kustomize-controller substitutes only when at least one variable was loaded
        # (fluxcd/pkg kustomize/kustomize_varsub.go: `if len(vars) > 0`).
        # `postBuild.substituteStrategy: Always` (kustomize-controller PR #1672) lifts that gate.
        substituting = spec.has_post_build and (bool(variables) or spec.substitute_always)
        masked = {k: (SECRET_MASK.format(name=k) if k in secret_names else v.replace("\n", "")) for k, v in variables.items()}
        manifests: list[Manifest] = []
        undefined: dict[str, list[Manifest]] = {}
        failed = raw.failed or bool(bad_names)  # an invalid variable name fails the whole build in Flux
        documents = [raw.documents[i] for i in kustomizations] if graph_only else raw.documents
        prepared = self._prepare(documents, substituting, masked, spec, findings)
        candidates: list[int] = []
        for doc, prepared_doc in zip(documents, prepared):
            if prepared_doc is None:
                failed = True
                continue
            body, origin, used_undefined = prepared_doc
            ref = _ref(body) if isinstance(body, dict) else None
            if ref is None:
                findings.append(_failed(spec.id, "an object lacks apiVersion, kind or metadata.name; kustomize-controller rejects the build", origin))
                failed = True
                continue
            body = _with_flux_metadata(body, spec)
            manifest = Manifest(ref, body, origin)
            if ref.kind == "Secret" and "sops" in body and not spec.decryption:
                findings.append(
                    _failed(spec.id, f"{ref} is SOPS-encrypted but the Kustomization has no spec.decryption; the apply fails", origin)
                )
                failed = True
            if "${" in doc.text:
                candidates.append(len(manifests))
            manifests.append(manifest)
            for name in used_undefined:
                undefined.setdefault(name, []).append(manifest)
        rendered = RenderedTier(
            spec=spec,
            manifests=tuple(manifests),
            rendered=True,
            failed=failed,
            substituted=substituting or (spec.has_post_build and open_set),
            variables_open=open_set,
            variables=frozenset(variables),
            undefined={k: tuple(v) for k, v in undefined.items()},
            inputs=raw.inputs,
            token_candidates=frozenset(candidates),
            finish_key=finish_key,
        )
        if finish_key is not None:
            self._remember(finish_key, rendered, findings)
        return rendered, findings

    def _remembered(self, finish_key: str | None) -> tuple[RenderedTier, list[Finding]] | None:
        """A finished tier from this review's memory, else from the disk cache (keyed by content and variables)."""
        if finish_key is None:
            return None
        if self.finish_memo is not None and finish_key in self.finish_memo:
            return self.finish_memo[finish_key]
        if self.cache is None:
            return None
        stored = self.cache.get(f"finished-{finish_key}")
        if stored is None or not self.cache.contains(f"finished-{finish_key}-objects"):
            return None
        summary, findings = stored
        remembered = self._from_summary(summary), findings
        if self.finish_memo is not None:
            self.finish_memo[finish_key] = remembered
        return remembered

    def _remember(self, finish_key: str, rendered: RenderedTier, findings: list[Finding]) -> None:
        if self.finish_memo is not None:
            self.finish_memo[finish_key] = (rendered, list(findings))
        if self.cache is not None:
            # The objects apart from the summary: a review loads only the tiers it diffs or checks anew.
            self.cache.put(f"finished-{finish_key}-objects", tuple(rendered.manifests))
            self.cache.put(f"finished-{finish_key}", (_summary(rendered), list(findings)))  # written last: its presence says the entry is complete

    def _prepare(
        self, documents: Sequence[RawDocument], substituting: bool, masked: Mapping[str, str], spec: TierSpec, findings: list[Finding]
    ) -> list[tuple[Any, SourceLocation | None, tuple[str, ...]] | None]:
        """Substitute what needs it, then parse every unparsed document in one YAML stream (None: failed)."""
        out: list[tuple[Any, SourceLocation | None, tuple[str, ...]] | None] = []
        to_parse: list[tuple[int, str, bool]] = []  # (index in out, text, substituted)
        root = self.snapshot.real_path(spec.path) or spec.path  # where kustomize built it (origins are relative to it)
        for doc in documents:
            # `$$` collapses to `$` even in a document with no reference (fluxcd/pkg envsubst).
            if substituting and _MAY_SUBSTITUTE.search(doc.text) and not doc.substitution_disabled:
                try:
                    result = envsubst.substitute(doc.text, masked, strict=self.config.strict_substitution)
                except SubstitutionError as exc:
                    findings.append(_failed(spec.id, f"{_ref(doc.body) if doc.body else _describe(doc.text)}: {exc}", doc.origin))
                    out.append(None)
                    continue
                to_parse.append((len(out), result.text, True))
                out.append((None, doc.origin, result.undefined))
            elif doc.body is None:
                to_parse.append((len(out), doc.text, False))
                out.append((None, doc.origin, ()))
            else:
                out.append((doc.body, doc.origin, ()))
        bodies = _load_stream([text for _, text, _ in to_parse])
        for (index, text, substituted), body in zip(to_parse, bodies):
            _, origin, undefined = out[index]  # type: ignore[misc]
            try:
                if substituted:
                    check_aliases(text, f"{_describe(text)} after substitution")  # values can add anchors/aliases
                if body is None:
                    body = yaml.load(text, Loader=FastSafeLoader)  # the stream failed: find which document
            except InputError as exc:
                findings.append(_failed(spec.id, str(exc), origin))
                out[index] = None
                continue
            except yaml.YAMLError as exc:
                findings.append(_failed(spec.id, f"{_describe(text)}: substituted YAML is invalid: {str(exc).splitlines()[0]}", origin))
                out[index] = None
                continue
            origin = _pop_origin(body, root) or origin  # the text still carries kustomize's origin annotation
            out[index] = (body, origin, undefined)
        return out

    def _finish_key(self, raw: RawTier, variables: Mapping[str, str], secret_names: set[str], open_set: bool, graph_only: bool) -> str | None:
        """A hash of everything `_finish` reads besides `raw.documents` (named by its content key)."""
        if raw.content_key is None:
            return None
        spec = raw.spec
        return hashlib.sha256(json.dumps(
            [raw.content_key, sorted(variables.items()), sorted(secret_names), open_set, graph_only, str(spec.id),
             spec.has_post_build, spec.substitute_always, spec.common_metadata, spec.decryption, str(spec.origin),
             self.config.strict_substitution, raw.failed],
            sort_keys=True, default=str,
        ).encode()).hexdigest()

    def _variables(
        self, spec: TierSpec, objects: SourceIndex, findings: list[Finding]
    ) -> tuple[dict[str, str], set[str], bool]:
        """The postBuild variables of a tier: substituteFrom in order, then inline `substitute` wins."""
        variables: dict[str, str] = {}
        secret_names: set[str] = set()
        open_set = False
        if not spec.has_post_build:
            return variables, secret_names, open_set
        for source in spec.substitute_from:
            found = objects.get((source.kind, spec.id.namespace, source.name))
            if found is None:
                open_set = True
                findings.append(
                    Finding(
                        "substitution-source-external",
                        Severity.INFO,
                        f"substituteFrom {source.kind}/{spec.id.namespace}/{source.name}"
                        f"{' (optional)' if source.optional else ''} is not in git; its variables could not be checked"
                        + ("" if source.optional else " and Flux fails the build if it is missing on the cluster"),
                        kustomization=spec.id,
                        location=spec.origin,
                    )
                )
                continue
            documents, position = found
            data = _config_data(documents[position].body)
            variables.update(data)
            if source.kind == "Secret":
                secret_names.update(data)
            else:
                secret_names.difference_update(data)
        variables.update(spec.substitute)
        secret_names.difference_update(spec.substitute)
        return variables, secret_names, open_set


_HEADS_BY_CONTENT: dict[str, list] = {}  # blob id → document heads: both sides of a review share most files
_HEADS_LIMIT = 20_000


def _document_heads(snapshot: Snapshot, rel: str) -> list:
    """The document heads (kind, name, line) of a repo file, parsed once per content."""
    digest = snapshot.file_digest(rel)
    heads = _HEADS_BY_CONTENT.get(digest) if digest else None
    if heads is None:
        heads = list(document_heads(snapshot.read_text(rel) or ""))
        if digest:
            if len(_HEADS_BY_CONTENT) > _HEADS_LIMIT:
                _HEADS_BY_CONTENT.clear()
            _HEADS_BY_CONTENT[digest] = heads
    return heads


def default_jobs() -> int:
    """Parallel builds: one per core plus one, so a core is not idle while Python parses a finished build."""
    return (os.cpu_count() or 1) + 1


def _build_key(spec: TierSpec) -> str:
    """The spec fields kustomize sees; two tiers with equal keys build identical output."""
    return json.dumps(
        [spec.path, spec.target_namespace, spec.name_prefix, spec.name_suffix, spec.patches, spec.images, spec.components, spec.ignore_missing_components],
        sort_keys=True,
        default=str,
    )


def _config_data(body: Mapping[str, Any]) -> dict[str, str]:
    """Key/values of a ConfigMap or Secret as the controller reads them (Secret data decoded)."""
    out: dict[str, str] = {}
    if body.get("kind") == "Secret":
        for key, value in (body.get("data") or {}).items():
            try:
                out[str(key)] = base64.b64decode(str(value), validate=False).decode("utf-8", errors="replace")
            except (binascii.Error, ValueError):
                out[str(key)] = ""
        for key, value in (body.get("stringData") or {}).items():
            out[str(key)] = "" if value is None else str(value)
    else:
        for key, value in (body.get("data") or {}).items():
            out[str(key)] = "" if value is None else str(value)
    return out


def _pop_origin(body: Any, root: str) -> SourceLocation | None:
    """Read and drop kustomize's origin annotation (and an annotations map it leaves empty).

    Its path is relative to the directory kustomize built, the mirror of repo path `root` (see
    generate.write_build_root), where every relative path lands where it does in the repository.
    """
    meta = body.get("metadata") if isinstance(body, dict) else None
    annotations = meta.get("annotations") if isinstance(meta, dict) else None
    if not isinstance(annotations, dict) or ORIGIN_ANNOTATION not in annotations:
        return None
    raw = annotations.pop(ORIGIN_ANNOTATION)
    if not annotations:
        meta.pop("annotations")
    # The value is a tiny YAML map kustomize writes itself (`path: …` or `configuredIn: …`): a regex
    # reads it ~50x faster than a YAML parse, which matters at 20,000 objects.
    match = _ORIGIN_PATH.search(raw) if isinstance(raw, str) else None
    if match is None:
        return None
    rel = match.group(1).strip().strip("'\"")
    if rel.startswith("/"):
        return None
    joined = posixpath.normpath(posixpath.join(root, rel))
    if joined in (".", "..") or joined.startswith("../"):
        return None
    return SourceLocation(joined)


def _load_stream(texts: list[str]) -> list[Any]:
    """Parse many documents in one C-loader call; [None, …] when the stream fails (callers retry one by one)."""
    if not texts:
        return []
    try:
        bodies = [b for b in yaml.load_all("---\n".join(t if t.endswith("\n") else t + "\n" for t in texts), Loader=FastSafeLoader) if b is not None]
    except yaml.YAMLError:
        return [None] * len(texts)
    return bodies if len(bodies) == len(texts) else [None] * len(texts)


def _describe(text: str) -> str:
    """`Kind/name` of a document we could not parse, read from its text."""
    kind = re.search(r"^kind: *(\S+)", text, re.MULTILINE)
    name = re.search(r"^  name: *(\S+)", text, re.MULTILINE)
    return f"{kind.group(1) if kind else 'object'}/{name.group(1) if name else '?'}"


# A finished tier as cached: the tier without its objects, their count, its Flux Kustomizations.
TierSummary = tuple[RenderedTier, int, tuple[Manifest, ...]]


def _summary(tier: RenderedTier) -> TierSummary:
    return replace(tier, manifests=()), len(tier.manifests), tuple(tier.discovery_objects())


class _TierRun(NamedTuple):
    """One pass of `render_cluster`: its tiers and findings, or the better entry spec it stopped for."""

    tiers: dict[TierId, RenderedTier]
    finish_findings: dict[TierId, list[Finding]]
    findings: list[Finding]
    better_entry: TierSpec | None


def _redefined(first: TierSpec, second: TierSpec) -> str:
    """Why two definitions of one Kustomization fight: both are applied (server-side, by the same field
    manager), so each reconcile of one undoes the fields the other set."""
    fields = [f.name for f in dataclasses.fields(TierSpec) if f.name not in ("defined_in", "origin") and getattr(first, f.name) != getattr(second, f.name)]
    by = " and ".join(str(s.defined_in) if s.defined_in else "the cluster entry" for s in (first, second))
    return (
        f"{first.id} is applied by {by} with different specs ({', '.join(fields)} differ): each apply undoes the other's, "
        "so its spec flips on every reconcile; the first one found is rendered"
    )


def _same_tier(a: TierSpec, b: TierSpec) -> bool:
    """Whether two specs render the same tier (where they are written aside)."""
    return replace(a, origin=None, defined_in=None) == replace(b, origin=None, defined_in=None)


def is_discovery_object(manifest: Manifest) -> bool:
    """Objects a render follows: Flux Kustomizations, ArtifactGenerators and FluxInstances (objects or chart values)."""
    return (
        is_flux_kustomization(manifest)
        or is_artifact_generator(manifest)
        or (manifest.ref.kind in ("FluxInstance", "HelmRelease") and operator_sync(manifest) is not None)
    )


def _for_spec(raw: RawTier, spec: TierSpec) -> RawTier:
    """A build made for an equal build key, as the build of `spec` (its findings name this tier)."""
    if raw.spec == spec:
        return raw
    return replace(raw, spec=spec, findings=tuple(replace(f, kustomization=spec.id) for f in raw.findings))


def _sources_present(spec: TierSpec, objects: SourceIndex) -> bool:
    return all((s.kind, spec.id.namespace, s.name) in objects for s in spec.substitute_from)


def _with_flux_metadata(body: Mapping[str, Any], spec: TierSpec) -> Mapping[str, Any]:
    """The labels and annotations kustomize-controller sets on every object before it applies it.

    First the owner labels (kustomization_controller.go → fluxcd/pkg ssa manager.go SetOwnerLabels),
    then `commonMetadata`, overriding same keys (fluxcd/pkg ssa/utils meta.go SetCommonMetadata).
    Raw builds are shared between tiers: the maps changed are copies, the rest of the body is shared.
    """
    meta = body.get("metadata")
    meta = dict(meta) if isinstance(meta, dict) else {}
    labels = meta.get("labels")
    meta["labels"] = {
        **(labels if isinstance(labels, dict) else {}),
        OWNER_NAME_LABEL: spec.id.name,
        OWNER_NAMESPACE_LABEL: spec.id.namespace,
        **(spec.common_metadata.get("labels") or {}),
    }
    annotations = spec.common_metadata.get("annotations")
    if annotations:
        existing = meta.get("annotations")
        meta["annotations"] = {**(existing if isinstance(existing, dict) else {}), **annotations}
    return {**body, "metadata": meta}


def _ref(body: Mapping[str, Any]) -> ObjectRef | None:
    meta = body.get("metadata")
    if not isinstance(meta, dict):
        return None
    api_version, kind, name = body.get("apiVersion"), body.get("kind"), meta.get("name")
    if not (isinstance(api_version, str) and isinstance(kind, str) and isinstance(name, str) and name):
        return None
    return ObjectRef(api_version, kind, str(meta.get("namespace") or ""), name)


def _under_any(path: str, dirs: set[str]) -> bool:
    return any(d == "" or path == d or path.startswith(d + "/") for d in dirs)


def _failed(tier: TierId, message: str, location: SourceLocation | None, severity: Severity = Severity.ERROR) -> Finding:
    return Finding("render-failed", severity, message, kustomization=tier, location=location)


def _unsafe(tier: TierId, message: str, location: SourceLocation | None) -> Finding:
    return Finding("unsafe-path", Severity.ERROR, message, kustomization=tier, location=location)
