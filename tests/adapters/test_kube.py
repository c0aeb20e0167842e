"""bot/adapters/kube.py: the real kubernetes-asyncio client against the loopback fake API server (tests/fakes/kube.py)."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path
from typing import AsyncIterator

import pytest

import bot.adapters.kube
from bot.adapters.kube import (
    ClusterAccess,
    KubeApiError,
    KubeClient,
    KubeConfigError,
    KubeForbidden,
    KubeTimeout,
    KubeUnauthorized,
    ObjectReader,
    read_live_state,
    read_objects,
)
from bot.engine.livestate.live import CHECK_UNKNOWN, evaluate_preconditions
from bot.engine.core.model import ObjectRef, Severity, SourceRef, TierId
from tests.fakes.kube import FakeKube, crd, git_repository, kustomization, owned_by

R1 = "main@sha1:1111111111111111111111111111111111111111"
PROFILE = ObjectRef("cdi.kubevirt.io/v1beta1", "StorageProfile", "", "longhorn-vm")
CONFIGMAP = ObjectRef("v1", "ConfigMap", "apps", "settings")


@pytest.fixture
async def fake() -> AsyncIterator[FakeKube]:
    async with FakeKube() as server:
        server.add(git_repository(revision=R1))
        server.add({
            "apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "OCIRepository",
            "metadata": {"name": "charts", "namespace": "infra"},
            "status": {"artifact": {"revision": "v1.2.3@sha256:abc"}},
        })
        server.add(kustomization("platform", revision=R1, inventory=("_longhorn-vm_cdi.kubevirt.io_StorageProfile",)))
        server.add(kustomization("infra", namespace="infra", source=("OCIRepository", "charts"), revision="v1.2.3@sha256:abc"))
        server.add(crd("cdi.kubevirt.io", "StorageProfile", "storageprofiles", version="v1beta1", owners=[{"apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "CDI", "name": "cdi", "uid": "u"}]))
        server.add({"apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "StorageProfile", "metadata": {"name": "longhorn-vm", "labels": owned_by("platform")}})
        server.add({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings", "namespace": "apps", "labels": {"a": "b"}}, "data": {"k": "v"}})
        yield server


def access(fake: FakeKube, tmp_path: Path, **kw) -> ClusterAccess:
    return ClusterAccess(kubeconfig=fake.kubeconfig(tmp_path / "kubeconfig", **{k: v for k, v in kw.items() if k in ("token", "server", "context")}), timeout=kw.get("timeout", 5.0))


async def test_reads_kustomizations_sources_and_crds(fake: FakeKube, tmp_path: Path) -> None:
    state = await read_live_state(access(fake, tmp_path), "prod")
    assert state.error is None and state.crd_error is None and state.source_errors == {}
    platform = state.kustomizations[TierId("flux-system", "platform")]
    assert platform.last_applied_revision == R1 and platform.ready.status == "True"
    assert platform.inventory == {"_longhorn-vm_cdi.kubevirt.io_StorageProfile"}
    infra = state.kustomizations[TierId("infra", "infra")]
    assert infra.source == SourceRef("OCIRepository", "charts", "infra")
    assert {ref: s.revision for ref, s in state.sources.items()} == {
        SourceRef("GitRepository", "flux-system", "flux-system"): R1,
        SourceRef("OCIRepository", "charts", "infra"): "v1.2.3@sha256:abc",
    }
    assert [(c.name, c.kind, c.owners[0].kind) for c in state.crds] == [("storageprofiles.cdi.kubevirt.io", "StorageProfile", "CDI")]
    assert state.where == "the kubeconfig's current context"  # never the kubeconfig path nor the server URL
    assert {method for method, _, _ in fake.requests} == {"GET"}  # read-only, always


async def test_get_and_list_namespaced_and_cluster_scoped(fake: FakeKube, tmp_path: Path) -> None:
    async with KubeClient(access(fake, tmp_path)) as kube:
        assert (await kube.get("v1", "ConfigMap", "apps", "settings"))["data"] == {"k": "v"}
        assert (await kube.get("cdi.kubevirt.io/v1beta1", "StorageProfile", None, "longhorn-vm"))["metadata"]["labels"] == owned_by("platform")
        assert await kube.get("v1", "ConfigMap", "apps", "nope") is None  # 404
        assert await kube.get("example.com/v1", "Widget", "apps", "w") is None  # kind not served
        assert [o["metadata"]["name"] for o in await kube.list("kustomize.toolkit.fluxcd.io/v1", "Kustomization", "infra")] == ["infra"]
        assert len(await kube.list("kustomize.toolkit.fluxcd.io/v1", "Kustomization")) == 2
        assert [o["metadata"]["name"] for o in await kube.list("cdi.kubevirt.io/v1beta1", "StorageProfile")] == ["longhorn-vm"]
        assert await kube.preferred_version("source.toolkit.fluxcd.io") == "v1"
        assert await kube.preferred_version("nope.example.com") is None
    paths = [p for _, p, _ in fake.requests]
    assert "/api/v1" in paths and "/apis" in paths and "/apis/cdi.kubevirt.io/v1beta1" in paths  # discovery
    assert "/api/v1/namespaces/apps/configmaps/settings" in paths
    assert "/apis/cdi.kubevirt.io/v1beta1/storageprofiles/longhorn-vm" in paths


async def test_lists_are_paginated(fake: FakeKube, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bot.adapters.kube, "PAGE_SIZE", 2)
    for i in range(4):
        fake.add(crd("example.com", f"Kind{i}", f"kinds{i}"))
    state = await read_live_state(access(fake, tmp_path), "prod")
    assert len(state.crds) == 5
    assert sum(1 for _, p, _ in fake.requests if p.startswith("/apis/apiextensions.k8s.io/v1/customresourcedefinitions")) == 3
    assert any("continue=2" in p for _, p, _ in fake.requests)


async def test_moved_objects_are_read_with_their_labels(fake: FakeKube, tmp_path: Path) -> None:
    reads = await read_objects(access(fake, tmp_path), [PROFILE, CONFIGMAP, ObjectRef("v1", "ConfigMap", "apps", "gone")])
    assert [(r.ref.name, r.object.owner if r.object else None, r.error) for r in reads] == [
        ("longhorn-vm", TierId("flux-system", "platform"), None),
        ("settings", None, None),
        ("gone", None, None),
    ]
    assert reads[2].object is None


async def test_object_reader_runs_in_a_worker_thread(fake: FakeKube, tmp_path: Path) -> None:
    """The review runs in a thread; the reader opens its own loop there while this loop serves the fake."""
    reads = await asyncio.to_thread(ObjectReader(access(fake, tmp_path)), [PROFILE])
    assert reads[0].object is not None and reads[0].object.labels == owned_by("platform")


async def test_forbidden_object_is_an_error_not_absent(fake: FakeKube, tmp_path: Path) -> None:
    fake.inject(r"/storageprofiles/longhorn-vm$", status=403)
    [read] = await read_objects(access(fake, tmp_path), [PROFILE])
    assert read.object is None and "403 Forbidden" in read.error and "deploy/rbac.yaml" in read.error


# ------------------------------------------------------------------------------------------- failures


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


FAILURES = [
    # id, setup(fake) -> access kwargs, expected phrase
    ("unreachable", lambda f: {"server": f"http://127.0.0.1:{closed_port()}"}, "cannot reach the API server"),
    ("unauthorized", lambda f: {"token": "expired-token-value"}, "rejected the credential (401 Unauthorized): it is missing, expired or revoked"),
    ("forbidden", lambda f: f.inject(r"/kustomizations$", status=403) or {}, "forbids reading Flux Kustomizations (403 Forbidden)"),
    ("timeout", lambda f: f.inject(r"/kustomizations$", delay=3.0) or {"timeout": 0.3}, "did not answer within 0.3s"),
    ("server-error", lambda f: f.inject(r"/kustomizations$", status=500) or {}, "failed with HTTP 500"),
]


@pytest.mark.parametrize("setup,phrase", [c[1:] for c in FAILURES], ids=[c[0] for c in FAILURES])
async def test_unreadable_cluster_is_precondition_unknown(fake: FakeKube, tmp_path: Path, setup, phrase: str) -> None:
    kw = setup(fake)
    state = await read_live_state(access(fake, tmp_path, **kw), "prod")
    assert state.error is not None and phrase in state.error
    assert fake.token not in state.error and "expired-token-value" not in state.error
    [finding] = evaluate_preconditions(state, {}, [TierId("flux-system", "platform-config")])
    assert (finding.check, finding.severity) == (CHECK_UNKNOWN, Severity.ERROR)
    assert phrase in finding.message and "platform-config" in finding.message


async def test_partial_failures_are_recorded(fake: FakeKube, tmp_path: Path) -> None:
    fake.inject(r"/gitrepositories/", status=403, times=None)
    fake.inject(r"/customresourcedefinitions$", status=403, times=None)
    state = await read_live_state(access(fake, tmp_path), "prod")
    assert state.error is None and len(state.kustomizations) == 2
    assert "403 Forbidden" in state.source_errors[SourceRef("GitRepository", "flux-system", "flux-system")]
    assert state.crd_error is not None and "CustomResourceDefinitions" in state.crd_error


def _malformed(path: Path) -> Path:
    path.write_text("apiVersion: v1\nkind: Config\nclusters:\n- {name: a, cluster: [unclosed: x}\n")
    return path


@pytest.mark.parametrize(
    "make,phrase,error",
    [
        (lambda tmp, f: ClusterAccess(kubeconfig=tmp / "missing"), "does not exist", KubeConfigError),
        (lambda tmp, f: ClusterAccess(kubeconfig=f.kubeconfig(tmp / "kc"), context="no-such-context"), "cannot load the context no-such-context", KubeConfigError),
        (lambda tmp, f: ClusterAccess(in_cluster=True), "cannot load the in-cluster service account", KubeConfigError),
        (lambda tmp, f: ClusterAccess(kubeconfig=_malformed(tmp / "kc")), "not valid YAML at line 4, column", KubeConfigError),
    ],
    ids=["missing-kubeconfig", "unknown-context", "not-in-a-pod", "malformed-kubeconfig"],
)
async def test_bad_access_configuration(fake: FakeKube, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, make, phrase: str, error: type) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    acc = make(tmp_path, fake)
    with pytest.raises(error) as raised:
        async with KubeClient(acc):
            pass
    assert phrase in str(raised.value)
    state = await read_live_state(acc, "prod")
    assert state.error is not None and phrase in state.error


async def test_an_unreachable_server_is_named_once(tmp_path: Path) -> None:
    import socket

    with socket.socket() as sock:  # a loopback port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    kubeconfig = tmp_path / "kc"
    kubeconfig.write_text(
        f"apiVersion: v1\nkind: Config\ncurrent-context: c\nclusters: [{{name: k, cluster: {{server: 'http://127.0.0.1:{port}'}}}}]\n"
        "users: [{name: u, user: {token: t}}]\ncontexts: [{name: c, context: {cluster: k, user: u}}]\n"
    )
    state = await read_live_state(ClusterAccess(kubeconfig=kubeconfig, timeout=5), "prod")
    assert state.error is not None and "of the kubeconfig's current context" in state.error and "the the" not in state.error


async def test_error_classes_are_infra_errors(fake: FakeKube, tmp_path: Path) -> None:
    from bot.engine.core.errors import InfraError

    for cls in (KubeConfigError, KubeForbidden, KubeTimeout, KubeUnauthorized):
        assert issubclass(cls, InfraError)
    fake.inject(r"/kustomizations$", status=401)
    async with KubeClient(access(fake, tmp_path)) as kube:
        with pytest.raises(KubeUnauthorized):
            await kube.list_kustomizations()


async def test_token_never_in_messages(fake: FakeKube, tmp_path: Path) -> None:
    jwt = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJzeXN0ZW0ifQ.c2lnbmF0dXJl"
    kubeconfig = tmp_path / "kc"
    kubeconfig.write_text(f"apiVersion: v1\nkind: Config\nusers: [{{name: u, user: {{token: {jwt}}}}}]\ncontexts: []\n")
    state = await read_live_state(ClusterAccess(kubeconfig=kubeconfig), "prod")
    assert state.error is not None and jwt not in state.error


def test_rbac_is_read_only_and_covers_what_is_read() -> None:
    import yaml

    docs = list(yaml.safe_load_all((Path(__file__).resolve().parents[2] / "deploy/rbac.yaml").read_text()))
    by_kind = {d["kind"]: d for d in docs}
    assert by_kind["ServiceAccount"]["metadata"] == {**by_kind["ServiceAccount"]["metadata"], "name": "fluxwarden", "namespace": "fluxwarden"}
    binding = by_kind["ClusterRoleBinding"]
    assert binding["roleRef"]["name"] == by_kind["ClusterRole"]["metadata"]["name"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "fluxwarden", "namespace": "fluxwarden"}]
    rules = by_kind["ClusterRole"]["rules"]
    assert {v for r in rules for v in r["verbs"]} <= {"get", "list", "watch"}
    granted = {(g, res) for r in rules if "resources" in r for g in r["apiGroups"] for res in r["resources"]}
    for needed in [
        ("kustomize.toolkit.fluxcd.io", "kustomizations"),
        ("source.toolkit.fluxcd.io", "gitrepositories"),
        ("source.toolkit.fluxcd.io", "ocirepositories"),
        ("source.toolkit.fluxcd.io", "buckets"),
        ("apiextensions.k8s.io", "customresourcedefinitions"),
        ("cdi.kubevirt.io", "storageprofiles"),  # the seed's moved objects
    ]:
        assert needed in granted, needed
    assert not any(res in ("secrets", "*") and g in ("", "*") for g, res in granted)  # never every Secret


async def test_missing_apis_are_absent_not_crashes(fake: FakeKube, tmp_path: Path) -> None:
    fake.inject(r"^/apis$", status=404, times=None)
    fake.inject(r"/customresourcedefinitions$", status=404, times=None)
    state = await read_live_state(access(fake, tmp_path), "prod")
    assert state.error is None and state.crds == () and state.sources == {} and state.source_errors == {}


async def test_request_is_the_public_call_under_reads_and_writes(fake: FakeKube, tmp_path: Path) -> None:
    leases = "/apis/coordination.k8s.io/v1/namespaces/ops/leases"
    lease = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "l", "namespace": "ops"}, "spec": {"holderIdentity": "a"}}
    kube = KubeClient(access(fake, tmp_path))
    await kube.open()
    try:
        status, body = await kube.request("GET", "/api/v1/namespaces/apps/configmaps/settings", "the ConfigMap apps/settings")
        assert status == 200 and body["data"] == {"k": "v"}
        assert (await kube.request("GET", f"{leases}/l", "the Lease"))[0] == 404  # 404 is an answer by default
        status, body = await kube.request("POST", leases, "the Lease", body=lease, answers=(409,))
        assert status == 201 and body["metadata"]["resourceVersion"]
        status, body = await kube.request("POST", leases, "the Lease", body=lease, answers=(409,))
        assert status == 409 and body["reason"] == "AlreadyExists"  # the Status object, parsed
        with pytest.raises(KubeApiError, match="creating the Lease failed with HTTP 409"):  # not an expected answer here
            await kube.request("POST", leases, "the Lease", body=lease)
        fake.inject(r"/leases$", status=403)
        with pytest.raises(KubeForbidden, match=r"forbids creating the Lease \(403 Forbidden\): ask for the Role x"):
            await kube.request("POST", leases, "the Lease", body=lease, rbac="ask for the Role x")
    finally:
        await kube.close()
    assert fake.lease("ops", "l")["spec"]["holderIdentity"] == "a"
