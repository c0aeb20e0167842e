"""What kustomize-controller writes before it builds: the path's kustomization.yaml, rewritten with the spec.

Also the safety pre-scan: every kustomization file a tier can reach is read before kustomize runs,
and every field that names a file is checked, so an absolute path or a path that lands outside the
repository (by `../` or through a symlink) is refused instead of read. A remote resource or generator
file is never fetched: the build's copy of its kustomization file leaves it out (`RemotePlan`).
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator, Mapping, Sequence

import yaml

from bot.engine.core.errors import InputError, InvalidYamlError, LimitError
from bot.engine.core.model import TierSpec
from bot.engine.core.tree import RepoTree
from bot.engine.core.tree import KUSTOMIZATION_FILES
from bot.engine.render.yamlio import GoQuoting, check_aliases, compose_stream, duplicate_keys, load_all, load_one

# Looks like a go-getter / URL reference kustomize would fetch (kustomize api/internal/git/repospec.go).
_REMOTE = re.compile(r"^(?:[a-z][a-z0-9+.-]*://|git@|github\.com/|gitlab\.com/|bitbucket\.org/)|\?ref=|\.git(?:/|$)|//", re.I)
# Where kustomize-controller fetches a remote entry and the build can leave it out: a remote resource or
# base (a git clone, or an HTTP file), a remote component, a generator's file (kustomize's loader reads
# an http(s) path over HTTP: api/internal/loader/fileloader.go). Any other field keeps the refusal.
_DROPPABLE_FIELDS = ("resources", "bases", "components", "configMapGenerator", "secretGenerator")
_PATH_FIELDS = ("resources", "bases", "components", "crds", "configurations", "generators", "transformers", "validators")
# Fields that make kustomize fetch or execute; refused outright (we never pass --enable-helm).
_REFUSED_FIELDS = ("helmCharts", "helmChartInflationGenerator", "helmGlobals")
_PLUGIN_FIELDS = ("generators", "transformers", "validators")
_FUNCTION_ANNOTATIONS = ("config.kubernetes.io/function", "config.k8s.io/function")
# What a kustomization reached through a generators/transformers/validators directory may hold: the
# objects it builds are plugin configurations, and any other field (patches, replacements, vars,
# components, prefixes, custom field specs…) could write into them a file path nobody vetted.
_PLUGIN_DIR_FIELDS = frozenset(
    f.casefold()
    for f in ("apiVersion", "kind", "metadata", "resources", "bases", "namespace", "commonLabels", "commonAnnotations", "labels", "buildMetadata", "sortOptions")
)


@dataclass(frozen=True)
class PathProblem:
    """An unsafe reference in a kustomization file."""

    file: str  # repo-relative kustomization file
    reference: str
    reason: str
    check: str = "unsafe-path"  # "render-failed" for a file kustomize cannot read either (not YAML), "render-limit" past a bound


@dataclass(frozen=True)
class RemoteEntry:
    """A remote entry of a kustomization file, which kustomize-controller fetches and Fluxwarden never does."""

    file: str  # repo-relative kustomization file
    reference: str  # as written (a generator file without its `key=`)
    field: str  # the kustomization field that names it
    base: bool  # a git remote base (a repository or a directory of one), not a single file over HTTP(S)


def is_remote_base(reference: str, field: str) -> bool:
    """Whether a remote entry is a git remote base rather than one file: what `--no-remote-bases` refuses.

    kustomize reads an http(s) resource as a file unless it names a repository (`//` subdirectory, `?ref=`,
    `.git`), and clones anything else (`github.com/org/repo/dir`, `git@…`, `ssh://`); a generator's file is
    always a file (kustomize api/internal/git/repospec.go, api/internal/target/kusttarget.go accumulateResources).
    """
    if field in ("configMapGenerator", "secretGenerator"):
        return False
    match = re.match(r"^https?://[^/]+(/[^?#]*)?(\?[^#]*)?", reference, re.I)
    if match is None:
        return True
    path, query = match.group(1) or "", match.group(2) or ""
    return "//" in path or ".git/" in path + "/" or bool(re.search(r"[?&](?:ref|version|submodules|timeout)=", query))


@dataclass(frozen=True)
class RemotePlan:
    """How a tier's build leaves out the remote entries of the kustomization files it reaches.

    kustomize loads each directory at its symlink-free path, so a kustomization file with a remote entry is
    rewritten where the build reads it: it and every directory that reaches it are real directories of the
    build's mirror (`directories`), each reached through a path without symlinks. When that cannot hold (a
    directory reached through a symlink), the entries are refused instead (`problems`).
    """

    entries: tuple[RemoteEntry, ...] = ()
    directories: frozenset[str] = frozenset()  # kustomization directories the mirror holds as real directories
    problems: tuple[PathProblem, ...] = ()


NO_REMOTE = RemotePlan()  # a build whose kustomization files name nothing remote


@dataclass
class KustomizationInfo:
    """What one directory's kustomization file references."""

    directory: str
    file: str | None
    directories: list[str] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    problems: list[PathProblem] = field(default_factory=list)
    remote: list[RemoteEntry] = field(default_factory=list)  # entries the build leaves out (see RemotePlan)
    fields: frozenset[str] = frozenset()  # its top-level keys
    references: list[str] = field(default_factory=list)  # what it names, joined to `directory` as kustomize joins (lexically)
    reading: frozenset[str] = field(default=frozenset(), repr=False, compare=False)  # the directories whose reading led here


