"""Every memo of a render in one place: what was built, finished, summarised and checked, in memory and on disk.

Layers, cheapest first: this run's memory (`RunMemo`, shared by both sides of a review; the content
ids of a snapshot's files; the document heads of a file), a commit's tree memo (its builds by build
key, known from its tree id), the disk cache by content (builds, finished tiers, tier facts) and by
commit (cluster renders, findings). Every disk key is versioned
(bot/adapters/cache.py `versioned_key`): another version of the code never reads these entries.
"""

from __future__ import annotations

import hashlib
import threading
from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Iterator, Mapping, NamedTuple, Sequence, overload

from bot.adapters.cache import BuildCache, versioned_key
from bot.adapters.kustomize import KustomizeBinary
from bot.adapters.workspace import Snapshot
from bot.engine.render.config import RepoConfig
from bot.engine.core.errors import InputError
from bot.engine.render.facts import TierFacts, tier_facts
from bot.engine.render.generate import RemoteEntry
from bot.engine.render.knowledge import KnowledgeBase
from bot.engine.core.model import Finding, Manifest, TierId, TierSpec
from bot.engine.render.rendered import ClusterRender, DocumentIndex, RawDocument, RawTier, RenderedTier, TierSummary, build_key, summarise
from bot.engine.render.yamlio import document_heads as read_document_heads


class CachedDocuments(Sequence[RawDocument]):
    """A cached build's documents, unpickled only when a tier must really be finished again."""

    def __init__(self, cache: BuildCache, key: str) -> None:
        self._cache, self._key = cache, key
        self._docs: tuple[RawDocument, ...] | None = None

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

    @overload
    def __getitem__(self, index: int) -> RawDocument: ...
    @overload
    def __getitem__(self, index: slice) -> tuple[RawDocument, ...]: ...
    def __getitem__(self, index: int | slice) -> RawDocument | tuple[RawDocument, ...]:
        return self._load()[index]

    def __iter__(self) -> Iterator[RawDocument]:
        return iter(self._load())


class StoredManifests(Sequence[Manifest]):
    """A cached finished tier's objects: counted, the rest unpickled on first use."""

    def __init__(self, cache: BuildCache, finish_key: str, count: int) -> None:
        self._cache, self._key = cache, finish_key
        self._manifests: tuple[Manifest, ...] | None = None
        self._count = count

    def _load(self) -> tuple[Manifest, ...]:
        if self._manifests is None:
            loaded = self._cache.get(f"finished-{self._key}-objects")
            if loaded is None:  # removed between the lookup and now: forget the summary, the next run finishes it again
                self._cache.discard(f"finished-{self._key}")
                raise InputError("a cached render disappeared while it was in use; run again")
            self._manifests = tuple(loaded)
        return self._manifests

    def __len__(self) -> int:
        return self._count

    @overload
    def __getitem__(self, index: int) -> Manifest: ...
    @overload
    def __getitem__(self, index: slice) -> tuple[Manifest, ...]: ...
    def __getitem__(self, index: int | slice) -> Manifest | tuple[Manifest, ...]:
        return self._load()[index]

    def __iter__(self) -> Iterator[Manifest]:
        return iter(self._load())


@dataclass
class RunMemo:
    """What one run keeps in memory across renderers: both sides of a review finish an equal tier once."""

    finished: dict[str, tuple[RenderedTier, list[Finding]]] = field(default_factory=dict)  # finish key → tier, findings
    facts: dict[str, TierFacts] = field(default_factory=dict)  # facts key → facts
    heads: dict[str, list] = field(default_factory=dict)  # blob id → document heads (LineMemo), at most _HEADS_LIMIT


class TreeBuild(NamedTuple):
    """What a commit's tree memo keeps of one build: what it read, its cache key, a spec that makes it,
    and its document index (see `RawTier.document_index`)."""

    inputs: frozenset[str]
    cache_key: str
    spec: TierSpec
    index: DocumentIndex  # type: ignore[assignment]  # shadows tuple.index(), which nothing calls on a TreeBuild
    remote: tuple[RemoteEntry, ...] = ()  # the remote entries the build left out (RawTier.remote)


