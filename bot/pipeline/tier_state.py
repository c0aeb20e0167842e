"""`tier-order`: a checked-out revision's tier order file and every cluster's graph, for bot/engine/ordering/tierfix.py to plan."""

from __future__ import annotations

from pathlib import Path

from bot.adapters.kustomize import KustomizeProbes
from bot.adapters.workspace import read_config_text
from bot.engine.render.config import RepoConfig, known_clusters, load_repo_config
from bot.engine.core.errors import TierOrderError, UserError
from bot.engine.tiergraph.graph import TierGraph
from bot.engine.ordering.tierfix import IncompleteRender, TreeState
from bot.pipeline.session import CheckOptions, open_run


def read_tier_order_file(tree: Path, rel: str) -> str | None:
    """The text of a repo file, exactly (line endings kept); None when missing. Refuses symlinks and escapes."""
    root = tree.resolve()
    path = tree / rel
    if path.is_symlink():
        raise UserError(f"tier order file {rel} is a symlink; refusing to read or edit it")
    if not path.exists():
        return None
    if not path.is_file() or root not in path.resolve().parents:
        raise UserError(f"tier order file {rel} is not a regular file in the repository")
    try:
        with open(path, encoding="utf-8", newline="") as handle:
            return handle.read()
    except UnicodeDecodeError:
        raise TierOrderError(f"{rel} is not UTF-8 text") from None


def read_tree_state(tree: Path, *, kustomize: str | None = None, jobs: int | None = None, timeout: float = 120.0,
                    cache_dir: Path | None = None, config: RepoConfig | None = None, probes: KustomizeProbes | None = None) -> TreeState:
    """Render every cluster of the checked-out `tree` (graphs only) and read its tier order file.

    `config` stands in for the tree's `.fluxwarden.yaml` (`--config FILE`); `probes` is the caller's record of
    its kustomize binaries (see `CheckOptions.probes`).
    """
    if not tree.is_dir():
        raise UserError(f"{tree} is not a directory")
    if config is None:
        config = load_repo_config(read_config_text(tree))
    if config.tier_order is None:
        return TreeState(None, None, None)
    setting = config.tier_order
    text = read_tier_order_file(tree, setting.file)
    graphs: dict[str, dict[str, frozenset[str]]] = {}
    options = CheckOptions(kustomize=kustomize, jobs=jobs, timeout=timeout, cache_dir=cache_dir, probes=probes)
    with open_run(options, prefix="fluxwarden-tierfix-") as run:
        session = run.tree(tree, config=config)
        renderer = session.renderer()
        for cluster, entry_path in sorted(known_clusters(config, session.snapshot).items()):
            render = renderer.render_cluster(cluster, entry_path, graph_only=True)
            broken = sorted(
                str(tid) for tid, tier in render.tiers.items() if not tier.rendered and config.is_this_repo(tier.spec.source)
            )
            if broken:
                raise IncompleteRender(
                    f"cluster {cluster}: {', '.join(broken)} could not be rendered, so the graph may miss Kustomizations "
                    "they define; fix the render (`fluxwarden check`) before fixing the tier order"
                )
            graph = TierGraph(t.spec for t in render.tiers.values())
            entry = next(iter(render.tiers))
            graphs[cluster] = {
                tid.name: frozenset(d.name for d in graph.deps[tid] if d != entry) for tid in graph.nodes if tid != entry
            }
    return TreeState(setting.file, setting.variable, text, graphs)