class KustomizationIndex:
    """Reads kustomization files on demand and answers what a tier's build can reach."""

    def __init__(self, snapshot: RepoTree) -> None:
        self.snapshot = snapshot
        # Render threads share one index. Both memos are plain dicts on purpose: a value is a pure function of
        # the tree, so two threads that miss together compute the same thing, and dict get/set are atomic.
        self._cache: dict[str, KustomizationInfo] = {}
        self._alias_checked: dict[str, PathProblem | None] = {}

    def is_generated(self, directory: str) -> bool:
        """Whether Flux (and so we) generate this directory's kustomization."""
        return self.info(directory).file is None

    def info(self, directory: str) -> KustomizationInfo:
        """Parse (once) the kustomization file of `directory`."""
        return self._info(directory, frozenset())

    def _info(self, directory: str, reading: frozenset[str]) -> KustomizationInfo:
        """`info`, with the directories whose reading led here (a plugin directory may name its own)."""
        cached = self._cache.get(directory)
        if cached is not None:
            return cached
        if directory in reading:  # a cycle: what it reaches is being collected already
            return KustomizationInfo(directory=directory, file=None)
        info = self._cache[directory] = self._read(directory, reading | {directory})
        return info

    def reach(
        self, directory: str, extra_components: Iterable[str] = (), *, aliases: bool = True
    ) -> tuple[set[str], set[str], list[PathProblem]]:
        """Directories and files a build of `directory` may read, and the unsafe references found on the way.

        `aliases=False` leaves out the alias check of every file (see `alias_problems`).
        """
        seen_dirs: set[str] = set()
        files: set[str] = set()
        problems: list[PathProblem] = []
        stack = [directory, *extra_components]
        while stack:
            current = stack.pop()
            if current in seen_dirs:
                continue
            seen_dirs.add(current)
            info = self.info(current)
            if info.file:
                files.add(info.file)
            files.update(info.files)
            problems.extend(info.problems)
            stack.extend(info.directories)
        if aliases:
            problems.extend(self.alias_problems(files))
        return seen_dirs, files, problems

    def remote_plan(self, dirs: Iterable[str], root: str, components: Sequence[tuple[str, str]] = ()) -> RemotePlan:
        """How a build of `root` that reaches `dirs` leaves out their remote entries; `components` are the
        spec's, (joined lexically, symlink-free) as kustomize-controller lists them in the root's file."""
        reached = set(dirs)
        holding = [d for d in sorted(reached) if self.info(d).remote]
        if not holding:
            return RemotePlan()
        parents: dict[str, set[str]] = {}
        for d in reached:
            for child in self.info(d).directories:
                parents.setdefault(child, set()).add(d)
        needed, todo = set(holding), list(holding)
        while todo:  # every directory from which the build reaches one holding a remote entry
            for parent in parents.get(todo.pop(), ()):
                if parent not in needed:
                    needed.add(parent)
                    todo.append(parent)
        needed.add(root)
        entries = tuple(e for d in holding for e in self.info(d).remote)
        through_symlink = [real for joined, real in components if real in needed and joined != real]
        for d in needed:
            lexical = set(self.info(d).references)
            through_symlink += [c for c in self.info(d).directories if c in needed and c not in lexical]
        if through_symlink:
            problems = tuple(
                PathProblem(e.file, e.reference, f"is a remote reference in a directory reached through a symlink ({sorted(through_symlink)[0]}); Fluxwarden does not fetch remote content")
                for e in entries
            )
            return RemotePlan(problems=problems)
        return RemotePlan(entries, frozenset(needed))

    def alias_problems(self, files: Iterable[str]) -> list[PathProblem]:
        """YAML files that expand aliases too far: kustomize expands them itself (a billion-laughs file exhausts its memory)."""
        return [p for p in map(self._alias_problem, sorted(files)) if p is not None]

    def _alias_problem(self, rel: str) -> PathProblem | None:
        if rel in self._alias_checked:
            return self._alias_checked[rel]
        problem = None
        if rel.endswith((".yaml", ".yml")) or posixpath.basename(rel) in KUSTOMIZATION_FILES:
            try:
                check_aliases(self.snapshot.read_text(rel) or "", "the file")
            except InputError as exc:
                problem = PathProblem(rel, "", str(exc))
        self._alias_checked[rel] = problem
        return problem

    def _read(self, directory: str, reading: frozenset[str]) -> KustomizationInfo:
        name = kustomization_file(self.snapshot, directory)
        if name is None:
            return _generated_info(self.snapshot, directory)
        rel_file = posixpath.join(directory, name) if directory else name
        info = KustomizationInfo(directory=directory, file=rel_file, reading=reading)
        try:
            doc = load_one(self.snapshot.read_text(rel_file) or "", "the file")
        except InvalidYamlError as exc:
            info.problems.append(PathProblem(rel_file, "", str(exc), check="render-failed"))
            return info
        except LimitError as exc:
            info.problems.append(PathProblem(rel_file, "", f"{exc}; not rendered", check="render-limit"))
            return info
        except InputError as exc:
            info.problems.append(PathProblem(rel_file, "", str(exc)))
            return info
        if not isinstance(doc, dict):
            return info
        info.fields = frozenset(str(k) for k in doc)
        for key in _REFUSED_FIELDS:
            if any(_field(doc, key)):
                info.problems.append(PathProblem(rel_file, key, "needs kustomize's --enable-helm, which Fluxwarden never passes"))
        for source_field, ref in _references(doc):
            plugin = source_field in _PLUGIN_FIELDS
            # kustomize reads a generators/transformers/validators or patchesStrategicMerge entry as YAML
            # when it parses as objects, as a path otherwise (kusttarget_configplugin.go, PatchStrategicMergeTransformer.go).
            if (plugin or source_field == "patchesStrategicMerge") and _is_inline(ref):
                if plugin:
                    self._check_plugin_text(info, source_field, ref)
                continue
            self._classify(info, ref, plugin_config=plugin, source_field=source_field)
        return info

    def _classify(self, info: KustomizationInfo, ref: str, *, plugin_config: bool = False, source_field: str = "") -> None:
        """Check one file reference of `info`'s kustomization and note what it reaches.

        kustomize joins a reference to the kustomization's directory lexically (`filepath.Join`), then
        the OS follows symlinks; a directory is loaded at its symlink-free path, so what it names is
        relative to that path.
        """
        rel_file = info.file or info.directory
        local = posixpath.normpath(posixpath.join(info.directory, ref)) if not ref.startswith("/") else None
        # kustomize tries a reference as a local path before a remote one, so `apps//b` that exists is local.
        exists_locally = local is not None and not local.startswith("..") and self.snapshot.exists("" if local == "." else local)
        if _REMOTE.search(ref) and not exists_locally:
            if source_field in _DROPPABLE_FIELDS and info.file is not None:
                info.remote.append(RemoteEntry(info.file, ref, source_field, is_remote_base(ref, source_field)))
                return
            info.problems.append(PathProblem(rel_file, ref, "is a remote reference; Fluxwarden does not fetch remote bases"))
            return
        if ref.startswith("/"):
            info.problems.append(PathProblem(rel_file, ref, "is an absolute path"))
            return
        joined = posixpath.normpath(posixpath.join(info.directory, ref))
        if joined == ".." or joined.startswith("../"):
            info.problems.append(PathProblem(rel_file, ref, "climbs out of the repository"))
            return
        joined = "" if joined == "." else joined
        info.references.append(joined)
        real = self.snapshot.real_path(joined)
        if real is None:
            info.problems.append(PathProblem(rel_file, ref, "resolves through a symlink to outside the repository"))
            return
        if self.snapshot.is_dir(real):
            info.directories.append(real)
            if plugin_config:
                self._check_plugin_dir(info, real)
        else:
            info.files.append(real)
            if plugin_config and self.snapshot.is_file(real):
                self._check_plugin_file(info, real)

    def _check_plugin_dir(self, info: KustomizationInfo, directory: str) -> None:
        """A transformers/generators entry that is a directory feeds every object it builds in as a plugin config."""
        dirs, files, _ = self.reach(directory, aliases=False)
        for rel in sorted(dirs):
            built = self._info(rel, info.reading)
            extra = sorted(f for f in built.fields if f.casefold() not in _PLUGIN_DIR_FIELDS)
            if extra:
                info.problems.append(
                    PathProblem(
                        info.file or info.directory,
                        directory,
                        f"builds plugin configurations with {', '.join(extra)} ({built.file}), which could point them at files "
                        "Fluxwarden cannot vet; list the configuration files instead",
                    )
                )
                return
        for rel in sorted(files):
            if self.snapshot.is_file(rel) and posixpath.basename(rel) not in KUSTOMIZATION_FILES:
                self._check_plugin_file(info, rel)

    def _check_plugin_file(self, info: KustomizationInfo, rel: str) -> None:
        """A generator/transformer config: a KRM function or exec plugin is refused, a builtin's files are checked."""
        text = self.snapshot.read_text(rel) or ""
        if not any(a in text for a in _FUNCTION_ANNOTATIONS) and "exec:" not in text and not _PLUGIN_KINDS.search(text):
            return
        try:
            bodies = load_all(text, rel)
        except InputError:
            return  # kustomize fails on it too
        for body in bodies:
            self._check_plugin_body(info, rel, body)

    def _check_plugin_text(self, info: KustomizationInfo, key: str, text: str) -> None:
        for body in load_all(text, key):  # (it parsed: see _is_inline)
            self._check_plugin_body(info, key, body)

    def _check_plugin_body(self, info: KustomizationInfo, where: str, body: Any) -> None:
        if not isinstance(body, dict):
            return
        annotations = ((body.get("metadata") or {}).get("annotations") or {})
        if any(a in annotations for a in _FUNCTION_ANNOTATIONS) or str(body.get("apiVersion", "")) != "builtin" and "exec" in str(annotations):
            info.problems.append(
                PathProblem(info.file or info.directory, where, "declares a kustomize plugin (KRM function or exec); plugins are never run")
            )
            return
        if body.get("kind") == "HelmChartInflationGenerator":
            info.problems.append(PathProblem(info.file or info.directory, where, "needs kustomize's --enable-helm, which Fluxwarden never passes"))
            return
        # A builtin reads its files relative to the kustomization that lists it, not to its own file
        # (kustomize api/internal/target/kusttarget.go: plugins are configured with that kustomization's loader).
        for ref in _plugin_references(body):
            if body.get("kind") != "PatchStrategicMergeTransformer" or not _is_inline(ref):
                self._classify(info, ref)


