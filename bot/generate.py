"""What kustomize-controller writes before it builds: a generated kustomization.yaml and the spec overlay.

Also the safety pre-scan: every kustomization file a tier can reach is read before kustomize runs,
so a remote base, an absolute path or a `../` out of the repo is refused instead of fetched or read.
"""

from __future__ import annotations

import os
import posixpath
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator

from bot.errors import InputError, InvalidYamlError
from bot.model import TierSpec
from bot.snapshot import KUSTOMIZATION_FILES, Snapshot
from bot.yamlio import check_aliases, dump, load_one

# Looks like a go-getter / URL reference kustomize would fetch (kustomize api/internal/git/repospec.go).
_REMOTE = re.compile(r"^(?:[a-z][a-z0-9+.-]*://|git@|github\.com/|gitlab\.com/|bitbucket\.org/)|\?ref=|\.git(?:/|$)|//", re.I)
_PATH_FIELDS = ("resources", "bases", "components", "crds", "configurations", "generators", "transformers", "validators")
# Fields that make kustomize fetch or execute; refused outright (we never pass --enable-helm).
_REFUSED_FIELDS = ("helmCharts", "helmChartInflationGenerator", "helmGlobals")
_PLUGIN_FIELDS = ("generators", "transformers", "validators")
_FUNCTION_ANNOTATIONS = ("config.kubernetes.io/function", "config.k8s.io/function")


@dataclass(frozen=True)
class PathProblem:
    """An unsafe reference in a kustomization file."""

    file: str  # repo-relative kustomization file
    reference: str
    reason: str
    check: str = "unsafe-path"  # "render-failed" for a file kustomize cannot read either (not YAML)


@dataclass
class KustomizationInfo:
    """What one directory's kustomization file references."""

    directory: str
    file: str | None
    directories: list[str] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    problems: list[PathProblem] = field(default_factory=list)


