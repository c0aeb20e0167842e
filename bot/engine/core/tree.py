"""What the engine reads a repository through: a `RepoTree` protocol and the pure path rules every reader shares.

The adapters implement it (`bot.adapters.workspace.Snapshot`: a sanitised copy on disk, or a commit read
lazily from git); the engine never learns which.
"""

from __future__ import annotations

import hashlib
import posixpath
from collections.abc import Hashable, Iterator
from dataclasses import dataclass
from typing import Any, MutableMapping, Protocol

KUSTOMIZATION_FILES = ("kustomization.yaml", "kustomization.yml", "Kustomization")
CONFIG_FILE = ".fluxwarden.yaml"


@dataclass(frozen=True)
class RefusedPath:
    """A repository path left out of the tree, and why."""

    path: str  # repo-relative, posix
    reason: str


class RepoTree(Protocol):
    """A repository as source-controller would ship it; every path is repo-relative and posix."""

    @property
    def refused(self) -> tuple[RefusedPath, ...]:
        """Paths the sanitised copy left out, and why."""

    @property
    def has_symlinks(self) -> bool:
        """Whether a symlink makes a path's content depend on another path (changed files no longer say what changed)."""

    @property
    def memo(self) -> MutableMapping[Hashable, Any]:
        """What the engine works out once per tree (its cluster discovery): it lives and goes with the tree."""

    @property
    def identity(self) -> Hashable:
        """Equal for two trees with the same content at the same place (a memo key)."""

    def read_config(self) -> str | None:
        """The `.fluxwarden.yaml` text (None: there is none); a ConfigError when it could not be read."""

    def read_bytes(self, rel: str) -> bytes | None:
        """A file's content, or None when it is not in the tree."""

    def read_text(self, rel: str) -> str | None:
        """A file's text, or None when it is not in the tree."""

    def is_dir(self, rel: str) -> bool: ...

    def is_file(self, rel: str) -> bool: ...

    def exists(self, rel: str) -> bool: ...

    def list_dir(self, rel: str) -> tuple[list[str], list[str]]:
        """Sorted (sub-directory names, other entry names) of a directory; symlinked directories in neither."""

    def has_kustomization(self, rel: str) -> bool:
        """Whether a directory has its own kustomization file (so Flux does not generate one)."""

    def file_digest(self, rel: str) -> str | None:
        """The git blob id of a file's content; None when it is not a file of the tree."""

    def entries(self, rel: str) -> list[str]:
        """Every entry name of a directory, symlinks included."""

    def real_path(self, rel: str) -> str | None:
        """The repo path `rel` lands on once symlinks are resolved (None: outside the repo)."""

    def bootstrap_view(self) -> "RepoTree":
        """The whole repository as its own bootstrap reads it: run from the checkout before Flux, it also sees
        what `.sourceignore` and the default exclusions keep out of Flux's artifact (never what is unsafe)."""


def normalise_repo_path(path: str) -> str | None:
    """Normalise a path written in the repo (`./apps`, `/apps/`) to `apps`; None when it climbs out."""
    cleaned = posixpath.normpath("/" + path.strip()).lstrip("/")
    raw = posixpath.normpath(path.strip().lstrip("/")) if path.strip() else "."
    if raw == ".." or raw.startswith("../"):
        return None
    return "" if cleaned in ("", ".") else cleaned


def blob_id(data: bytes) -> str:
    """git's object id of a file's content: a working-tree file and a committed one key the cache alike."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def yaml_files(tree: RepoTree, top: str, limit: int) -> Iterator[str]:
    """The YAML files below directory `top` (repo-relative), depth first in name order, at most `limit` of them."""
    stack, seen = [top], 0
    while stack:
        directory = stack.pop()
        subdirs, names = tree.list_dir(directory)
        stack.extend(posixpath.join(directory, d) if directory else d for d in reversed(subdirs))
        for name in names:
            if not name.endswith((".yaml", ".yml")):
                continue
            if seen >= limit:
                return
            seen += 1
            yield posixpath.join(directory, name) if directory else name