# Builtin plugins that read files (kustomize api/internal/builtins: every `h.Loader().Load`).
_PLUGIN_KINDS = re.compile(
    r"\b(?:ConfigMapGenerator|SecretGenerator|PatchTransformer|PatchJson6902Transformer|PatchStrategicMergeTransformer"
    r"|ReplacementTransformer|ValueAddTransformer|HelmChartInflationGenerator)\b"
)


def _plugin_references(body: Mapping[str, Any]) -> Iterator[str]:
    """The file paths a builtin plugin configuration makes kustomize read."""
    kind = body.get("kind")
    if kind in ("ConfigMapGenerator", "SecretGenerator"):
        yield from _generator_references(body)
    elif kind in ("PatchTransformer", "PatchJson6902Transformer"):
        yield from _strings(_field(body, "path"))
    elif kind == "PatchStrategicMergeTransformer":
        yield from _strings(_entries(body, "paths"))
    elif kind == "ReplacementTransformer":
        yield from _strings(v for r in _entries(body, "replacements") if isinstance(r, dict) for v in _field(r, "path"))
    elif kind == "ValueAddTransformer":
        yield from _strings(_field(body, "targetFilePath"))


def _generator_references(gen: Mapping[str, Any]) -> Iterator[str]:
    """The files of one configMap/secret generator: `files` (`key=path` or a path), `envs`, `env`."""
    for item in _strings(_entries(gen, "files")):
        yield item.split("=", 1)[-1]  # kustomize api/internal/generators/utils.go ParseFileSource
    yield from _strings([*_entries(gen, "envs"), *_field(gen, "env")])


