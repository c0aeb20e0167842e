"""ExternalArtifacts an ArtifactGenerator assembles from this repository, mapped back onto repository paths.

An ArtifactGenerator (source.extensions.fluxcd.io, Flux 2.7 source-watcher) copies paths of its
sources into a new tree, the ExternalArtifact a Kustomization applies. When a copy puts a
repository directory (or file) at the same relative place for every copy the build reads, the
artifact is a part of the repository seen from one directory: a Kustomization's `path` in it is
that directory's `path`, and its `../` references resolve the same. Anything else (a pattern that
copies some files, `exclude`, the Merge or Extract strategy, `pathPattern`, another source) is not
representable: the tier is named in an info line and not rendered.

Copy semantics follow fluxcd/source-watcher internal/builder/builder.go `applyCopyOperation`:
`@a/dir/**` copies the contents of dir into `to` (fs.Glob matches dir's entries, each copied
recursively, `calculateGlobDestination` strips the `dir/` prefix); `@a/dir` and `@a/dir/` alike copy
dir as `to/<basename>` (`applySingleDirectoryCopy`, tests "directory copy with[out] trailing slash
creates subdirectory": `@source/config/` → `@artifact/dest/` gives `dest/config/`); `@a/file` copies it
to `to/<basename>` when `to` ends with `/`, else to `to`; later copies overwrite earlier ones. A path
after `@alias/` is relative to that source's artifact root (an os.Root: it cannot climb out), which
for an artifact of this repository's SUBDIR is SUBDIR.

A Kustomization whose path is a directory above what a copy put there (xunholy/k8s-gitops copies
`@repo/apps/x/app/` to `@artifact/apps/x/app/`, which lands at `apps/x/app/app`, and applies
`./apps/x/app`) has no kustomization file there: kustomize-controller generates one that lists the
copied directory as one resource when it has its own kustomization file, else its manifests
(fluxcd/pkg kustomize/kustomize_generator.go, see bot/engine/render/generate.py `generated_resources`). When
one directory copy is all the artifact holds below the path, that builds what the copied directory builds.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from bot.engine.core.model import Manifest, SourceRef
from bot.engine.core.tree import RepoTree
from bot.engine.core.tree import normalise_repo_path

GENERATOR_GROUP = "source.extensions.fluxcd.io"
_GLOB = set("*?[]")


def is_artifact_generator(manifest: Manifest) -> bool:
    """Whether an object is a source-watcher ArtifactGenerator."""
    return manifest.ref.kind == "ArtifactGenerator" and manifest.ref.group == GENERATOR_GROUP


@dataclass(frozen=True)
class Copy:
    """One copy operation that puts a repository path at an artifact path (both normalised, "" for the root)."""

    source: str
    target: str
    directory: bool = True  # a directory's tree, not one file


@dataclass(frozen=True)
class Artifact:
    """One ExternalArtifact of a generator: its copies from this repository, or why they cannot be mapped."""

    generator: str  # `ArtifactGenerator/ns/name`, for messages
    copies: tuple[Copy, ...] = ()
    problem: str | None = None


@dataclass(frozen=True)
class Placement:
    """Where a Kustomization's path in an artifact lies in the repository, and what of it the artifact holds."""

    path: str  # the repository directory to build
    regions: tuple[str, ...]  # repository paths the artifact holds at the same relative place
    origin: str  # a repository directory the artifact holds ...
    target: str = ""  # ... at this artifact path ("" for the root): the rest maps relative to it


def generated_artifacts(manifest: Manifest, source_root: Callable[[SourceRef], str | None], snapshot: RepoTree) -> dict[tuple[str, str], Artifact]:
    """The ExternalArtifacts (namespace, name) an ArtifactGenerator produces, each mapped or with its problem.

    `source_root` is the repository directory a source's artifact holds at its root, None when the
    source is not this repository (RepoConfig.source_root)."""
    namespace = manifest.ref.namespace or "flux-system"
    label = f"ArtifactGenerator/{namespace}/{manifest.ref.name}"
    spec = manifest.body.get("spec")
    if not isinstance(spec, dict):
        return {}
    aliases: dict[str, str | None] = {}
    for source in _list(spec.get("sources")):
        if isinstance(source, dict) and source.get("alias"):
            ref = SourceRef(str(source.get("kind", "")), str(source.get("name", "")), str(source.get("namespace") or namespace))
            aliases[str(source["alias"])] = source_root(ref)
    out: dict[tuple[str, str], Artifact] = {}
    for artifact in _list(spec.get("artifacts")):
        if not isinstance(artifact, dict) or not artifact.get("name"):
            continue
        key = (namespace, str(artifact["name"]))
        if spec.get("pathPattern"):
            out[key] = Artifact(label, problem=f"{label} discovers its artifacts with pathPattern")
            continue
        copies: list[Copy] = []
        problem = None
        for op in _list(artifact.get("copy")):
            parsed = _copy(op, aliases, snapshot)
            if isinstance(parsed, str):
                problem = f"{label} {parsed}"
                break
            copies.append(parsed)
        out[key] = Artifact(label, tuple(copies) if problem is None else (), problem)
    return out


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _copy(op: Any, aliases: Mapping[str, str | None], snapshot: RepoTree) -> Copy | str:
    """One copy operation as a repository path → artifact path, or why it is not a plain copy of this repo."""
    if not isinstance(op, dict) or not isinstance(op.get("from"), str) or not isinstance(op.get("to"), str):
        return "has a copy operation without `from` and `to`"
    src, dest = op["from"], op["to"]
    if op.get("strategy") not in (None, "", "Overwrite"):
        return f"copies {src} with strategy {op['strategy']}"
    if op.get("exclude"):
        return f"copies {src} with exclude patterns"
    alias, slash, pattern = src[1:].partition("/")
    if not src.startswith("@") or not slash or not dest.startswith("@artifact/"):
        return f"has a copy operation {src} → {dest} that source-watcher rejects"
    if alias not in aliases:
        return f"copies from alias @{alias}, which it does not define"
    base_dir = aliases[alias]
    if base_dir is None:
        return f"copies {src} from a source that is not this repository"
    to = normalise_repo_path(dest[len("@artifact/"):])
    if to is None:
        return f"copies to {dest}, outside the artifact"
    if any(c in _GLOB for c in pattern):
        if pattern == "**":
            return Copy(base_dir, to)
        base = pattern[: -len("/**")] if pattern.endswith("/**") else None
        if base is None or any(c in _GLOB for c in base):
            return f"copies the files matching {src}, not whole directories"
        within = normalise_repo_path(base)
        return Copy(_under(base_dir, within), to) if within is not None else f"copies {src}, outside its source"
    within = normalise_repo_path(pattern)
    if within is None:
        return f"copies {src}, outside its source"
    source = _under(base_dir, within)
    if snapshot.is_dir(source):
        # The source root itself (`@a/`) has no basename to add: its contents land in `to`.
        return Copy(source, posixpath.join(to, posixpath.basename(within)) if within else to)
    if dest.endswith("/"):
        return Copy(source, posixpath.join(to, posixpath.basename(source)), directory=False)
    return f"copies the file {src} to {dest}"  # onto an existing directory or not depends on earlier copies