class BuildMemo:
    """A renderer's builds by build key: made here, known from the commit's tree memo, or on disk by content."""

    def __init__(self, cache: BuildCache | None, tree_key: str | None) -> None:
        self.cache = cache
        # dev and prod usually apply the same paths with the same overlay: build each once.
        self._builds: dict[str, RawTier] = {}
        self._lock = threading.Lock()
        # A commit's builds, by build key: a commit seen before skips reading its kustomization
        # files and hashing inputs (the tree id says the content is the same).
        self._tree_key = tree_key if cache is not None else None
        self._tree: dict[str, TreeBuild] = (cache.get(tree_key) or {}) if cache is not None and tree_key is not None else {}
        self._tree_dirty = False

    def get(self, key: str) -> RawTier | None:
        """The build this renderer made or took for a build key."""
        with self._lock:
            return self._builds.get(key)

    def keep(self, key: str, raw: RawTier) -> RawTier:
        """Keep a build for its build key; the one kept first wins."""
        with self._lock:
            return self._builds.setdefault(key, raw)

    def built(self, key: str) -> RawTier | None:
        """This commit's build for a build key: made by this renderer, or in its tree memo."""
        raw = self.get(key)
        return raw if raw is not None else self.tree_build(key)

    def tree_builds(self) -> list[TreeBuild]:
        """This commit's builds as its tree memo knows them (empty for a working tree or a commit not seen before)."""
        with self._lock:
            return list(self._tree.values())

    def tree_build(self, key: str) -> RawTier | None:
        """The build the tree memo records for a build key, its documents left in the cache until needed."""
        known = self._tree.get(key)
        if known is None or self.cache is None or not self.cache.contains(known.cache_key):
            return None
        documents = CachedDocuments(self.cache, known.cache_key)
        return RawTier(known.spec, documents=documents, inputs=known.inputs, content_key=known.cache_key, index=known.index, remote=known.remote)

    def cached(self, spec: TierSpec, inputs: frozenset[str], cache_key: str) -> RawTier | None:
        """The build on disk under `cache_key` (recorded in the tree memo); its documents are unpickled only when a tier needs them."""
        cache = self.cache
        index = cache.get(cache_key + "-index") if cache is not None else None
        if cache is None or not isinstance(index, DocumentIndex) or not cache.contains(cache_key):
            return None
        raw = RawTier(spec, documents=CachedDocuments(cache, cache_key), inputs=inputs, content_key=cache_key, index=index)
        self._record(raw)
        return raw

    def store(self, raw: RawTier) -> None:
        """Put a fresh build with a content key on disk and in the tree memo."""
        if raw.content_key is None or self.cache is None:
            return
        self.cache.put(raw.content_key, raw.documents)
        self.cache.put(raw.content_key + "-index", raw.document_index)  # written last: its presence says the entry is complete
        self._record(raw)

    def _record(self, raw: RawTier) -> None:
        if self._tree_key is not None and raw.content_key is not None:
            with self._lock:
                self._tree[build_key(raw.spec)] = TreeBuild(raw.inputs, raw.content_key, raw.spec, raw.document_index, raw.remote)
                self._tree_dirty = True

    def save(self) -> None:
        """Write the tree memo when it learned a build."""
        if self._tree_key is not None and self._tree_dirty and self.cache is not None:
            with self._lock:
                snapshot, self._tree_dirty = dict(self._tree), False
            self.cache.put(self._tree_key, snapshot)