def _field(mapping: Mapping[Any, Any], name: str) -> list[Any]:
    """Every value kustomize may decode into field `name`: Go's encoding/json matches field names
    case-insensitively (and kustomize decodes YAML through JSON), so `Resources:` or `Path:` count too."""
    folded = name.casefold()
    return [v for k, v in mapping.items() if isinstance(k, str) and k.casefold() == folded]


def _entries(mapping: Mapping[Any, Any], name: str) -> list[Any]:
    """The items of every list value of field `name` (see `_field`)."""
    return [item for value in _field(mapping, name) if isinstance(value, list) for item in value]


def _strings(values: Iterable[Any]) -> Iterator[str]:
    return (v for v in values if isinstance(v, str))


def _is_inline(text: str) -> bool:
    """Whether kustomize takes an entry that may be a path or YAML as YAML: it parses as objects.

    A text our parser reads but go-yaml v3 (kyaml) refuses would be a path to kustomize: with a
    repeated key it is taken as a path here too, and checked as one.
    """
    try:
        documents = load_all(text, "the entry")
    except InputError:
        return False
    return bool(documents) and all(isinstance(d, dict) for d in documents) and next(duplicate_keys(text), None) is None


def kustomization_file(snapshot: RepoTree, directory: str) -> str | None:
    """The name of a directory's kustomization file, in kustomize's order; None when it has none."""
    return next((n for n in KUSTOMIZATION_FILES if snapshot.is_file(posixpath.join(directory, n))), None)


