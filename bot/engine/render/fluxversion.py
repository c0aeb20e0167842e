"""Which Flux release a cluster runs, where rules differ by version: `.fluxwarden.yaml`, else its manifests in git.

Sources, first found wins: `clusters.<name>.flux_version`; the `# Flux Version: v2.x.y` header `flux install` and
`flux bootstrap` write into `gotk-components.yaml` (fluxcd/flux2 pkg/manifestgen/install/install.go); a FluxInstance's
`spec.distribution.version`, a semver range the Flux Operator resolves to the newest release it matches (here: the
newest we know). Unknown: None, and every rule keeps its default.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass

from bot.engine.core.errors import InputError
from bot.engine.render.semver import ConstraintError, Version, parse_version, resolve_version
from bot.engine.core.tree import RepoTree, yaml_files
from bot.engine.render.yamlio import load_all

# The newest patch of each Flux minor (fluxcd/flux2 tags): what a FluxInstance's range resolves to.
KNOWN_RELEASES = ("2.0.1", "2.1.2", "2.2.3", "2.3.0", "2.4.0", "2.5.1", "2.6.4", "2.7.5", "2.8.8", "2.9.4")
# kustomize-controller v1.9.0 (Flux 2.9): the `StrictPostBuildSubstitutions` feature gate is on by default
# (fluxcd/kustomize-controller CHANGELOG 1.9.0, PR #1671; internal/features/features.go "opt-out from v1.9").
STRICT_BY_DEFAULT = parse_version("2.9.0")
# kustomize v5.3 (Flux 2.2.0) refuses a kustomization holding nothing ("kustomization.yaml is empty"), and the
# controller writes the file back without the fields it holds empty (generate.controller_file_empty). A generated
# file got a placeholder in Flux 2.2.3 (fluxcd/pkg#718, fluxcd/flux2#4509); the path's own file in Flux 2.3.0
# (fluxcd/pkg#757, fluxcd/flux2#4601).
EMPTY_REFUSED_FROM = parse_version("2.2.0")
EMPTY_GENERATED_FIXED = parse_version("2.2.3")
EMPTY_OWN_FIXED = parse_version("2.3.0")
_HEADER = re.compile(r"^# Flux Version: v?(\d+\.\d+\.\d+)\s*$", re.MULTILINE)
_MAX_FILES = 5_000
_HEAD_BYTES = 4096


@dataclass(frozen=True)
class FluxVersion:
    """A cluster's Flux release and where it was read."""

    version: Version
    source: str  # "`.fluxwarden.yaml`", "clusters/prod/flux-system/gotk-components.yaml", "FluxInstance … (2.x)"

    def at_least(self, other: Version | None) -> bool:
        return other is not None and self.version >= other

    def __str__(self) -> str:
        return f"Flux {self.version} ({self.source})"


def cluster_flux_version(snapshot: RepoTree, entry: str, override: str | None = None) -> FluxVersion | None:
    """The Flux release of the cluster whose entry path is `entry` (its subtree is read, bounded), or None."""
    if override:
        parsed = parse_version(override if override.count(".") == 2 else f"{override}.0")
        if parsed is not None:
            return FluxVersion(parsed, "clusters.<name>.flux_version in .fluxwarden.yaml")
    header: FluxVersion | None = None
    instance: FluxVersion | None = None
    for rel in yaml_files(snapshot, entry, _MAX_FILES):
        if header is None and posixpath.basename(rel).startswith("gotk-components"):
            head = (snapshot.read_bytes(rel) or b"")[:_HEAD_BYTES].decode("utf-8", errors="replace")
            match = _HEADER.search(head)
            parsed = parse_version(match.group(1)) if match else None
            if parsed is not None:
                header = FluxVersion(parsed, rel)
        elif instance is None:
            instance = _instance_version(snapshot, rel)
    return header or instance


def _instance_version(snapshot: RepoTree, rel: str) -> FluxVersion | None:
    """A FluxInstance's `spec.distribution.version` in file `rel`, resolved among the releases we know."""
    text = snapshot.read_text(rel) or ""
    if "kind: FluxInstance" not in text or "distribution" not in text:
        return None
    try:
        documents = load_all(text, rel)
    except InputError:
        return None
    for doc in documents:
        if not isinstance(doc, dict) or doc.get("kind") != "FluxInstance":
            continue
        spec = doc.get("spec")
        distribution = spec.get("distribution") if isinstance(spec, dict) else None
        wanted = distribution.get("version") if isinstance(distribution, dict) else None
        if not isinstance(wanted, str) or "${" in wanted:
            continue
        try:
            chosen = resolve_version(wanted.strip().lstrip("v"), KNOWN_RELEASES)
        except ConstraintError:
            continue
        parsed = parse_version(chosen) if chosen else None
        if parsed is not None:
            name = (doc.get("metadata") or {}).get("name", "?") if isinstance(doc.get("metadata"), dict) else "?"
            return FluxVersion(parsed, f"FluxInstance {name} in {rel}, distribution.version {wanted!r}")
    return None


def strict_substitution(setting: bool | None, version: FluxVersion | None) -> bool:
    """Whether postBuild substitution is strict: as `.fluxwarden.yaml` says (the feature gate set either way),
    else the cluster's Flux default (on from 2.9); unknown version: off, the default before 2.9."""
    if setting is not None:
        return setting
    return version is not None and version.at_least(STRICT_BY_DEFAULT)


def empty_kustomization_fails(file: str, generated: bool, version: FluxVersion | None) -> str | None:
    """Why the cluster's Flux fails a tier whose kustomization `file` holds nothing as the controller writes it
    back (`generated`: there is none in the path, and no manifest); None: it builds, or the version is unknown."""
    if version is None or not version.at_least(EMPTY_REFUSED_FROM):
        return None
    fixed = EMPTY_GENERATED_FIXED if generated else EMPTY_OWN_FIXED
    if version.at_least(fixed):
        return None
    directory = posixpath.dirname(file) or "."
    if generated:
        why = f"{directory} has no kustomization file and no manifest, and the one the controller generates is empty to its kustomize v5.3"
        fix = f"upgrade Flux to {fixed} or later (fluxcd/pkg#718), or add a manifest to {directory}"
    else:
        why = f"the controller writes {file} back without its empty fields (`resources: []`), and its kustomize v5.3 refuses an empty kustomization"
        fix = f"upgrade Flux to {fixed} or later (fluxcd/flux2#4601), or list a resource in {file}"
    return f"{version} fails this build with \"kustomization.yaml is empty\": {why}; {fix}"
