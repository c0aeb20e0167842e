"""Drift end to end for one cluster: render a tree, read the cluster (read-only), build the report.

The I/O around the pure comparison in bot/engine/livestate/drift.py, shared by `fluxwarden drift` (bot/service/cli.py) and the
scheduled job (handlers/drift.py): the render (kustomize, blocking: run it in a thread from async
code), then the live reads (kubernetes-asyncio, on the caller's loop), then `build_drift_report`.
An unreachable cluster is not an exception here: the report comes back with `error` set.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from bot.engine.render.config import RepoConfig, cluster_entry
from bot.engine.livestate.drift import DriftOptions, DriftReport, build_drift_report, objects_to_read
from bot.engine.core.errors import UserError
from bot.engine.render.knowledge import default_knowledge
from bot.engine.tiergraph.providers import ProviderIndex
from bot.engine.render.rendered import ClusterRender
from bot.pipeline.session import CheckOptions, open_run

if TYPE_CHECKING:
    from bot.adapters.kube import ClusterAccess


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


@dataclass(frozen=True)
class RenderedCluster:
    """One cluster's render of a tree and the providers of its kinds (who would create each CRD)."""

    render: ClusterRender
    providers: ProviderIndex


def render_cluster(
    tree: Path, cluster: str, options: CheckOptions = CheckOptions(), cache_dir: Path | None = None, config: RepoConfig | None = None
) -> RenderedCluster:
    """Render `cluster` of the working tree `tree` (blocking: kustomize runs here); `config` None: the tree's `.fluxwarden.yaml`."""
    if not tree.is_dir():
        raise UserError(f"{tree} is not a directory")
    with open_run(replace(options, cache_dir=cache_dir), prefix="fluxwarden-drift-") as run:
        session = run.tree(tree, config=config)
        entry = cluster_entry(session.config, cluster, session.snapshot)
        knowledge = default_knowledge().with_user_rules(list(session.config.runtime_crds)).with_aliases(session.config.chart_aliases)
        render = session.renderer().render_cluster(cluster, entry)
        return RenderedCluster(render, ProviderIndex(render, knowledge))


async def read_drift(
    rendered: RenderedCluster,
    access: "ClusterAccess",
    *,
    now: Callable[[], datetime] = utcnow,
    options: DriftOptions = DriftOptions(),
    branch: str | None = None,
    revision: str | None = None,
) -> DriftReport:
    """Read the cluster (Kustomizations, sources, CRDs, then every object git defines) and compare."""
    from bot.adapters.kube import read_live_state, read_object_bodies  # kubernetes-asyncio: only when a cluster is read

    cluster = rendered.render.cluster
    state = await read_live_state(access, cluster)
    if state.error is not None:
        return build_drift_report(rendered.render, rendered.providers, state, (), now=now(), options=options, branch=branch, revision=revision)
    bodies = await read_object_bodies(access, objects_to_read(rendered.render, state))
    return build_drift_report(rendered.render, rendered.providers, state, bodies, now=now(), options=options, branch=branch, revision=revision)


def drift_repository(
    tree: Path,
    cluster: str,
    access: "ClusterAccess",
    *,
    check: CheckOptions = CheckOptions(),
    options: DriftOptions = DriftOptions(),
    now: Callable[[], datetime] = utcnow,
    cache_dir: Path | None = None,
    config: RepoConfig | None = None,
) -> DriftReport:
    """`fluxwarden drift`: render the working tree, read the cluster once, compare (synchronous)."""
    rendered = render_cluster(tree, cluster, check, cache_dir, config)
    return asyncio.run(read_drift(rendered, access, now=now, options=options))
