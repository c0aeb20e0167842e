"""One pass over a cluster (bot/engine/render/clusterpass.py), on repositories held in memory (tests/engine/builders.py):
the renderer's bookkeeping, whatever order its builds arrive in."""

from __future__ import annotations

from typing import Any

from bot.engine.render.clusterpass import ClusterPass, PassResult, cluster_settings, settle_entry
from bot.engine.render.config import snapshot_config
from bot.engine.render.discovery import RenderLimits
from bot.engine.render.flux import entry_tier
from bot.engine.core.model import TierId, TierSpec
from bot.engine.render.rendered import RawTier
from tests.engine.builders import MemoryTree, build, locate, render
from tests.fluxrepo import dump, flux_repo, kustomization, ks, obj

FLUX = "flux-system"


def tier(path: str, *objects: dict[str, Any]) -> dict[str, str]:
    return {f"{path}/kustomization.yaml": kustomization("objects.yaml"), f"{path}/objects.yaml": dump(*objects)}


def substituted_repo() -> dict[str, str]:
    """`app` substitutes from a ConfigMap that `vars`, built after it, holds."""
    return {
        **flux_repo({
            "app": ks("app", "./app", post_build={"substituteFrom": [{"kind": "ConfigMap", "name": "cluster-vars"}]}),
            "vars": ks("vars", "./vars"),
        }),
        **tier("app", obj("v1", "ConfigMap", "web", "default", data={"domain": "${DOMAIN}"})),
        **tier("vars", obj("v1", "ConfigMap", "cluster-vars", FLUX, data={"DOMAIN": "example.org"})),
    }


class OneAtATime:
    """Builds that arrive one per wait, in the order they were started (the first discovered first)."""

    def __init__(self, tree: MemoryTree) -> None:
        self.tree = tree
        self.started: list[TierSpec] = []
        self.arrivals: list[str] = []

    def start(self, spec: TierSpec) -> None:
        self.started.append(spec)

    def arrived(self) -> list[RawTier]:
        spec = self.started.pop(0)
        self.arrivals.append(spec.id.name)
        return [build(self.tree, spec)]


def one_pass(files: dict[str, str], builds_of: type[OneAtATime] = OneAtATime) -> tuple[PassResult, OneAtATime]:
    tree = MemoryTree(files)
    config = snapshot_config(tree)
    builds = builds_of(tree)
    result = ClusterPass(
        tree, config, "clusters/dev", entry_tier("clusters/dev"), builds, locate=locate(tree),
        patch=lambda sync, tier, origin, findings: sync.kustomization, settings=cluster_settings(tree, config, "dev", "clusters/dev"),
    ).run(last=False)
    return result, builds


def test_a_tier_waits_for_the_build_that_holds_its_substitute_from_source() -> None:
    result, builds = one_pass(substituted_repo())
    assert builds.arrivals == [FLUX, "app", "vars"]  # app arrived first, and was finished only once vars had
    web = result.tiers[TierId(FLUX, "app")].manifests[0]
    assert web.body["data"] == {"domain": "example.org"}
    assert result.better_entry is None


def test_the_order_builds_arrive_in_does_not_change_the_render() -> None:
    files = substituted_repo()
    result, _ = one_pass(files)
    together = render(files)  # every build started is taken at once
    assert {tid: t.manifests for tid, t in result.tiers.items()} == {tid: t.manifests for tid, t in together.tiers.items()}
    assert result.findings == list(together.findings)


def test_the_entry_renders_again_as_its_own_sync_kustomization_says() -> None:
    sync = ks(FLUX, "./clusters/dev", post_build={"substitute": {"ENV": "dev"}})
    files = {
        "clusters/dev/kustomization.yaml": kustomization("sync.yaml", "env.yaml"),
        "clusters/dev/sync.yaml": dump(sync),
        "clusters/dev/env.yaml": dump(obj("v1", "ConfigMap", "env", FLUX, data={"env": "${ENV}"})),
    }
    entry = render(files).tiers[TierId(FLUX, FLUX)]
    assert entry.spec.origin is not None and entry.spec.origin.file == "clusters/dev/sync.yaml"
    env = next(m for m in entry.manifests if m.ref.name == "env")
    assert env.body["data"] == {"env": "dev"}


def test_settle_entry_runs_a_last_pass_that_takes_the_spec_it_finds() -> None:
    specs = [entry_tier("clusters/dev"), entry_tier("clusters/dev/a"), entry_tier("clusters/dev/b")]
    calls: list[tuple[str, bool]] = []

    def run(spec: TierSpec, last: bool) -> PassResult:
        calls.append((spec.path, last))
        return PassResult({}, {}, [], None if last else specs[len(calls)])

    settle_entry(specs[0], run)
    assert calls == [("clusters/dev", False), ("clusters/dev/a", False), ("clusters/dev/b", True)]


def test_the_kustomizations_a_resourceset_creates_are_followed() -> None:
    rset = obj(
        "fluxcd.controlplane.io/v1", "ResourceSet", "tenants", FLUX,
        spec={
            "inputs": [{"tenant": "frontend"}, {"tenant": "backend"}],
            "resources": [{
                "apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
                "metadata": {"name": "<< inputs.tenant >>", "namespace": FLUX},
                "spec": {"interval": "10m", "path": "./apps/<< inputs.tenant >>", "prune": True, "sourceRef": {"kind": "GitRepository", "name": FLUX}},
            }],
        },
    )
    files = {
        **flux_repo({"tenants": ks("tenants", "./tenants")}),
        **tier("tenants", rset),
        **tier("apps/frontend", obj("v1", "ConfigMap", "web", "frontend")),
        **tier("apps/backend", obj("v1", "ConfigMap", "api", "backend")),
    }
    tiers = render(files).tiers
    assert [m.ref.name for m in tiers[TierId(FLUX, "frontend")].manifests] == ["web"]
    assert [m.ref.name for m in tiers[TierId(FLUX, "backend")].manifests] == ["api"]


def test_past_a_render_limit_a_kustomization_is_not_rendered() -> None:
    files = {**flux_repo({"a": ks("a", "./a"), "b": ks("b", "./b")}), **tier("a", obj("v1", "ConfigMap", "a", "default")), **tier("b", obj("v1", "ConfigMap", "b", "default"))}
    result = render(files, limits=RenderLimits(tiers=2))
    limited = [f for f in result.findings if f.check == "render-limit"]
    assert [f.kustomization for f in limited] == [TierId(FLUX, "b")]
    assert result.tiers[TierId(FLUX, "b")].failed and not result.tiers[TierId(FLUX, "a")].failed


def test_the_clusters_flux_version_makes_substitution_strict() -> None:
    files = {
        **flux_repo({"app": ks("app", "./app", post_build={"substitute": {"A": "1"}})}),
        "clusters/dev/flux-system/gotk-components.yaml": "# Flux Version: v2.9.0\n",
        **tier("app", obj("v1", "ConfigMap", "web", "default", data={"a": "${A}", "b": "${UNSET}"})),
    }
    assert cluster_settings(MemoryTree(files), snapshot_config(MemoryTree(files)), "dev", "clusters/dev").strict
    assert render(files).tiers[TierId(FLUX, "app")].failed  # strict: an unset variable fails the build
    lenient = {**files, "clusters/dev/flux-system/gotk-components.yaml": "# Flux Version: v2.8.0\n"}
    assert not render(lenient).tiers[TierId(FLUX, "app")].failed