class ContentHasher:
    """Content ids of snapshot files and directories, memoised: tiers share files and each is read once.

    A file's id is its git blob id (known without reading it for a lazy snapshot of a commit); a
    directory's is a hash over the ids of the files directly in it.
    """

    def __init__(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot
        self._digests: dict[str, str] = {}
        self._lock = threading.Lock()

    def digest(self, rel: str) -> str:
        with self._lock:
            cached = self._digests.get(rel)
        if cached is not None:
            return cached
        if self.snapshot.is_dir(rel):
            names = self.snapshot.list_dir(rel)[1]
            listing = "\0".join(f"{n}={self.digest(f'{rel}/{n}' if rel else n)}" for n in names)
            value = "dir:" + hashlib.sha256(listing.encode()).hexdigest()
        else:
            value = self.snapshot.file_digest(rel) or "missing"
        with self._lock:
            self._digests[rel] = value
        return value

    def key(self, parts: Iterable[Any], inputs: Iterable[str]) -> str:
        """A cache key over arbitrary JSON-able parts and the content of `inputs`."""
        return versioned_key(list(parts), [(p, self.digest(p)) for p in sorted(inputs)])


class FinishMemo:
    """Finished tiers by finish key (this run's memory, else the disk), and a commit's cluster renders."""

    def __init__(self, cache: BuildCache | None, memo: RunMemo) -> None:
        self.cache = cache
        self._memo = memo.finished

    def get(self, finish_key: str | None) -> tuple[RenderedTier, list[Finding]] | None:
        """A finished tier from this run's memory, else from the disk cache (keyed by content and variables)."""
        if finish_key is None:
            return None
        if finish_key in self._memo:
            return self._memo[finish_key]
        if self.cache is None:
            return None
        stored = self.cache.get(f"finished-{finish_key}")
        if stored is None or not self.cache.contains(f"finished-{finish_key}-objects"):
            return None
        summary, findings = stored
        remembered = self._from_summary(summary), findings
        self._memo[finish_key] = remembered
        return remembered

    def put(self, finish_key: str, rendered: RenderedTier, findings: list[Finding]) -> None:
        """Remember a finished tier in memory and on disk."""
        self._memo[finish_key] = (rendered, list(findings))
        if self.cache is not None:
            # The objects apart from the summary: a review loads only the tiers it diffs or checks anew.
            self.cache.put(f"finished-{finish_key}-objects", tuple(rendered.manifests))
            self.cache.put(f"finished-{finish_key}", (summarise(rendered), list(findings)))  # written last: its presence says the entry is complete

    def put_render(
        self, key: str, tiers: Mapping[TierId, RenderedTier], finish_findings: Mapping[TierId, list[Finding]], findings: list[Finding]
    ) -> None:
        """Keep a commit's cluster render as one entry: each tier's summary (its objects stay in their own entries)."""
        assert self.cache is not None
        summaries = [(tid, summarise(t), list(finish_findings.get(tid, ()))) for tid, t in tiers.items()]
        self.cache.put(key, (summaries, tuple(findings)))

    def get_render(self, key: str, cluster: str, entry: str, snapshot: Snapshot) -> ClusterRender | None:
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
            if tier.finish_key is not None:  # the other side of a review finishes its equal tiers from here
                self._memo.setdefault(tier.finish_key, (tier, tier_findings))
        return ClusterRender(cluster, entry, tiers, findings, snapshot)

    def _from_summary(self, summary: TierSummary) -> RenderedTier:
        """A finished tier back from its summary: its objects stay in the cache until used."""
        tier, count, discovery = summary
        if tier.finish_key is None or self.cache is None:
            return tier
        return replace(tier, manifests=StoredManifests(self.cache, tier.finish_key, count), discovery=discovery)


def render_key(snapshot: Snapshot, config: RepoConfig, version: str, cluster: str, entry: str, graph_only: bool) -> str | None:
    """The cache key of a commit's cluster render; None for a working tree (no tree id)."""
    if snapshot.tree is None:
        return None
    # The configuration is part of the key: it need not be the commit's own (`--config`, a review).
    return "render-" + versioned_key(version, snapshot.tree.oid, config.digest(), cluster, entry, graph_only)


def children_key(snapshot: Snapshot, config_digest: str, tier: RenderedTier, entry: str) -> str | None:
    """The cache key of the Kustomizations a finished tier applies (`child_specs`): None when it has no finish key.

    Its finish key covers the objects and their origins; the configuration says which sources are this
    repository; the blob ids of the files they were written in decide the lines `locate` finds there.
    """
    if tier.finish_key is None:
        return None
    files = sorted({m.origin.file for m in tier.flux_kustomizations() if m.origin is not None and m.origin.line is None})
    return "children-" + versioned_key("children", tier.finish_key, entry, config_digest, [(f, snapshot.file_digest(f)) for f in files])


def tree_key(snapshot: Snapshot, binary: KustomizeBinary) -> str | None:
    """The cache key of a commit's tree memo; None for a working tree."""
    return "tree-" + versioned_key(binary.version, snapshot.tree.oid) if snapshot.tree is not None else None


class FactsStore:
    """Tier facts by finish key: in this run's memo, else the build cache, else read from the objects."""

    def __init__(self, knowledge: KnowledgeBase, cache: BuildCache | None = None, memo: RunMemo | None = None) -> None:
        self.knowledge = knowledge
        self.cache = cache
        # Derived kinds depend on the knowledge's rules: another rule set is another entry.
        self._rules = hashlib.sha256(repr(knowledge.derived).encode()).hexdigest()[:16]
        self._memo = memo.facts if memo is not None else {}
        self._unkeyed: dict[int, tuple[RenderedTier, TierFacts]] = {}

    def of(self, tier: RenderedTier) -> TierFacts:
        """The facts of one finished tier."""
        if tier.finish_key is None:  # not cacheable: remembered for this very tier object only
            held = self._unkeyed.get(id(tier))
            if held is None or held[0] is not tier:
                held = self._unkeyed[id(tier)] = (tier, tier_facts(tier.manifests, self.knowledge, tier.remote))
            return held[1]
        key = f"facts-{tier.finish_key}-{self._rules}"
        facts = self._memo.get(key)
        if facts is None and self.cache is not None:
            facts = self.cache.get(key)
        if facts is None:
            facts = tier_facts(tier.manifests, self.knowledge, tier.remote)
            if self.cache is not None:
                self.cache.put(key, facts)
        self._memo[key] = facts
        return facts

    def of_render(self, render: ClusterRender) -> dict[TierId, TierFacts]:
        """The facts of every tier of a cluster, in the render's order."""
        return {tid: self.of(tier) for tid, tier in render.tiers.items()}


class FindingsMemo:
    """A commit's findings for one cluster: a commit checked before (the base of most reviews) has the same ones."""

    def __init__(self, cache: BuildCache | None, key: str | None) -> None:
        both = cache is not None and key is not None
        self.cache: BuildCache | None = cache if both else None
        self.key: str | None = key if both else None

    @classmethod
    def of(
        cls, cache: BuildCache | None, snapshot: Snapshot, config: RepoConfig, cluster: str, binary: KustomizeBinary, bootstrap: bool,
        releases: str = "",
    ) -> "FindingsMemo":
        """The memo of a commit's findings under one configuration; none without a cache or for a working tree (no tree id).

        The bootstrap is read from the same tree (its id covers every helmfile and script), so only
        `--no-bootstrap` adds to the key. `releases` says what its charts rendered to: a floating chart
        version, or a registry that was unreachable, can change the findings of one commit.
        """
        if cache is None or snapshot.tree is None:
            return cls(None, None)
        return cls(cache, versioned_key("findings", binary.version, snapshot.tree.oid, config.digest(), cluster, "bootstrap" if bootstrap else "bare", releases))

    def get(self) -> tuple[list[Finding], Any] | None:
        """The findings and cold-start result remembered, if any."""
        return self.cache.get(self.key) if self.cache is not None and self.key is not None else None

    def put(self, findings: list[Finding], cold_start: Any) -> None:
        """Remember them (callers never pass a render with a failed build: it may be a timeout)."""
        if self.cache is not None and self.key is not None:
            self.cache.put(self.key, (findings, cold_start))


_HEADS_LIMIT = 20_000  # files whose document heads a run keeps


def document_heads(snapshot: Snapshot, rel: str, by_content: dict[str, list]) -> list:
    """The document heads (kind, name, line) of a repo file, parsed once per content (`by_content`: blob id → heads)."""
    digest = snapshot.file_digest(rel)
    heads = by_content.get(digest) if digest else None
    if heads is None:
        heads = list(read_document_heads(snapshot.read_text(rel) or ""))
        if digest:
            if len(by_content) > _HEADS_LIMIT:
                by_content.clear()
            by_content[digest] = heads
    return heads


class LineMemo:
    """A snapshot's files read as document heads, with the first line of each (kind, name) written there."""

    def __init__(self, snapshot: Snapshot, by_content: dict[str, list] | None = None) -> None:
        self.snapshot = snapshot
        self.by_content = by_content if by_content is not None else {}  # the run's (RunMemo.heads): both sides share most files
        self._files: dict[str, tuple[list, dict[tuple[str, ...], int]]] = {}

    def heads(self, rel: str) -> tuple[list, dict[tuple[str, ...], int]]:
        """(document heads, line by kind, name and written namespace, and by kind and name) of a repo file."""
        located = self._files.get(rel)
        if located is None:
            heads = document_heads(self.snapshot, rel, self.by_content)
            exact: dict[tuple[str, ...], int] = {}
            for head in heads:
                exact.setdefault((head.kind, head.name, head.namespace), head.line)
                exact.setdefault((head.kind, head.name), head.line)
            located = self._files[rel] = (heads, exact)
        return located
