"""A loopback fake of the Kubernetes API server (aiohttp.web), reached by the REAL kubernetes-asyncio client.

``fake.kubeconfig(path)`` writes a kubeconfig (token auth over plain http on 127.0.0.1) that
``bot.kube.ClusterAccess(kubeconfig=path)`` loads like any other. Two ways to run it, as FakeGitHub:

* ``async with FakeKube() as fake:`` — on the current loop (the client must then run on this loop too,
  or in a thread with its own loop);
* ``with FakeKube().start_in_thread():`` — on a daemon thread's loop, for synchronous callers (the CLI,
  which runs ``asyncio.run`` itself).

What it serves, read-only (GET only; anything else is 405):

* discovery: ``/api``, ``/api/v1``, ``/apis``, ``/apis/<group>/<version>`` from a resource table
  (core kinds, Flux kinds, CRDs) that grows when a CustomResourceDefinition object is added;
* namespaced and cluster-scoped get and list (``/apis/<g>/<v>[/namespaces/<ns>]/<plural>[/<name>]``,
  ``/api/v1/...``), lists paginated with ``limit``/``continue``; unknown objects are 404 ``Status``.

Writes are served for one kind only, ``coordination.k8s.io/v1`` Leases (leader election, bot/adapters/lease.py):
GET/POST/PUT/DELETE on ``/apis/coordination.k8s.io/v1/namespaces/<ns>/leases[/<name>]`` with the API server's
optimistic concurrency — a PUT whose ``metadata.resourceVersion`` is not the stored one is 409 ``Conflict``, a
POST of an existing name 409 ``AlreadyExists``, a PUT of a missing Lease 404 — and its MicroTime format
(``acquireTime``/``renewTime`` must have exactly six fractional digits, else 400). ``fake.lease(ns, name)``
returns a copy of the stored Lease.

Faults (``fake.inject(path_regex, status=…, delay=…, times=…)``), matched in order against the request
path: an HTTP status (401/403/404/500 with a ``Status`` body) or a delay (then served normally).
Requests without ``Authorization: Bearer <token>`` are 401. ``fake.requests`` logs (method, path, status).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import yaml
from aiohttp import web
from tests.fakes.threaded import serve_in_thread


@dataclass(frozen=True)
class Resource:
    group: str
    version: str
    kind: str
    plural: str
    namespaced: bool

    @property
    def group_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


BUILTIN = (
    Resource("", "v1", "Namespace", "namespaces", False),
    Resource("", "v1", "ConfigMap", "configmaps", True),
    Resource("", "v1", "Secret", "secrets", True),
    Resource("", "v1", "Service", "services", True),
    Resource("", "v1", "ServiceAccount", "serviceaccounts", True),
    Resource("", "v1", "PersistentVolumeClaim", "persistentvolumeclaims", True),
    Resource("", "v1", "PersistentVolume", "persistentvolumes", False),
    Resource("apps", "v1", "Deployment", "deployments", True),
    Resource("apps", "v1", "StatefulSet", "statefulsets", True),
    Resource("apps", "v1", "DaemonSet", "daemonsets", True),
    Resource("storage.k8s.io", "v1", "StorageClass", "storageclasses", False),
    Resource("rbac.authorization.k8s.io", "v1", "ClusterRole", "clusterroles", False),
    Resource("apiextensions.k8s.io", "v1", "CustomResourceDefinition", "customresourcedefinitions", False),
    Resource("kustomize.toolkit.fluxcd.io", "v1", "Kustomization", "kustomizations", True),
    Resource("source.toolkit.fluxcd.io", "v1", "GitRepository", "gitrepositories", True),
    Resource("source.toolkit.fluxcd.io", "v1", "OCIRepository", "ocirepositories", True),
    Resource("source.toolkit.fluxcd.io", "v1", "Bucket", "buckets", True),
    Resource("source.toolkit.fluxcd.io", "v1", "HelmRepository", "helmrepositories", True),
    Resource("helm.toolkit.fluxcd.io", "v2", "HelmRelease", "helmreleases", True),
)


LEASE_PATH = re.compile(r"^/apis/coordination\.k8s\.io/v1/namespaces/(?P<ns>[^/]+)/leases(?:/(?P<name>[^/]+))?/?$")
MICRO_TIME = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}(Z|[+-]\d{2}:\d{2})$")


@dataclass
class Fault:
    pattern: re.Pattern[str]
    status: int | None
    delay: float
    times: int | None  # None: forever

    def take(self) -> bool:
        if self.times is not None:
            if self.times <= 0:
                return False
            self.times -= 1
        return True


@dataclass
class FakeKube:
    """In-memory objects served over HTTP the way kube-apiserver serves them (GETs only)."""

    token: str = "fake-kube-token-0123"
    host: str = "127.0.0.1"
    resources: list[Resource] = field(default_factory=lambda: list(BUILTIN))
    objects: dict[tuple[str, str, str, str], dict[str, Any]] = field(default_factory=dict)  # (group, plural, ns, name)
    faults: list[Fault] = field(default_factory=list)
    requests: list[tuple[str, str, int]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.lock = threading.Lock()
        self._runner: web.AppRunner | None = None
        self._port: int | None = None
        self._stopping: asyncio.Event | None = None
        self._rv = 100

    # ------------------------------------------------------------------ lifecycle

    @property
    def url(self) -> str:
        if self._port is None:
            raise RuntimeError("FakeKube is not running")
        return f"http://{self.host}:{self._port}"

    async def start(self) -> str:
        self._stopping = asyncio.Event()
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._dispatch)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, 0)
        await site.start()
        self._port = self._runner.addresses[0][1]
        return self.url

    async def stop(self) -> None:
        if self._stopping is not None:
            self._stopping.set()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> "FakeKube":
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def start_in_thread(self) -> contextlib.AbstractContextManager[str]:
        """Serve from a daemon thread with its own loop; yields the base URL."""
        return serve_in_thread(self.start, self.stop, lambda: self.url, "fake-kube")

    def kubeconfig(self, path: Path, *, context: str = "fake", token: str | None = None, server: str | None = None) -> Path:
        """Write a kubeconfig for this server (token auth, plain http); `token`/`server` override for failure tests."""
        doc = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": context, "cluster": {"server": server or self.url}}],
            "users": [{"name": context, "user": {"token": token if token is not None else self.token}}],
            "contexts": [{"name": context, "context": {"cluster": context, "user": context}}],
            "current-context": context,
        }
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(doc), encoding="utf-8")
        return path

    # ------------------------------------------------------------------ state

    def _resource_of(self, api_version: str, kind: str) -> Resource:
        group = api_version.rpartition("/")[0] if "/" in api_version else ""
        for r in self.resources:
            if r.group == group and r.kind == kind:
                return r
        raise KeyError(f"FakeKube: no resource registered for {api_version} {kind}")

    def add(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """Store an object (a CRD also registers the kinds it serves)."""
        obj = copy.deepcopy(dict(body))
        resource = self._resource_of(obj["apiVersion"], obj["kind"])
        meta = obj.setdefault("metadata", {})
        with self.lock:
            self._rv += 1
            meta.setdefault("resourceVersion", str(self._rv))
            meta.setdefault("uid", f"uid-{self._rv}")
            namespace = meta.get("namespace", "") if resource.namespaced else ""
            if resource.namespaced and not namespace:
                namespace = meta["namespace"] = "default"
            self.objects[(resource.group, resource.plural, namespace, meta["name"])] = obj
            if resource.kind == "CustomResourceDefinition":
                spec = obj.get("spec") or {}
                names = spec.get("names") or {}
                for version in spec.get("versions") or ():
                    if version.get("served", True):
                        new = Resource(spec["group"], version["name"], names["kind"], names["plural"], spec.get("scope", "Namespaced") == "Namespaced")
                        self.resources = [r for r in self.resources if (r.group, r.version, r.kind) != (new.group, new.version, new.kind)] + [new]
        return obj

    def remove(self, api_version: str, kind: str, name: str, namespace: str = "") -> None:
        resource = self._resource_of(api_version, kind)
        with self.lock:
            self.objects.pop((resource.group, resource.plural, namespace if resource.namespaced else "", name), None)

    def inject(self, path: str, *, status: int | None = None, delay: float = 0.0, times: int | None = 1) -> None:
        """Fail (status) or slow down (delay) requests whose path matches `path`; `times=None` forever."""
        self.faults.append(Fault(re.compile(path), status, delay, times))

    def clear_faults(self) -> None:
        self.faults.clear()

    # ------------------------------------------------------------------ HTTP

    @staticmethod
    def _status(code: int, reason: str, message: str) -> web.Response:
        return web.json_response(
            {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message, "reason": reason, "code": code},
            status=code,
        )

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        response = await self._serve(request)
        self.requests.append((request.method, request.path_qs, response.status))
        return response

    async def _serve(self, request: web.Request) -> web.StreamResponse:
        path = request.path
        fault = next((f for f in self.faults if f.pattern.search(path) and f.take()), None)
        if fault is not None and fault.delay:
            try:
                assert self._stopping is not None
                await asyncio.wait_for(self._stopping.wait(), timeout=fault.delay)
            except asyncio.TimeoutError:
                pass
        if request.headers.get("Authorization") != f"Bearer {self.token}":
            return self._status(401, "Unauthorized", "Unauthorized")
        if fault is not None and fault.status:
            reason = {401: "Unauthorized", 403: "Forbidden", 404: "NotFound", 500: "InternalError", 503: "ServiceUnavailable"}.get(fault.status, "Failure")
            return self._status(fault.status, reason, f"injected {fault.status} for {path}")
        lease = LEASE_PATH.match(path)
        if lease is not None:
            return await self._lease_request(request, lease.group("ns"), lease.group("name"))
        if request.method != "GET":
            return self._status(405, "MethodNotAllowed", "the fake API server is read-only")
        parts = [p for p in path.split("/") if p]
        if parts == ["api"]:
            return web.json_response({"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []})
        if parts == ["apis"]:
            return web.json_response(self._groups())
        if len(parts) >= 2 and parts[0] == "api":
            return self._resource_request("", parts[1], parts[2:], request)
        if len(parts) >= 3 and parts[0] == "apis":
            return self._resource_request(parts[1], parts[2], parts[3:], request)
        return self._status(404, "NotFound", "the server could not find the requested resource")

    def _groups(self) -> dict[str, Any]:
        groups: dict[str, list[str]] = {}
        for r in self.resources:
            if r.group and r.version not in groups.setdefault(r.group, []):
                groups[r.group].append(r.version)
        return {
            "kind": "APIGroupList",
            "apiVersion": "v1",
            "groups": [
                {
                    "name": g,
                    "versions": [{"groupVersion": f"{g}/{v}", "version": v} for v in versions],
                    "preferredVersion": {"groupVersion": f"{g}/{versions[0]}", "version": versions[0]},
                }
                for g, versions in sorted(groups.items())
            ],
        }

    def _resource_request(self, group: str, version: str, rest: list[str], request: web.Request) -> web.Response:
        served = [r for r in self.resources if r.group == group and r.version == version]
        if not served:
            return self._status(404, "NotFound", "the server could not find the requested resource")
        if not rest:
            return web.json_response({
                "kind": "APIResourceList",
                "apiVersion": "v1",
                "groupVersion": served[0].group_version,
                "resources": [
                    {"name": r.plural, "singularName": r.kind.lower(), "namespaced": r.namespaced, "kind": r.kind, "verbs": ["get", "list", "watch"]}
                    for r in served
                ],
            })
        namespace = None
        if rest[0] == "namespaces" and len(rest) >= 3:
            namespace, rest = rest[1], rest[2:]
        by_plural = {r.plural: r for r in served}
        resource = by_plural.get(rest[0])
        if resource is None or len(rest) > 2 or (namespace is not None and not resource.namespaced):
            return self._status(404, "NotFound", "the server could not find the requested resource")
        if len(rest) == 2:
            name = rest[1]
            if resource.namespaced and namespace is None:
                return self._status(404, "NotFound", "the server could not find the requested resource")
            with self.lock:
                obj = self.objects.get((group, resource.plural, namespace or "", name))
            if obj is None:
                return self._status(404, "NotFound", f'{resource.plural}.{group or "core"} "{name}" not found')
            return web.json_response(self._as_version(obj, resource))
        with self.lock:
            items = [
                self._as_version(o, resource)
                for (g, plural, ns, _), o in sorted(self.objects.items())
                if g == group and plural == resource.plural and (namespace is None or ns == namespace)
            ]
        start = int(request.query.get("continue") or 0)
        limit = int(request.query.get("limit") or 0)
        page = items[start : start + limit] if limit else items[start:]
        more = str(start + limit) if limit and start + limit < len(items) else None
        meta: dict[str, Any] = {"resourceVersion": str(self._rv)}
        if more:
            meta["continue"] = more
        return web.json_response({"kind": f"{resource.kind}List", "apiVersion": resource.group_version, "metadata": meta, "items": page})

    # ------------------------------------------------------------------ leases (the one writable kind)

    def lease(self, namespace: str, name: str) -> dict[str, Any] | None:
        """A copy of a stored Lease, or None."""
        with self.lock:
            found = self.objects.get(("coordination.k8s.io", "leases", namespace, name))
            return copy.deepcopy(found) if found is not None else None

    async def _lease_request(self, request: web.Request, namespace: str, name: str | None) -> web.Response:
        key = lambda n: ("coordination.k8s.io", "leases", namespace, n)  # noqa: E731
        if request.method == "GET":
            with self.lock:
                if name is None:
                    items = [copy.deepcopy(o) for k, o in sorted(self.objects.items()) if k[:3] == key("")[:3]]
                    return web.json_response({"kind": "LeaseList", "apiVersion": "coordination.k8s.io/v1", "metadata": {"resourceVersion": str(self._rv)}, "items": items})
                found = self.objects.get(key(name))
            if found is None:
                return self._status(404, "NotFound", f'leases.coordination.k8s.io "{name}" not found')
            return web.json_response(copy.deepcopy(found))
        if request.method == "DELETE" and name is not None:
            with self.lock:
                found = self.objects.pop(key(name), None)
            if found is None:
                return self._status(404, "NotFound", f'leases.coordination.k8s.io "{name}" not found')
            return web.json_response({"kind": "Status", "apiVersion": "v1", "status": "Success"})
        if request.method not in ("POST", "PUT") or (request.method == "POST") != (name is None):
            return self._status(405, "MethodNotAllowed", f"{request.method} is not supported on this path")
        try:
            body = await request.json()
        except ValueError:
            return self._status(400, "BadRequest", "the body is not JSON")
        if not isinstance(body, dict) or body.get("kind") != "Lease" or body.get("apiVersion") != "coordination.k8s.io/v1":
            return self._status(400, "BadRequest", "the body is not a coordination.k8s.io/v1 Lease")
        meta = body.setdefault("metadata", {})
        target = name if name is not None else meta.get("name")
        if not target or meta.get("name", target) != target:
            return self._status(400, "BadRequest", "metadata.name is missing or does not match the URL")
        if meta.get("namespace", namespace) != namespace:
            return self._status(400, "BadRequest", "metadata.namespace does not match the URL")
        spec = body.get("spec") or {}
        for field_name in ("acquireTime", "renewTime"):
            value = spec.get(field_name)
            if value is not None and not (isinstance(value, str) and MICRO_TIME.match(value)):
                return self._status(400, "BadRequest", f'Lease in version "v1" cannot be handled as a Lease: spec.{field_name}: {value!r} is not a MicroTime')
        duration = spec.get("leaseDurationSeconds")
        if duration is not None and (not isinstance(duration, int) or duration < 1):
            return self._status(422, "Invalid", "spec.leaseDurationSeconds: must be greater than 0")
        with self.lock:
            current = self.objects.get(key(target))
            if request.method == "POST" and current is not None:
                return self._status(409, "AlreadyExists", f'leases.coordination.k8s.io "{target}" already exists')
            if request.method == "PUT":
                if current is None:
                    return self._status(404, "NotFound", f'leases.coordination.k8s.io "{target}" not found')
                sent = meta.get("resourceVersion")
                if sent and sent != current["metadata"]["resourceVersion"]:
                    return self._status(
                        409, "Conflict",
                        f'Operation cannot be fulfilled on leases.coordination.k8s.io "{target}": the object has been modified; '
                        "please apply your changes to the latest version and try again",
                    )
            self._rv += 1
            meta["name"], meta["namespace"], meta["resourceVersion"] = target, namespace, str(self._rv)
            meta["uid"] = current["metadata"]["uid"] if current is not None else f"uid-{self._rv}"
            stored = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": meta, "spec": spec}
            self.objects[key(target)] = stored
            answer = copy.deepcopy(stored)
        return web.json_response(answer, status=201 if request.method == "POST" else 200)

    @staticmethod
    def _as_version(obj: Mapping[str, Any], resource: Resource) -> dict[str, Any]:
        out = copy.deepcopy(dict(obj))
        out["apiVersion"] = resource.group_version
        return out


# ---------------------------------------------------------------------------------------- builders


def kustomization(
    name: str,
    *,
    namespace: str = "flux-system",
    ready: str | None = "True",
    reason: str = "ReconciliationSucceeded",
    message: str | None = None,
    revision: str = "main@sha1:0000000000000000000000000000000000000001",
    attempted: str | None = None,
    generation: int = 1,
    observed: int | None = None,
    suspend: bool = False,
    source: tuple[str, str] = ("GitRepository", "flux-system"),
    inventory: tuple[str, ...] = (),
    stalled: tuple[str, str] | None = None,
) -> dict[str, Any]:
    """A Flux Kustomization with a status, as kustomize-controller writes it."""
    conditions = []
    if ready is not None:
        conditions.append({
            "type": "Ready",
            "status": ready,
            "reason": reason,
            "message": message if message is not None else (f"Applied revision: {revision}" if ready == "True" else "failed"),
            "lastTransitionTime": "2026-09-06T08:00:00Z",
        })
    if stalled is not None:
        conditions.append({"type": "Stalled", "status": "True", "reason": stalled[0], "message": stalled[1]})
    return {
        "apiVersion": "kustomize.toolkit.fluxcd.io/v1",
        "kind": "Kustomization",
        "metadata": {"name": name, "namespace": namespace, "generation": generation},
        "spec": {
            "interval": "10m",
            "path": f"./{name}",
            "prune": True,
            "suspend": suspend,
            "sourceRef": {"kind": source[0], "name": source[1]},
        },
        "status": {
            "observedGeneration": generation if observed is None else observed,
            "lastAppliedRevision": revision,
            "lastAttemptedRevision": attempted if attempted is not None else revision,
            "conditions": conditions,
            "inventory": {"entries": [{"id": i, "v": "v1"} for i in inventory]},
        },
    }


def git_repository(name: str = "flux-system", *, namespace: str = "flux-system", revision: str | None = "main@sha1:0000000000000000000000000000000000000001") -> dict[str, Any]:
    status: dict[str, Any] = {"conditions": [{"type": "Ready", "status": "True" if revision else "False", "reason": "Succeeded" if revision else "GitOperationFailed", "message": "stored artifact" if revision else "failed to checkout"}]}
    if revision:
        status["artifact"] = {"revision": revision, "digest": "sha256:00", "path": "gitrepository/x.tar.gz", "url": "http://source-controller/x.tar.gz"}
    return {
        "apiVersion": "source.toolkit.fluxcd.io/v1",
        "kind": "GitRepository",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"interval": "1m", "url": "https://example.invalid/repo.git", "ref": {"branch": "main"}},
        "status": status,
    }


def crd(group: str, kind: str, plural: str, *, scope: str = "Cluster", version: str = "v1", labels: Mapping[str, str] | None = None, annotations: Mapping[str, str] | None = None, owners: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": f"{plural}.{group}"}
    if labels:
        meta["labels"] = dict(labels)
    if annotations:
        meta["annotations"] = dict(annotations)
    if owners:
        meta["ownerReferences"] = owners
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": meta,
        "spec": {
            "group": group,
            "names": {"kind": kind, "plural": plural, "singular": kind.lower(), "listKind": f"{kind}List"},
            "scope": scope,
            "versions": [{"name": version, "served": True, "storage": True, "schema": {"openAPIV3Schema": {"type": "object"}}}],
        },
    }


def owned_by(tier: str, namespace: str = "flux-system") -> dict[str, str]:
    """Flux's ownership labels."""
    return {"kustomize.toolkit.fluxcd.io/name": tier, "kustomize.toolkit.fluxcd.io/namespace": namespace}
