"""`.fluxwarden.yaml`: where each cluster starts, which source is this repo, the tier order file."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Mapping

from bot.errors import ConfigError, InputError
from bot.model import SourceRef
from bot.snapshot import CONFIG_FILE, KUSTOMIZATION_FILES, Snapshot, normalise_repo_path
from bot.yamlio import MAX_FILE_BYTES, load_one
CLUSTERS_DIR = "clusters"


@dataclass(frozen=True)
class TierOrderConfig:
    """Where the bootstrap script keeps its tier order list."""

    file: str
    variable: str


@dataclass(frozen=True)
class RepoConfig:
    """Settings read from the repository's `.fluxwarden.yaml` (all optional)."""

    clusters: Mapping[str, str] = field(default_factory=dict)  # name -> entry path
    sources: tuple[SourceRef, ...] = (SourceRef("GitRepository", "flux-system", "flux-system"),)
    tier_order: TierOrderConfig | None = None
    runtime_crds: tuple[Mapping[str, Any], ...] = ()
    strict_substitution: bool = False
    # cluster -> tiers (`name` or `namespace/name`) every change must find Ready there (live preconditions)
    required_tiers: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def is_this_repo(self, source: SourceRef) -> bool:
        """Whether a Kustomization's sourceRef is the repository being checked."""
        return source in self.sources

    def digest(self) -> str:
        """A hash of every setting: cached results of a commit are keyed by it, since the
        configuration need not come from that commit (`--config`, the working tree's in a review)."""
        return hashlib.sha256(json.dumps(asdict(self), sort_keys=True, default=str).encode()).hexdigest()


def snapshot_config(snapshot: Snapshot) -> RepoConfig:
    """The configuration a snapshot carries (its `.fluxwarden.yaml`, read whatever `.sourceignore` says)."""
    return load_repo_config(snapshot.read_config())


def read_config_file(path: Path) -> RepoConfig:
    """`--config FILE`: a `.fluxwarden.yaml` kept anywhere (the user named it; it is not repository content)."""
    try:
        if path.stat().st_size > MAX_FILE_BYTES:
            raise ConfigError(f"{path} is over the {MAX_FILE_BYTES:,}-byte limit")
        text = path.read_bytes().decode("utf-8", errors="replace")
    except OSError as exc:
        raise ConfigError(f"--config {path}: {exc.strerror}") from None
    return load_repo_config(text)


def load_repo_config(text: str | None) -> RepoConfig:
    """Parse `.fluxwarden.yaml`; a missing file gives the defaults."""
    if text is None:
        return RepoConfig()
    try:
        doc = load_one(text, CONFIG_FILE) or {}
    except InputError as exc:
        raise ConfigError(str(exc)) from None
    if not isinstance(doc, dict):
        raise ConfigError(f"{CONFIG_FILE} must be a mapping")
    unknown = set(doc) - {"clusters", "source", "sources", "tier_order", "runtime_crds", "strict_substitution"}
    if unknown:
        raise ConfigError(f"{CONFIG_FILE}: unknown key(s) {', '.join(sorted(unknown))}")
    return RepoConfig(
        clusters=_clusters(doc.get("clusters") or {}),
        sources=_sources(doc),
        tier_order=_tier_order(doc.get("tier_order")),
        runtime_crds=tuple(_list(doc, "runtime_crds")),
        strict_substitution=bool(doc.get("strict_substitution", False)),
        required_tiers=_required_tiers(doc.get("clusters") or {}),
    )


def _list(doc: Mapping[str, Any], key: str) -> list[Any]:
    value = doc.get(key) or []
    if not isinstance(value, list):
        raise ConfigError(f"{CONFIG_FILE}: `{key}` must be a list")
    return value


def _clusters(raw: Any) -> dict[str, str]:
    if not isinstance(raw, dict):
        raise ConfigError(f"{CONFIG_FILE}: `clusters` must map a cluster name to {{path: DIR}}")
    out = {}
    for name, spec in raw.items():
        path = spec.get("path") if isinstance(spec, dict) else spec
        if not isinstance(path, str):
            raise ConfigError(f"{CONFIG_FILE}: cluster {name!r} needs `path: DIR`")
        normal = normalise_repo_path(path)
        if normal is None:
            raise ConfigError(f"{CONFIG_FILE}: cluster {name!r} path {path!r} climbs out of the repository")
        out[str(name)] = normal
    return out


def _required_tiers(raw: Any) -> dict[str, tuple[str, ...]]:
    """`clusters: {prod: {path: ..., required_tiers: [platform-config]}}`: tiers checked live on every change."""
    out = {}
    for name, spec in raw.items() if isinstance(raw, dict) else ():
        tiers = spec.get("required_tiers") if isinstance(spec, dict) else None
        if tiers is None:
            continue
        if not isinstance(tiers, list) or not all(isinstance(t, str) and t.strip() for t in tiers):
            raise ConfigError(f"{CONFIG_FILE}: cluster {name!r} `required_tiers` must be a list of tier names")
        out[str(name)] = tuple(t.strip() for t in tiers)
    return out


def _sources(doc: Mapping[str, Any]) -> tuple[SourceRef, ...]:
    raw = doc.get("sources") or ([doc["source"]] if doc.get("source") else None)
    if not raw:
        return RepoConfig.sources
    out = []
    for entry in raw:
        if not isinstance(entry, dict) or not entry.get("name"):
            raise ConfigError(f"{CONFIG_FILE}: each source needs `name` (and optional `kind`, `namespace`)")
        out.append(SourceRef(entry.get("kind", "GitRepository"), entry["name"], entry.get("namespace", "flux-system")))
    return tuple(out)


def _tier_order(raw: Any) -> TierOrderConfig | None:
    if raw is None:
        return None
    if not isinstance(raw, dict) or not isinstance(raw.get("file"), str) or not isinstance(raw.get("variable"), str):
        raise ConfigError(f"{CONFIG_FILE}: `tier_order` needs `file` and `variable`")
    path = normalise_repo_path(raw["file"])
    if path is None:
        raise ConfigError(f"{CONFIG_FILE}: tier_order file {raw['file']!r} climbs out of the repository")
    return TierOrderConfig(file=path, variable=raw["variable"])


def cluster_entry(config: RepoConfig, name: str, snapshot: Snapshot) -> str:
    """The entry path of a cluster: from config, else `clusters/<name>`."""
    if name in config.clusters:
        return config.clusters[name]
    if "/" not in name and name not in ("", ".", "..") and snapshot.is_dir(f"{CLUSTERS_DIR}/{name}"):
        return f"{CLUSTERS_DIR}/{name}"
    known = ", ".join(sorted(known_clusters(config, snapshot))) or "none found"
    raise ConfigError(f"unknown cluster {name!r} (known: {known})")


def known_clusters(config: RepoConfig, snapshot: Snapshot) -> dict[str, str]:
    """Every cluster of the repo: the configured ones, else each `clusters/*` dir no sibling includes."""
    if config.clusters:
        return dict(config.clusters)
    dirs = snapshot.list_dir(CLUSTERS_DIR)[0]  # sorted; symlinked directories left out
    included: set[str] = set()
    for name in dirs:
        for kfile in KUSTOMIZATION_FILES:
            text = snapshot.read_text(f"{CLUSTERS_DIR}/{name}/{kfile}")
            if text is not None:
                included.update(d for d in dirs if d != name and f"../{d}" in text)
    return {name: f"{CLUSTERS_DIR}/{name}" for name in dirs if name not in included}
