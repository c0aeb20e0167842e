"""An on-disk cache of kustomize builds, keyed by the content of everything a build reads.

A tier's key is the kustomize version, the spec fields kustomize sees, and the git blob id of each
input file (kustomization files, the resources they name, every file of each directory they
reach). Finished tiers (after substitution) are cached under that key plus their variables.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import tempfile
import threading
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable

if TYPE_CHECKING:
    from bot.snapshot import Snapshot


@lru_cache(maxsize=1)
def code_fingerprint() -> str:
    """A hash of the engine's own code and data: another version (or a local edit) never reads these entries."""
    package = Path(__file__).resolve().parent
    digest = hashlib.sha256()
    for path in sorted(package.rglob("*")):
        if path.suffix in (".py", ".yaml") and path.is_file():
            digest.update(path.relative_to(package).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def versioned_key(*parts: Any) -> str:
    """A cache key over JSON-able parts and this engine's code."""
    return hashlib.sha256(json.dumps([code_fingerprint(), *parts], default=str).encode()).hexdigest()


def default_cache_dir() -> Path:
    """`$FLUXWARDEN_CACHE_DIR`, else `$XDG_CACHE_HOME/fluxwarden`, else `~/.cache/fluxwarden`."""
    explicit = os.environ.get("FLUXWARDEN_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "fluxwarden"


class ContentHasher:
    """Content ids of snapshot files and directories, memoised: tiers share files and each is read once.

    A file's id is its git blob id (known without reading it for a lazy snapshot of a commit); a
    directory's is a hash over the ids of the files directly in it.
    """

    def __init__(self, snapshot: "Snapshot") -> None:
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


class BuildCache:
    """Pickled kustomize results on disk (our own files, never repo content as code)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.hits = 0
        self.misses = 0

    def _path(self, key: str) -> Path:
        return self.directory / key[:2] / f"{key}.pickle"

    def get(self, key: str) -> Any | None:
        try:
            with self._path(key).open("rb") as handle:
                value = pickle.load(handle)
        except (OSError, pickle.UnpicklingError, EOFError, AttributeError, ImportError):
            self.misses += 1
            return None
        self.hits += 1
        return value

    def contains(self, key: str) -> bool:
        """Whether an entry exists (without reading it)."""
        return self._path(key).is_file()

    def discard(self, key: str) -> None:
        """Remove an entry, if present."""
        try:
            self._path(key).unlink()
        except OSError:
            pass

    def put(self, key: str, value: Any) -> None:
        path = self._path(key)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
            with os.fdopen(fd, "wb") as handle:
                pickle.dump(value, handle, protocol=pickle.HIGHEST_PROTOCOL)
            os.replace(tmp, path)
        except OSError:
            pass  # a cache that cannot be written only costs time