def _under(base: str, path: str) -> str:
    return posixpath.join(base, path) if base and path else base or path


def place(artifact: Artifact, path: str, components: tuple[str, ...] = ()) -> Placement | str:
    """Where `path` (inside the artifact) is in the repository, or why it cannot be said.

    `components` are the Kustomization's `spec.components` (relative to `path`)."""
    if artifact.problem:
        return artifact.problem
    # The last copy that holds `path` decides its content (later copies overwrite earlier ones).
    holder = next((c for c in reversed(artifact.copies) if _within(path, c.target)), None)
    if holder is None:
        below = [c for c in artifact.copies if _within(c.target, path)]
        if below:
            return _above(artifact, path, below, components)
        return f"{artifact.generator} copies nothing to ./{path or ''}" if artifact.copies else f"{artifact.generator} copies nothing"
    root = _root(holder)
    if root is None:
        return f"{artifact.generator} puts {holder.source or '.'} at ./{holder.target}, elsewhere than in the repository"
    consistent = [c for c in artifact.copies if _root(c) == root]
    for other in artifact.copies:
        # A copy from elsewhere that lands in or over the mapped part changes what the build reads.
        if other not in consistent and any(_within(other.target, c.target) or _within(c.target, other.target) for c in consistent):
            return f"{artifact.generator} assembles ./{other.target} from {other.source or '.'}, elsewhere than in the repository"
    repo_path = posixpath.normpath(posixpath.join(root, path)) if root or path else ""
    return Placement("" if repo_path == "." else repo_path, tuple(dict.fromkeys(c.source for c in consistent)), root)


def _above(artifact: Artifact, path: str, below: list[Copy], components: tuple[str, ...]) -> Placement | str:
    """A path above everything copied there: the generated kustomization builds the one copied directory."""
    where = f"./{path}" if path else "./"
    if len(set(below)) > 1:
        shown = ", ".join(f"./{c.target}" for c in dict.fromkeys(below))
        return f"{artifact.generator} puts {shown} below {where}, which has no kustomization file: its generated one is not a repository directory"
    [copy] = set(below)
    if not copy.directory:
        return f"{artifact.generator} puts only the file {copy.source} below {where}, which has no kustomization file"
    if components:
        # They resolve against `path` in the artifact, which holds nothing there but the copy.
        return f"{artifact.generator} holds only ./{copy.target} below {where}, where the Kustomization's components ({', '.join(components)}) are not copied"
    return Placement(copy.source, (copy.source,), copy.source, copy.target)


def _root(copy: Copy) -> str | None:
    """The repository directory the artifact root is at, seen from this copy; None when it has none."""
    if not copy.target:
        return copy.source
    if copy.source == copy.target:
        return ""
    if copy.source.endswith("/" + copy.target):
        return copy.source[: -len(copy.target) - 1]
    return None


def _within(path: str, directory: str) -> bool:
    return directory == "" or path == directory or path.startswith(directory + "/")


def unreadable(artifact: Artifact, placement: Placement, inputs: frozenset[str]) -> tuple[list[str], list[str]]:
    """What a build read in the repository that the artifact does not hold at the same place.

    Returns (absent, elsewhere): paths the artifact does not have at all (Flux's build fails, as it
    would on any missing file or a `../` out of the artifact), and paths where the artifact holds
    something copied from elsewhere (the render would not be Flux's).
    """
    absent, elsewhere = [], []
    for rel in sorted(inputs):
        if any(_within(rel, r) for r in placement.regions):
            continue
        in_artifact = posixpath.normpath(posixpath.join(placement.target, posixpath.relpath(rel or ".", placement.origin or ".")))
        if in_artifact != ".." and not in_artifact.startswith("../") and any(_within(in_artifact, c.target) for c in artifact.copies):
            elsewhere.append(rel)
        else:
            absent.append(rel)
    return absent, elsewhere