class KustomizationIndex:
    """Reads kustomization files on demand and answers what a tier's build can reach."""

    def __init__(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot
        self._cache: dict[str, KustomizationInfo] = {}
        self._generated: set[str] = set()
        self._lock = threading.Lock()
        self._alias_checked: dict[str, PathProblem | None] = {}

    def ensure_kustomization(self, directory: str) -> None:
        """Write Flux's generated kustomization.yaml into the snapshot when the path has none."""
        with self._lock:
            if directory in self._generated or self.snapshot.has_kustomization(directory):
                return
            body = {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "resources": generated_resources(self.snapshot, directory),
            }
            self.snapshot.write_file(posixpath.join(directory, "kustomization.yaml"), dump(body))
            self._generated.add(directory)

    def is_generated(self, directory: str) -> bool:
        """Whether Flux (and so we) generated this directory's kustomization."""
        return self.info(directory).file is None

    def info(self, directory: str) -> KustomizationInfo:
        """Parse (once) the kustomization file of `directory`."""
        with self._lock:
            cached = self._cache.get(directory)
        if cached is not None:
            return cached
        info = self._read(directory)
        with self._lock:
            self._cache[directory] = info
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

    def alias_problems(self, files: Iterable[str]) -> list[PathProblem]:
        """YAML files that expand aliases too far: kustomize expands them itself (a billion-laughs file exhausts its memory)."""
        return [p for p in map(self._alias_problem, sorted(files)) if p is not None]

    def _alias_problem(self, rel: str) -> PathProblem | None:
        with self._lock:
            if rel in self._alias_checked:
                return self._alias_checked[rel]
        problem = None
        if rel.endswith((".yaml", ".yml")) or posixpath.basename(rel) in KUSTOMIZATION_FILES:
            try:
                check_aliases(self.snapshot.read_text(rel) or "", "the file")
            except InputError as exc:
                problem = PathProblem(rel, "", str(exc))
        with self._lock:
            self._alias_checked[rel] = problem
        return problem

    def _read(self, directory: str) -> KustomizationInfo:
        name = next((n for n in KUSTOMIZATION_FILES if self.snapshot.is_file(posixpath.join(directory, n))), None)
        with self._lock:
            generated = directory in self._generated
        if name is None or generated:
            return _generated_info(self.snapshot, directory)
        rel_file = posixpath.join(directory, name) if directory else name
        info = KustomizationInfo(directory=directory, file=rel_file)
        try:
            doc = load_one(self.snapshot.read_text(rel_file) or "", "the file")
        except InvalidYamlError as exc:
            info.problems.append(PathProblem(rel_file, "", str(exc), check="render-failed"))
            return info
        except InputError as exc:
            info.problems.append(PathProblem(rel_file, "", str(exc)))
            return info
        if not isinstance(doc, dict):
            return info
        for key in _REFUSED_FIELDS:
            if doc.get(key):
                info.problems.append(PathProblem(rel_file, key, "needs kustomize's --enable-helm, which Fluxwarden never passes"))
        for source_field, ref in _references(doc):
            self._classify(info, ref, plugin_config=source_field in _PLUGIN_FIELDS)
        for key in ("generators", "transformers", "validators"):
            for entry in doc.get(key) or []:
                if isinstance(entry, str) and "\n" in entry:
                    _check_inline_plugin(info, key, entry)
        return info

    def _classify(self, info: KustomizationInfo, ref: str, *, plugin_config: bool = False) -> None:
        rel_file = info.file or info.directory
        local = posixpath.normpath(posixpath.join(info.directory, ref)) if not ref.startswith("/") else None
        # kustomize tries a reference as a local path before a remote one, so `apps//b` that exists is local.
        exists_locally = local is not None and not local.startswith("..") and self.snapshot.exists("" if local == "." else local)
        if _REMOTE.search(ref) and not exists_locally:
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
        if self.snapshot.is_dir(joined):
            info.directories.append(joined)
            if plugin_config:
                # A transformers/generators entry that is a directory feeds every object it builds in as a plugin config.
                for rel in sorted(self.reach(joined)[1]):
                    if self.snapshot.is_file(rel):
                        _check_plugin_file(self.snapshot, info, rel)
        else:
            info.files.append(joined)
            if plugin_config and self.snapshot.is_file(joined):
                _check_plugin_file(self.snapshot, info, joined)


def _references(doc: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """Every path-like string a kustomization file names, with the field that names it."""
    for key in _PATH_FIELDS:
        for entry in doc.get(key) or []:
            if isinstance(entry, str) and "\n" not in entry:
                yield key, entry
    for entry in doc.get("patchesStrategicMerge") or []:
        if isinstance(entry, str) and "\n" not in entry and ":" not in entry:
            yield "patchesStrategicMerge", entry
    for key in ("patches", "patchesJson6902", "replacements"):
        for entry in doc.get(key) or []:
            if isinstance(entry, dict) and isinstance(entry.get("path"), str):
                yield key, entry["path"]
    for key in ("configMapGenerator", "secretGenerator"):
        for gen in doc.get(key) or []:
            if not isinstance(gen, dict):
                continue
            for item in gen.get("files") or []:
                if isinstance(item, str):
                    yield key, item.split("=", 1)[-1]
            for item in [*(gen.get("envs") or []), gen.get("env")]:
                if isinstance(item, str):
                    yield key, item
    openapi = doc.get("openapi")
    if isinstance(openapi, dict) and isinstance(openapi.get("path"), str):
        yield "openapi", openapi["path"]


def _check_inline_plugin(info: KustomizationInfo, key: str, text: str) -> None:
    try:
        body = load_one(text, key)
    except InputError:
        return
    _flag_function(info, key, body)


def _check_plugin_file(snapshot: Snapshot, info: KustomizationInfo, rel: str) -> None:
    """A generator/transformer config that names a KRM function or exec plugin is refused, not run."""
    text = snapshot.read_text(rel) or ""
    if not any(a in text for a in _FUNCTION_ANNOTATIONS) and "exec:" not in text:
        return
    try:
        body = load_one(text, rel)
    except InputError:
        return
    _flag_function(info, rel, body)


def _flag_function(info: KustomizationInfo, where: str, body: Any) -> None:
    if not isinstance(body, dict):
        return
    annotations = ((body.get("metadata") or {}).get("annotations") or {})
    if any(a in annotations for a in _FUNCTION_ANNOTATIONS) or str(body.get("apiVersion", "")) != "builtin" and "exec" in str(annotations):
        info.problems.append(
            PathProblem(info.file or info.directory, where, "declares a kustomize plugin (KRM function or exec); plugins are never run")
        )


def generated_resources(snapshot: Snapshot, directory: str) -> list[str]:
    """What Flux's generator lists for a path with no kustomization file (fluxcd/pkg kustomize_generator.go).

    Every *.yaml/*.yml below it, recursively; a sub-directory with its own kustomization file is
    included as one resource and not descended into. Like Go's filepath.Walk, symlinked
    directories are not followed.
    """
    out: list[str] = []

    def visit(rel: str) -> None:
        subdirs, names = snapshot.list_dir(posixpath.join(directory, rel) if rel else directory)
        keep = []
        for name in subdirs:
            sub = posixpath.join(rel, name)
            (out if snapshot.has_kustomization(posixpath.join(directory, sub)) else keep).append(sub)
        out.extend(posixpath.join(rel, n) for n in names if n.endswith((".yaml", ".yml")) and n not in KUSTOMIZATION_FILES)
        for sub in keep:  # depth first, in name order, as filepath.Walk visits them
            visit(sub)

    visit("")
    return out


def _generated_info(snapshot: Snapshot, directory: str) -> KustomizationInfo:
    info = KustomizationInfo(directory=directory, file=None)
    if not snapshot.is_dir(directory):
        return info
    for entry in generated_resources(snapshot, directory):
        joined = posixpath.join(directory, entry) if directory else entry
        (info.directories if snapshot.is_dir(joined) else info.files).append(joined)
    return info


def write_overlay(snapshot: Snapshot, tier: TierSpec, workdir: Path) -> Path:
    """Write the tier's overlay: its path plus what the controller merges in from the Kustomization spec.

    kustomize-controller writes targetNamespace, namePrefix/nameSuffix, patches, images and
    components into the path's own kustomization.yaml (fluxcd/pkg kustomize_generator.go); an
    overlay on top of the path gives the same result without touching files other tiers share.
    `originAnnotations` tells us which repo file each object came from.
    """
    workdir.mkdir(parents=True, exist_ok=True)
    rel_root = os.path.relpath(snapshot.path(tier.path), workdir)
    overlay: dict[str, Any] = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [rel_root],
        "buildMetadata": ["originAnnotations"],
    }
    if tier.target_namespace:
        overlay["namespace"] = tier.target_namespace
    if tier.name_prefix:
        overlay["namePrefix"] = tier.name_prefix
    if tier.name_suffix:
        overlay["nameSuffix"] = tier.name_suffix
    if tier.patches:
        # Only the fields Flux's Patch API has: a `path` here would make kustomize read a file we never vetted.
        overlay["patches"] = [{k: p[k] for k in ("patch", "target") if k in p} for p in tier.patches]
    if tier.images:
        overlay["images"] = [dict(i) for i in tier.images]
    if tier.components:
        overlay["components"] = [
            os.path.relpath(snapshot.path(posixpath.normpath(posixpath.join(tier.path, c))), workdir) for c in tier.components
        ]
    (workdir / "kustomization.yaml").write_text(dump(overlay), encoding="utf-8")
    return workdir