def _references(doc: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """Every path-like string a kustomization file names, with the field that names it."""
    for key in (*_PATH_FIELDS, "patchesStrategicMerge"):
        yield from ((key, entry) for entry in _strings(_entries(doc, key)))
    for key in ("patches", "patchesJson6902", "replacements"):
        for entry in _entries(doc, key):
            if isinstance(entry, dict):
                yield from ((key, ref) for ref in _strings(_field(entry, "path")))
    for key in ("configMapGenerator", "secretGenerator"):
        for gen in _entries(doc, key):
            if isinstance(gen, dict):
                yield from ((key, ref) for ref in _generator_references(gen))
    for openapi in _field(doc, "openapi"):
        if isinstance(openapi, dict):
            yield from (("openapi", ref) for ref in _strings(_field(openapi, "path")))


def generated_resources(snapshot: RepoTree, directory: str) -> list[str]:
    """What Flux's generator lists for a path with no kustomization file (fluxcd/pkg kustomize_generator.go).

    Every *.yaml/*.yml below it, recursively; a sub-directory with its own kustomization file is
    included as one resource and not descended into. Like Go's filepath.Walk, symlinked
    directories are not followed.
    """
    out: list[str] = []

    def visit(rel: str) -> None:
        subdirs, names = snapshot.list_dir(posixpath.join(directory, rel) if rel else directory)
        keep: list[str] = []
        for name in subdirs:
            sub = posixpath.join(rel, name)
            (out if snapshot.has_kustomization(posixpath.join(directory, sub)) else keep).append(sub)
        out.extend(posixpath.join(rel, n) for n in names if n.endswith((".yaml", ".yml")) and n not in KUSTOMIZATION_FILES)
        for sub in keep:  # depth first, in name order, as filepath.Walk visits them
            visit(sub)

    visit("")
    return out


def _generated_info(snapshot: RepoTree, directory: str) -> KustomizationInfo:
    info = KustomizationInfo(directory=directory, file=None)
    if not snapshot.is_dir(directory):
        return info
    for entry in generated_resources(snapshot, directory):
        joined = posixpath.join(directory, entry) if directory else entry
        (info.directories if snapshot.is_dir(joined) else info.files).append(joined)
        info.references.append(joined)
    return info




# kustomize api/types/kustomization.go `Kustomization`: the fields kustomize-controller's typed round
# trip of the file keeps (any other key is dropped; Go's JSON decoding matches names case-insensitively).
_KUSTOMIZATION_FIELDS = {
    name.casefold(): name
    for name in (
        "apiVersion", "kind", "metadata", "openapi", "namePrefix", "nameSuffix", "namespace", "commonLabels", "labels",
        "commonAnnotations", "patchesStrategicMerge", "patchesJson6902", "patches", "images", "imageTags", "replacements",
        "replicas", "vars", "sortOptions", "resources", "components", "crds", "bases", "configMapGenerator",
        "secretGenerator", "helmGlobals", "helmCharts", "helmChartInflationGenerator", "generatorOptions",
        "configurations", "generators", "transformers", "validators", "buildMetadata",
    )  # fmt: skip
}
_SELECTOR_FIELDS = ("group", "version", "kind", "name", "namespace", "labelSelector", "annotationSelector")
_STR, _SEQ, _MAP = "tag:yaml.org,2002:str", "tag:yaml.org,2002:seq", "tag:yaml.org,2002:map"
_MERGE = "tag:yaml.org,2002:merge"


@dataclass(frozen=True)
class BuildLayout:
    """What kustomize-controller builds for a tier, laid out in a mirror of the repository.

    The controller rewrites the path's own kustomization file with the spec's fields and builds it
    where it is (fluxcd/pkg kustomize/kustomize_generator.go GenerateManifest). Other tiers read the
    same files, so the rewritten file goes into a mirror of the path instead: the mirror holds it at
    `file`, and each path in `links` (the first step off the way to the root of each path the build
    reached, joined lexically as kustomize joins them) is a symlink to the repository's, so every
    relative path in it (`../../components/x`, a replacements file, a plugin's `path`) lands where it
    lands in the repository.
    """

    root: str  # the directory to build, without symlinks
    links: tuple[str, ...]  # repo paths to link into the mirror, in order
    file: str  # the rewritten kustomization file's repo path
    body: str  # its content
    empty: "EmptyKustomization | None" = None  # the file kustomize-controller builds holds nothing (None: it holds something)
    rewritten: tuple[tuple[str, str], ...] = ()  # (repo path, content): files kustomize reads, their remote entries left out


@dataclass(frozen=True)
class EmptyKustomization:
    """A tier whose kustomization file, as kustomize-controller writes it back, holds nothing (`controller_file_empty`)."""

    file: str  # the repo path of the path's own file, or of the one the controller generates
    generated: bool  # no kustomization file in the path, and no manifest for the generated one to list


def build_layout(
    snapshot: RepoTree,
    tier: TierSpec,
    root: str,
    components: Sequence[str],
    reached: Iterable[str],
    plan: RemotePlan = NO_REMOTE,
    index: "KustomizationIndex | None" = None,
) -> BuildLayout:
    """The mirror a tier builds in: `root` is the path without symlinks; `components` are the spec's, as
    written, missing ones already left out; `plan` says which kustomization files leave out remote entries
    (`index` reads them)."""
    name = kustomization_file(snapshot, root)
    rel = posixpath.join(root, name or "kustomization.yaml")
    index = index if index is not None else KustomizationIndex(snapshot)
    real = {""}  # directories the mirror holds as directories: the root's and each rewritten file's, with their ancestors
    for directory in {root, *plan.directories}:
        steps = directory.split("/") if directory else []
        real.update("/".join(steps[: i + 1]) for i in range(len(steps)))
    rewritten: dict[str, str] = {}
    paths = [*reached, *(posixpath.join(root, n) for n in KUSTOMIZATION_FILES if n != name)]
    for directory in sorted(plan.directories - {root}):
        info = index.info(directory)
        # Every kustomization file name of the directory too: kustomize refuses a directory with two.
        paths += [*info.references, *(posixpath.join(directory, n) for n in KUSTOMIZATION_FILES)]
        if info.remote and info.file is not None:
            rewritten[info.file] = without_remote(_read_utf8(snapshot, info.file), {e.reference for e in info.remote})
    links: dict[str, None] = {}
    for path in paths:
        steps = path.split("/") if path else []
        for depth in range(len(steps)):
            prefix = "/".join(steps[: depth + 1])
            if prefix not in real:  # the first step off the mirror's own directories: a link to the repository's
                if prefix != rel and prefix not in rewritten:
                    links[prefix] = None
                break
    text = _read_utf8(snapshot, rel) if name else None
    resources = None if name else ["./" + r for r in generated_resources(snapshot, root)]
    drop = frozenset(e.reference for e in index.info(root).remote) if root in plan.directories else frozenset()
    try:
        body = flux_kustomization(tier, text, resources, components, drop)
    except InputError as exc:
        raise InputError(f"{rel}: {exc}") from None
    empty = EmptyKustomization(rel, generated=not name) if controller_file_empty(tier, text, resources) else None
    return BuildLayout(
        root=root, links=tuple(p for p in links if snapshot.exists(p)), file=rel, body=body, empty=empty, rewritten=tuple(sorted(rewritten.items()))
    )


def _read_utf8(snapshot: RepoTree, rel: str) -> str:
    try:
        return (snapshot.read_bytes(rel) or b"").decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"{rel}: invalid UTF-8 at byte {exc.start}; kustomize cannot read it") from None


