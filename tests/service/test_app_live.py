"""The webhook service with a live cluster: prod's kubeconfig points at the fake Kubernetes API.

Same harness as tests/service/test_app.py (signed deliveries, real PyGithub against the fake GitHub, a real
git origin holding the seed's PR); the run reads prod live before reviewing, and the moved
StorageProfiles from its worker thread.
"""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path
from typing import AsyncIterator

import pytest
from aiohttp.test_utils import TestClient, TestServer

from bot.adapters.github import GitHubAdapter, GitHubAuth
from bot.service.app import build_service
from bot.service.settings import ServiceConfig
from bot.engine.chatops.settings import ClusterPolicy, RepoPolicy
from tests.fakes.github import FakeGitHub
from tests.fakes.kube import FakeKube, kustomization
from tests.fakes.service import Origin as BaseOrigin
from tests.fluxrepo import dump, flux_repo, ks, obj, write_tree
from tests.fluxrepo import kustomization as fluxrepo_kustomization
from tests.adapters.test_kube import closed_port
from tests.engine.test_live import NOT_READY, seed_cluster
from tests.service.test_app import BOT_TOKEN, REPO, SECRET, Harness, Origin, payload

INVENTORY = ("_longhorn-vm_cdi.kubevirt.io_StorageProfile", "_longhorn-static_cdi.kubevirt.io_StorageProfile")


@pytest.fixture
def start(tmp_path: Path):
    """`async with start(origin, kubeconfig)`: the service, with prod read live through `kubeconfig`."""
    import contextlib

    @contextlib.asynccontextmanager
    async def run(origin: Origin, kubeconfig: Path) -> AsyncIterator[Harness]:
        async with FakeGitHub() as fake:
            fake.add_user("fluxwarden-bot", token=BOT_TOKEN, type="Bot")
            repo = fake.add_repo(REPO, clone_url=str(origin.bare))
            repo.next_number = 7
            fake.add_pull(REPO, head_sha=origin.head, base_sha=origin.main, head_ref="feat/cdi-tier-order", author="alice")
            config = ServiceConfig(
                webhook_secret=SECRET,
                github=GitHubAuth(token=BOT_TOKEN, api_url=fake.base_url),
                repos=(RepoPolicy(REPO, clusters=(ClusterPolicy("prod", kubeconfig=str(kubeconfig), context="prod-admin"),), clone_url=str(origin.bare)),),
                cache_dir=tmp_path / "cache",
            )
            adapter = GitHubAdapter(config.github, min_write_interval=0, backoff=0.05, bot_login="fluxwarden-bot")
            service = build_service(config, github=adapter)
            async with TestClient(TestServer(service.app())) as client:
                yield Harness(client, fake, service, origin)

    return run


async def precheck(h: Harness) -> str:
    await h.deliver("pull_request", payload("pull_request.opened", head=h.origin.head, base=h.origin.main))
    await h.settle()
    [comment] = h.comments(7, "fluxwarden:precheck:prod")
    return comment.body


@pytest.mark.parametrize("ready", [False, True], ids=["platform-config-not-ready", "platform-config-ready"])
async def test_live_preconditions_decide_the_status(tmp_path: Path, start, ready: bool) -> None:
    origin = Origin(tmp_path)
    status = {} if ready else NOT_READY
    cluster = seed_cluster(origin.main, platform_config=kustomization("platform-config", revision=f"main@sha1:{origin.main}", inventory=INVENTORY, **status))
    async with cluster:
        kubeconfig = cluster.kubeconfig(tmp_path / "prod.kubeconfig", context="prod-admin")
        async with start(origin, kubeconfig) as h:
            body = await precheck(h)
            states = h.states(origin.head, "fluxwarden/prod")
    if ready:
        assert states == ["pending", "success"]
        assert "precondition-failed" not in body and "precondition-unknown" not in body
    else:
        assert states == ["pending", "failure"]
        assert "precondition-failed" in body
        assert "flux-system/platform-config is not ready to take this change" in body
        assert "DependencyNotReady" in body
    assert {m for m, _, _ in cluster.requests} == {"GET"}
    assert any(p.endswith("/storageprofiles/longhorn-vm") for _, p, _ in cluster.requests)  # read from the worker thread
    assert_names_cluster_and_context_only(body, kubeconfig, cluster.url)


def assert_names_cluster_and_context_only(body: str, kubeconfig: Path, server: str) -> None:
    """The comment says which cluster and context it read; the host's kubeconfig path and API server URL never show."""
    assert "cluster prod (context prod-admin)" in body
    for leak in (str(kubeconfig), kubeconfig.name, server, server.split("//", 1)[-1], "127.0.0.1"):
        assert leak not in body, leak


