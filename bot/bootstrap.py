"""What exists on a cluster before the first Flux reconcile: the bootstrap model (pure).

Many home-lab repositories install CRDs and core charts before Flux starts (a helmfile with
`--include-crds` for CRD-only releases, another for cilium, cert-manager, flux-operator…), or apply
tiers one by one from a script. A cold-start judgement that ignores them calls a converging repo broken.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from bot.model import TierId


@dataclass(frozen=True)
class BootstrapEntry:
    """One thing the bootstrap provides, with the repo file that says so (printed as an info line)."""

    kind: str  # "crd-release" | "release" | "flux-instance" | "tier-order" | "declared" | "manifests"
    source: str  # repo-relative file (or ".fluxwarden.yaml" for declared entries)
    description: str  # e.g. "5 CRD-only releases (cert-manager, external-secrets, …)"


@dataclass(frozen=True)
class Bootstrap:
    """Present before Flux's first reconcile. Empty (the default) is a bare cluster (`--no-bootstrap`)."""

    # (namespace, name) of HelmReleases in git that the bootstrap installs: their chart's CRDs and their workload exist
    releases: frozenset[tuple[str, str]] = frozenset()
    # (namespace, name) of HelmReleases in git whose chart's CRDs only the bootstrap installs
    crd_releases: frozenset[tuple[str, str]] = frozenset()
    # chart names (as in the knowledge base) whose CRDs are installed, for releases with no HelmRelease in git
    crd_charts: frozenset[str] = frozenset()
    # (group, kind) of CRDs declared present (`.fluxwarden.yaml` bootstrap.crds)
    crds: frozenset[tuple[str, str]] = frozenset()
    # repo paths applied before Flux (`bootstrap.manifests`): every object they hold exists
    manifests: tuple[str, ...] = ()
    # tiers a script applies and waits for, in this order, before Flux takes over (the seed's standup.sh)
    tier_order: tuple[TierId, ...] = ()
    entries: tuple[BootstrapEntry, ...] = field(default=())

    @property
    def empty(self) -> bool:
        return not (self.releases or self.crd_releases or self.crd_charts or self.crds or self.manifests or self.tier_order)
