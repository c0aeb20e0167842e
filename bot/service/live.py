"""Reading clusters live for the handlers (handlers/context.py's `Live`): the settings' access, bot/adapters/kube.py's reads."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Callable

from bot.adapters.kube import ClusterAccess, ConfigReader, ObjectReader, read_live_state
from bot.engine.render.clusterobjects import ConfigFetcher
from bot.engine.livestate.drift import DriftOptions, DriftReport
from bot.engine.livestate.live import LiveState, ObjectFetcher
from bot.pipeline.drift import RenderedCluster, read_drift, utcnow
from handlers.context import Settings


def live_access(settings: Settings, repo: str, cluster: str) -> ClusterAccess | None:
    """How to read `cluster` of `repo` live, when the service settings say so."""
    policy_repo = settings.repo(repo)
    policy = policy_repo.cluster(cluster) if policy_repo else None
    if policy is None or not policy.live:
        return None
    return ClusterAccess(kubeconfig=Path(policy.kubeconfig) if policy.kubeconfig else None, context=policy.context, in_cluster=policy.in_cluster)


@dataclass(frozen=True)
class KubeLive:
    """The clusters `settings` configure live, read through kubernetes-asyncio (read-only)."""

    settings: Settings

    def configured(self, repo: str, cluster: str) -> bool:
        return live_access(self.settings, repo, cluster) is not None

    def _access(self, repo: str, cluster: str) -> ClusterAccess:
        access = live_access(self.settings, repo, cluster)
        if access is None:
            raise LookupError(f"{cluster} of {repo} has no live access configured")
        return access

    async def read_state(self, repo: str, cluster: str) -> LiveState:
        """Kustomizations, sources and CRDs (a failed read is recorded in the state, not raised)."""
        return await read_live_state(self._access(repo, cluster), cluster)

    def object_reader(self, repo: str, cluster: str) -> ObjectFetcher:
        """Reads moved objects synchronously (in the review's worker thread, on its own loop)."""
        return ObjectReader(self._access(repo, cluster))

    def config_reader(self, repo: str, cluster: str) -> ConfigFetcher:
        """Reads the substituteFrom ConfigMaps/Secrets git lacks, by name (a Secret's values are only ever substituted masked)."""
        return ConfigReader(self._access(repo, cluster))

    async def read_drift(
        self, rendered: RenderedCluster, repo: str, cluster: str, *, now: Callable[[], datetime] = utcnow,
        options: DriftOptions = DriftOptions(), branch: str | None = None, revision: str | None = None,
    ) -> DriftReport:
        return await read_drift(rendered, self._access(repo, cluster), now=now, options=options, branch=branch, revision=revision)