_LIST_FIELDS = ("resources", "bases", "components")
_GENERATOR_FIELDS = ("configmapgenerator", "secretgenerator")
_IDENTITY_FIELDS = ("apiversion", "kind", "metadata")


def without_remote(text: str, drop: Iterable[str]) -> str:
    """A kustomization file that kustomize reads itself (not the path's), its remote entries `drop` left out.

    Every other key is kept as written (as nodes); a file left with nothing but its identity gets
    `buildMetadata`, since kustomize refuses an empty kustomization.
    """
    try:
        documents = compose_stream(text)
    except yaml.YAMLError as exc:
        raise InputError(f"not valid YAML: {str(exc).splitlines()[0]}") from None
    root = documents[0] if documents else None
    if not isinstance(root, yaml.MappingNode):
        raise InputError("not a kustomization (the file is not a YAML mapping)")
    dropped = frozenset(drop)
    kept: list[tuple[yaml.Node, yaml.Node]] = []
    for key, value in root.value:
        pruned = _pruned(str(key.value) if isinstance(key, yaml.ScalarNode) else "", value, dropped)
        if pruned is not None:
            kept.append((key, pruned))
    if all(isinstance(k, yaml.ScalarNode) and str(k.value).casefold() in _IDENTITY_FIELDS for k, _ in kept):
        kept.append((_scalar("buildMetadata"), _sequence([_scalar("originAnnotations")])))
    document = yaml.MappingNode(_MAP, kept)
    return yaml.serialize(document, Dumper=_NodeDumper, allow_unicode=True, width=1 << 20)


def _pruned(name: str, node: yaml.Node, drop: frozenset[str]) -> yaml.Node | None:
    """A kustomization field's node without the remote entries `drop`; None when nothing is left of a list."""
    folded = name.casefold()
    if not drop or not isinstance(node, yaml.SequenceNode):
        return node
    if folded in _LIST_FIELDS:
        items = [n for n in node.value if not (isinstance(n, yaml.ScalarNode) and n.value in drop)]
        return yaml.SequenceNode(node.tag, items) if items else None
    if folded not in _GENERATOR_FIELDS:
        return node
    generators = []
    for generator in node.value:
        if isinstance(generator, yaml.MappingNode):
            fields: list[tuple[yaml.Node, yaml.Node]] = []
            for key, value in generator.value:
                field_name = str(key.value).casefold() if isinstance(key, yaml.ScalarNode) else ""
                if field_name in ("files", "envs") and isinstance(value, yaml.SequenceNode):
                    # A file source is `key=path` or a path (kustomize api/internal/generators/utils.go ParseFileSource).
                    value = yaml.SequenceNode(value.tag, [n for n in value.value if not (isinstance(n, yaml.ScalarNode) and n.value.split("=", 1)[-1] in drop)])
                elif field_name == "env" and isinstance(value, yaml.ScalarNode) and value.value in drop:
                    continue
                fields.append((key, value))
            generator = yaml.MappingNode(generator.tag, fields)
        generators.append(generator)
    return yaml.SequenceNode(node.tag, generators)