@pytest.mark.parametrize("failure", ["unreachable", "expired-credential"])
async def test_unreadable_cluster_fails_the_status(tmp_path: Path, start, failure: str) -> None:
    origin = Origin(tmp_path)
    cluster = seed_cluster(origin.main)
    async with cluster:
        server = f"http://127.0.0.1:{closed_port()}"
        if failure == "unreachable":
            kubeconfig = cluster.kubeconfig(tmp_path / "prod.kubeconfig", context="prod-admin", server=server)
        else:
            kubeconfig = cluster.kubeconfig(tmp_path / "prod.kubeconfig", context="prod-admin", token="expired")
        async with start(origin, kubeconfig) as h:
            body = await precheck(h)
            states = h.states(origin.head, "fluxwarden/prod")
    assert states == ["pending", "failure"]  # never success, never a crashed run
    assert "precondition-unknown" in body and "Traceback" not in body
    assert_names_cluster_and_context_only(body, kubeconfig, server if failure == "unreachable" else cluster.url)
    if failure == "unreachable":
        assert "cannot reach the API server" in body
    else:
        assert "401 Unauthorized" in body and "expired" in body


CANARY = "canary-s3cr3t-7d41b0"  # a Secret value only the live cluster has: the bot must never write it to GitHub


class SecretOrigin(BaseOrigin):
    """prod's tier `apps` substitutes from a ConfigMap and a Secret that only the cluster has; PR 7 edits the
    ConfigMap that uses the Secret's variable."""

    def __init__(self, tmp: Path) -> None:
        sources = [{"kind": "ConfigMap", "name": "cluster-vars"}, {"kind": "Secret", "name": "cluster-secrets"}]
        files = flux_repo(
            {"apps": ks("apps", "./apps", post_build={"substituteFrom": sources})},
            {"apps/kustomization.yaml": fluxrepo_kustomization("app.yaml"), "apps/app.yaml": _app("web", "${TOKEN}")},
            cluster="prod",
        )
        super().__init__(tmp, lambda work: write_tree(work, files))
        (self.work / "apps/app.yaml").write_text(_app("api", "v2-${TOKEN}"), encoding="utf-8")
        self.head = self.commit("apps: a new host and token")
        self.publish(self.head, "refs/pull/7/head")


def _app(host: str, token: str) -> str:
    return dump(obj("v1", "ConfigMap", "app", "default", data={"host": f"{host}.${{DOMAIN}}", "token": token}))


async def test_a_cluster_only_secret_is_used_and_never_written_to_github(tmp_path: Path, start) -> None:
    """The bot reads prod's substituteFrom sources git lacks from the cluster (Live.config_reader): the Secret's value
    substitutes, and what reaches GitHub (comments, statuses, check runs: every request body) shows it masked."""
    origin = SecretOrigin(tmp_path)
    async with FakeKube() as cluster:
        cluster.add(obj("v1", "ConfigMap", "cluster-vars", "flux-system", data={"DOMAIN": "example.org"}))
        cluster.add(obj("v1", "Secret", "cluster-secrets", "flux-system", data={"TOKEN": base64.b64encode(CANARY.encode()).decode()}))
        kubeconfig = cluster.kubeconfig(tmp_path / "prod.kubeconfig", context="prod-admin")
        async with start(origin, kubeconfig) as h:
            body = await precheck(h)
            states = h.states(origin.head, "fluxwarden/prod")
            sent = [json.dumps(r.json) for r in h.fake.requests if r.json is not None]
        read = {p for _, p, _ in cluster.requests if "/secrets" in p or "/configmaps" in p}
    assert states[0] == "pending" and states[-1] in ("success", "failure"), states
    assert read == {"/api/v1/namespaces/flux-system/configmaps/cluster-vars", "/api/v1/namespaces/flux-system/secrets/cluster-secrets"}
    assert "api.example.org" in body and "v2-<masked:TOKEN>" in body, body  # substituted: the ConfigMap's value, the Secret's mask
    assert not {"substitution-source-external", "substitution-source-missing", "undefined-variable"} & set(re.findall(r"[a-z]+(?:-[a-z]+)+", body))
    assert any("<masked:TOKEN>" in text for text in sent), "the bodies read hold the substituted text"
    for text in sent:
        assert CANARY not in text and base64.b64encode(CANARY.encode()).decode() not in text
    assert {m for m, _, _ in cluster.requests} == {"GET"}
