"""An on-disk cache of kustomize builds, keyed by the content of everything a build reads.

bot/pipeline/memo.py makes the keys and decides what goes in. A tier's key is the kustomize version, the spec fields kustomize sees, and the git blob id of each
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
import time
from functools import lru_cache
from pathlib import Path
from typing import Any


# The code whose change can change a cached result: the engine (models, Flux rules, checks, its data),
# the pipeline that runs it (what a render memoises and under which keys), and the adapters whose output
# is cached or shapes a key: kustomize (how a build runs), workspace and sourceignore (what a snapshot
# holds and how a file is hashed), git (a commit's listing, cached by tree id) and this module (keys and
# format). Service code, handlers and the other adapters (GitHub, Kubernetes, scheduler) never reach an
# entry: an edit there keeps the cache warm instead of making every deployment rebuild every tier.
# tests/adapters/test_cache.py fails when the pipeline comes to import an adapter this list leaves out.
FINGERPRINTED = (
    "engine", "pipeline", "adapters/cache.py", "adapters/charts.py", "adapters/git.py", "adapters/helm.py", "adapters/kustomize.py",
    "adapters/memory.py", "adapters/sourceignore.py", "adapters/workers.py", "adapters/workspace.py",
)


def fingerprint(package: Path) -> str:
    """A hash of the code and data under `package` (the `bot` directory) that FINGERPRINTED names."""
    digest = hashlib.sha256()
    for name in FINGERPRINTED:
        top = package / name
        paths = sorted(top.rglob("*")) if top.is_dir() else [top]
        for path in paths:
            if path.suffix in (".py", ".yaml") and path.is_file():
                digest.update(path.relative_to(package).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


@lru_cache(maxsize=1)
def code_fingerprint() -> str:
    """This installation's `fingerprint`: another version (or a local edit) never reads these entries."""
    return fingerprint(Path(__file__).resolve().parents[1])


def versioned_key(*parts: Any) -> str:
    """A cache key over JSON-able parts and this engine's code."""
    return hashlib.sha256(json.dumps([code_fingerprint(), *parts], default=str).encode()).hexdigest()


PRUNE_GRACE_SECONDS = 3600.0
PRUNE_EVERY_SECONDS = 600.0
DEFAULT_MAX_BYTES = 2 * 1024**3


def cache_budget() -> int:
    """How many bytes the build cache may hold: `$FLUXWARDEN_CACHE_MAX_BYTES`, else 2 GiB."""
    try:
        return max(0, int(os.environ.get("FLUXWARDEN_CACHE_MAX_BYTES", "")))
    except ValueError:
        return DEFAULT_MAX_BYTES


def _mark_used(path: Path) -> bool:
    """Whether `path` exists; its mtime becomes now, so pruning removes the least recently used first."""
    try:
        os.utime(path)
        return True
    except FileNotFoundError:
        return False
    except OSError:  # e.g. a read-only cache: still there, just not marked
        return path.is_file()


def _remove(path: str) -> bool:
    try:
        os.unlink(path)
        return True
    except OSError:
        return False


def default_cache_dir() -> Path:
    """`$FLUXWARDEN_CACHE_DIR`, else `$XDG_CACHE_HOME/fluxwarden`, else `~/.cache/fluxwarden`."""
    explicit = os.environ.get("FLUXWARDEN_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "fluxwarden"


class BuildCache:
    """Pickled kustomize results on disk (our own files, never repo content as code)."""

    def __init__(self, directory: Path, *, max_write_bytes: int | None = None) -> None:
        self.directory = directory
        self.hits = 0
        self.misses = 0
        # One run writes at most this much (None: no bound): pruning spares entries younger than an hour,
        # so a run that wrote without end (a PR rendering ever more tiers) would fill the volume first.
        self.max_write_bytes = max_write_bytes
        self.written_bytes = 0
        self._write_lock = threading.Lock()

    def _path(self, key: str) -> Path:
        return self.directory / key[:2] / f"{key}.pickle"

    def get(self, key: str) -> Any | None:
        path = self._path(key)
        try:
            with path.open("rb") as handle:
                value = pickle.load(handle)
        except (OSError, pickle.UnpicklingError, EOFError, AttributeError, ImportError):
            self.misses += 1
            return None
        _mark_used(path)
        self.hits += 1
        return value

    def contains(self, key: str) -> bool:
        """Whether an entry exists (without reading it); like a read, it marks the entry used."""
        return _mark_used(self._path(key))

    def prune(self, max_bytes: int, *, grace_seconds: float = PRUNE_GRACE_SECONDS) -> tuple[int, int]:
        """Over `max_bytes`, remove the least recently used entries down to 80% of it; return (removed, bytes left).

        Entries used within `grace_seconds` stay (a run in progress may still need them; a run that
        loses one anyway fails once with "run again" and the next run rebuilds it), and so do files
        that are not ours. Temporary files of interrupted writes older than the grace go too.
        """
        now = time.time()
        entries: list[tuple[float, int, str]] = []
        total = 0
        try:
            shards = [e for e in os.scandir(self.directory) if e.is_dir(follow_symlinks=False)]
        except OSError:
            return 0, 0
        for shard in shards:
            try:
                files = list(os.scandir(shard.path))
            except OSError:
                continue
            for entry in files:
                try:
                    info = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                if entry.name.endswith(".tmp") and now - info.st_mtime > grace_seconds:
                    _remove(entry.path)
                elif entry.name.endswith(".pickle"):
                    entries.append((info.st_mtime, info.st_size, entry.path))
                    total += info.st_size
        removed = 0
        if total > max_bytes:
            for mtime, size, path in sorted(entries):
                if total <= max_bytes * 0.8 or now - mtime < grace_seconds:
                    break
                if _remove(path):
                    total -= size
                    removed += 1
        return removed, total

    def prune_if_due(self, max_bytes: int, *, every_seconds: float = PRUNE_EVERY_SECONDS) -> tuple[int, int] | None:
        """`prune`, at most once per `every_seconds` for this directory (a walk of the whole cache costs time)."""
        marker = self.directory / ".pruned"
        try:
            if time.time() - marker.stat().st_mtime < every_seconds:
                return None
        except OSError:
            pass
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            marker.touch()
        except OSError:
            return None  # a cache we cannot write to does not grow either
        return self.prune(max_bytes)

    def discard(self, key: str) -> None:
        """Remove an entry, if present."""
        _remove(str(self._path(key)))

    def put(self, key: str, value: Any) -> None:
        path = self._path(key)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
            with os.fdopen(fd, "wb") as handle:
                pickle.dump(value, handle, protocol=pickle.HIGHEST_PROTOCOL)
                size = handle.tell()
            with self._write_lock:
                if self.max_write_bytes is not None and self.written_bytes + size > self.max_write_bytes:
                    os.unlink(tmp)  # over this run's bound: the entry is only not cached
                    return
                self.written_bytes += size
            os.replace(tmp, path)
        except OSError:
            pass  # a cache that cannot be written only costs time