_EMPTY_NULLS = ("", "~", "null", "Null", "NULL")


def controller_file_empty(tier: TierSpec, text: str | None, generated: list[str] | None) -> bool:
    """Whether the kustomization file kustomize-controller builds holds nothing but apiVersion and kind.

    The controller reads the path's file into kustomize's type, merges the spec's fields and writes it back
    (fluxcd/pkg kustomize/kustomize_generator.go): every field written empty (`resources: []`) is dropped by
    `omitempty`. kustomize v5.3 then refuses the file ("kustomization.yaml is empty"); our own build adds
    `buildMetadata` and a placeholder, so it never sees that.
    """
    if tier.target_namespace or tier.name_prefix or tier.name_suffix or tier.patches or tier.images or tier.components:
        return False
    if text is None:
        return not generated
    try:
        fields = _top_level_fields(text)
    except InputError:
        return False  # the build reports it
    written = [node for key, node in fields.items() if key not in ("apiVersion", "kind")]
    # Only a file whose fields are all written empty: one with none at all is beyond this rule (it is not what
    # fluxcd/flux2#4601 reports).
    return bool(written) and all(_written_empty(node) for node in written)


def _written_empty(node: yaml.Node) -> bool:
    """Whether Go's `omitempty` drops the field (an empty list or map, an empty string, a null)."""
    if isinstance(node, (yaml.SequenceNode, yaml.MappingNode)):
        return not node.value
    if not isinstance(node, yaml.ScalarNode):
        return False
    return node.value == "" or (not node.style and node.value in _EMPTY_NULLS)  # (plain: no quote style)


def flux_kustomization(
    tier: TierSpec, text: str | None, generated: list[str] | None, components: Sequence[str], drop: frozenset[str] = frozenset()
) -> str:
    """The kustomization file the controller builds: the path's own (`text`), or the one it generates
    (`generated` resources), with the spec's fields merged in the way GenerateManifest merges them; the remote
    entries `drop` are left out (never fetched).

    The file is edited as YAML nodes (composed with go-yaml's tags), never loaded into Python values:
    every scalar keeps its text and style, so kustomize reads what it would have read in the original.
    """
    fields: dict[str, yaml.Node] = {}
    if text is None:
        fields["apiVersion"] = _scalar("kustomize.config.k8s.io/v1beta1")
        fields["kind"] = _scalar("Kustomization")
        if generated:
            fields["resources"] = _sequence([_scalar(r) for r in generated])
        else:
            fields["namespace"] = _scalar("_placeholder")  # kustomize refuses an empty kustomization
    else:
        written = _top_level_fields(text)
        fields = {k: v for k, v in ((k, _pruned(k, v, drop)) for k, v in written.items()) if v is not None}
        # An existing file without resources gets originAnnotations instead of its own buildMetadata (as written:
        # the controller sees the remote entries).
        if not _items(written.get("resources")):
            fields["buildMetadata"] = _sequence([_scalar("originAnnotations")])
    if tier.target_namespace:
        fields["namespace"] = _scalar(tier.target_namespace)
    if tier.name_prefix:
        fields["namePrefix"] = _scalar(tier.name_prefix)  # replaces the file's: not `outer-inner-`
    if tier.name_suffix:
        fields["nameSuffix"] = _scalar(tier.name_suffix)
    if tier.patches:
        # Flux's Patch API is `patch` and `target` (adaptSelector keeps the selector fields): a `path`
        # here would make kustomize read a file nobody vetted.
        patches = []
        for patch in tier.patches:
            entry: dict[str, Any] = {"patch": str(patch.get("patch") or "")} if patch.get("patch") else {}
            target = patch.get("target")
            if isinstance(target, Mapping):
                selector = {k: str(target[k]) for k in _SELECTOR_FIELDS if target.get(k)}
                if selector:
                    entry["target"] = selector
            patches.append(_node(entry))
        fields["patches"] = _sequence([*_items(fields.get("patches")), *patches])
    if components:
        fields["components"] = _sequence([*_items(fields.get("components")), *map(_scalar, components)])
    # spec.patchesStrategicMerge/patchesJson6902 (v1beta2) are not applied: the controller converts the
    # typed v1 object to unstructured first (kustomize-controller kustomization_controller.go), and v1
    # has neither field.
    if tier.images:
        fields["images"] = _merge_images(_items(fields.get("images")), tier.images)
    # originAnnotations tells us which repo file each object came from (render._pop_origin drops it).
    metadata = _items(fields.get("buildMetadata"))
    if not any(isinstance(n, yaml.ScalarNode) and n.value == "originAnnotations" for n in metadata):
        fields["buildMetadata"] = _sequence([*metadata, _scalar("originAnnotations")])
    document = yaml.MappingNode(_MAP, [(_scalar(k), v) for k, v in fields.items()])
    return yaml.serialize(document, Dumper=_NodeDumper, allow_unicode=True, width=1 << 20)


class _NodeDumper(GoQuoting, yaml.CSafeDumper):
    """Writes nodes as kustomize reads them back: tags resolved as go-yaml v2 resolves them (see yamlio),
    so a composed plain scalar stays plain and a string we add is quoted wherever go-yaml would not read a string.

    libyaml's emitter (PyYAML's Python one is its port): a tenth of a cold check's Python time was emitting these files.
    """


def _top_level_fields(text: str) -> dict[str, yaml.Node]:
    """The kustomization fields of a file's first document, as nodes (what `yaml.Unmarshal` into the type keeps)."""
    try:
        documents = compose_stream(text)
    except yaml.YAMLError as exc:
        raise InputError(f"not valid YAML: {str(exc).splitlines()[0]}") from None
    root = documents[0] if documents else None  # the first document, as Go's yaml.Unmarshal reads it
    if root is None or isinstance(root, yaml.ScalarNode) and root.tag == "tag:yaml.org,2002:null":
        return {}
    if not isinstance(root, yaml.MappingNode):
        raise InputError("not a kustomization (the file is not a YAML mapping)")
    fields: dict[str, yaml.Node] = {}
    merged: dict[str, yaml.Node] = {}
    for key, value in root.value:
        if key.tag == _MERGE:  # `<<: *base`: its keys count unless the file sets them itself
            for source in value.value if isinstance(value, yaml.SequenceNode) else [value]:
                if isinstance(source, yaml.MappingNode):
                    for k, v in source.value:
                        name = _KUSTOMIZATION_FIELDS.get(str(k.value).casefold()) if isinstance(k, yaml.ScalarNode) else None
                        if name:
                            merged.setdefault(name, v)
            continue
        name = _KUSTOMIZATION_FIELDS.get(str(key.value).casefold()) if isinstance(key, yaml.ScalarNode) else None
        if name:
            fields[name] = value
    return {**merged, **fields}


def _merge_images(existing: list[yaml.Node], images: Sequence[Mapping[str, Any]]) -> yaml.SequenceNode:
    """spec.images merged by name into the file's: newName replaces; newTag and digest replace as a unit."""
    entries = list(existing)
    for image in images:
        name = str(image.get("name") or "")
        new_name, new_tag, digest = (str(image.get(k) or "") for k in ("newName", "newTag", "digest"))
        found = next((e for e in entries if isinstance(e, yaml.MappingNode) and _scalar_value(_get(e, "name")) == name), None)
        if found is None:
            entries.append(_node({k: v for k, v in (("name", name), ("newName", new_name), ("newTag", new_tag), ("digest", digest)) if v}))
            continue
        if new_name:
            _set(found, "newName", new_name)
        if new_tag or digest:
            # Setting one clears the other, as the image transformer does (GenerateManifest).
            _set(found, "newTag", new_tag)
            _set(found, "digest", digest)
    return _sequence(entries)


def _get(mapping: yaml.MappingNode, key: str) -> yaml.Node | None:
    return next((v for k, v in reversed(mapping.value) if isinstance(k, yaml.ScalarNode) and k.value == key), None)


def _set(mapping: yaml.MappingNode, key: str, value: str) -> None:
    """Set a string field of a mapping node in place; an empty value removes it (Go's `omitempty`)."""
    kept = [(k, v) for k, v in mapping.value if not (isinstance(k, yaml.ScalarNode) and k.value == key)]
    mapping.value = kept + ([(_scalar(key), _scalar(value))] if value else [])


def _scalar_value(node: yaml.Node | None) -> str | None:
    return node.value if isinstance(node, yaml.ScalarNode) else None


def _items(node: yaml.Node | None) -> list[yaml.Node]:
    return list(node.value) if isinstance(node, yaml.SequenceNode) else []


def _scalar(value: str) -> yaml.ScalarNode:
    return yaml.ScalarNode(_STR, value)


def _sequence(items: list[yaml.Node]) -> yaml.SequenceNode:
    return yaml.SequenceNode(_SEQ, items)


def _node(value: Any) -> yaml.Node:
    """A node for plain data (strings, maps, lists)."""
    if isinstance(value, Mapping):
        return yaml.MappingNode(_MAP, [(_scalar(str(k)), _node(v)) for k, v in value.items()])
    if isinstance(value, (list, tuple)):
        return _sequence([_node(v) for v in value])
    return _scalar(str(value))
