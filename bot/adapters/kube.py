"""Access to a live cluster through kubernetes-asyncio — the only module importing it.

Reads are GETs (get or list). A cluster is reached through a kubeconfig file (path and context; default
`$KUBECONFIG` or `~/.kube/config`) or the pod's service account (`in_cluster`). Resources are found through
discovery (`/api`, `/apis`, `/apis/<group>/<version>`), so any kind can be read by apiVersion/kind/namespace/name.
`KubeClient.request` is the one public call under all of them; the only writer is bot/adapters/lease.py (the
leader-election Lease).

Failures become `KubeError` (an `InfraError`) subclasses — unreachable, timed out, unauthorized
(an expired or revoked credential), forbidden (missing RBAC, see deploy/rbac.yaml), a bad
kubeconfig — whose messages never carry a credential. `read_live_state` and `read_objects` never
raise them: they record them in the `LiveState`, where they become `precondition-unknown` errors.
"""

from __future__ import annotations

import asyncio
import builtins
import json
import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence
from urllib.parse import quote, urlsplit, urlunsplit

import aiohttp
from kubernetes_asyncio.client import ApiClient, Configuration
from kubernetes_asyncio.client.exceptions import ApiException
from kubernetes_asyncio.config import ConfigException, load_incluster_config, load_kube_config

from bot.engine.render.clusterobjects import ClusterObject, ConfigKey, object_data
from bot.engine.core.errors import InfraError
from bot.engine.livestate.live import LiveBody, LiveCrd, LiveKustomization, LiveObject, LiveSource, LiveState, ObjectRead
from bot.engine.core.model import ObjectRef, SourceRef

KUSTOMIZE_API = ("kustomize.toolkit.fluxcd.io", "v1")
SOURCE_GROUP = "source.toolkit.fluxcd.io"
CRD_API = ("apiextensions.k8s.io", "v1")
PAGE_SIZE = 250
READ_RBAC = "give the credential read access (deploy/rbac.yaml)"
_VERBS = {"GET": "reading", "POST": "creating", "PUT": "replacing", "PATCH": "patching", "DELETE": "deleting"}

log = logging.getLogger(__name__)


class KubeError(InfraError):
    """The cluster could not be read."""


class KubeConfigError(KubeError):
    """The kubeconfig (or in-cluster service account) cannot be loaded."""


class KubeUnreachable(KubeError):
    """No connection to the API server."""


class KubeTimeout(KubeUnreachable):
    """The API server did not answer in time."""


class KubeUnauthorized(KubeError):
    """401: the credential is missing, expired or revoked."""


class KubeForbidden(KubeError):
    """403: the credential may not read this (RBAC)."""


class KubeApiError(KubeError):
    """Any other unexpected answer (5xx, a malformed body)."""


class _NotFound(Exception):
    """404: the object (or its kind) is not there. Internal: callers get None."""


@dataclass(frozen=True)
class ClusterAccess:
    """How to reach one cluster, read-only."""

    kubeconfig: Path | None = None  # None: $KUBECONFIG or ~/.kube/config
    context: str | None = None  # None: the kubeconfig's current-context
    in_cluster: bool = False  # the pod's service account instead of a kubeconfig
    timeout: float = 15.0  # seconds per request

    def describe(self) -> str:
        """How the cluster is reached, as comments and reports show it: the context only, never the
        kubeconfig's path or the API server's URL (a host's layout and network are nobody's business)."""
        if self.in_cluster:
            return "in-cluster service account"
        return f"context {self.context}" if self.context else "the kubeconfig's current context"


_SECRETISH = re.compile(r"eyJ[\w-]+\.[\w-]+\.[\w-]*|\b[A-Za-z0-9+_=-]{32,}\b")


def _scrub(text: str) -> str:
    """Drop anything that looks like a token (JWTs, long base64/hex runs) from a message."""
    return _SECRETISH.sub("***", " ".join(str(text).split()))[:500]


def _hide_paths(text: str) -> str:
    """A kubeconfig loader's message without the host's file paths (`/home/me/.kube/config`) or URLs."""
    text = re.sub(r"\b[a-z][a-z0-9+.-]*://\S+", "<url>", text)
    return re.sub(r"(?<![\w.<])/(?:[\w.@+-]+/)*[\w.@+-]+", "<path>", text)


def _yaml_problem(exc: Exception) -> str:
    """A kubeconfig that is not YAML: the parser's problem and the line it is on (PyYAML's marks count from 0)."""
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    problem = getattr(exc, "problem", None) or getattr(exc, "context", None)
    if mark is None:
        return type(exc).__name__
    return f"not valid YAML at line {mark.line + 1}, column {mark.column + 1}" + (f": {problem}" if problem else "")


def _json(text: Any) -> Any:
    """An error answer's body as JSON (a `Status` object), or None when it is not JSON."""
    try:
        return json.loads(text) if text else None
    except (TypeError, ValueError):
        return None


def _host(url: str) -> str:
    """The API server URL without any userinfo."""
    parts = urlsplit(url)
    netloc = parts.hostname or ""
    if parts.port:
        netloc += f":{parts.port}"
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


class KubeClient:
    """A connection to one cluster (`async with KubeClient(access) as kube`, or `open()`/`close()`)."""

    def __init__(self, access: ClusterAccess) -> None:
        self.access = access
        self._client: ApiClient | None = None
        self._host = ""
        self._groups: dict[str, str] | None = None  # group -> preferred version
        self._resources: dict[str, dict[str, tuple[str, bool]]] = {}  # groupVersion -> kind -> (plural, namespaced)

    async def __aenter__(self) -> "KubeClient":
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def open(self) -> None:
        """Load the kubeconfig (or service account) and open the connection; KubeConfigError when it cannot be loaded."""
        config = Configuration()
        try:
            if self.access.in_cluster:
                load_incluster_config(client_configuration=config)
            else:
                path = self.access.kubeconfig
                if path is not None and not Path(path).is_file():
                    log.warning("kubeconfig %s does not exist", path)
                    raise KubeConfigError("the kubeconfig configured for this cluster does not exist")
                await load_kube_config(
                    config_file=str(path) if path else None,
                    context=self.access.context,
                    client_configuration=config,
                    persist_config=False,
                )
        except KubeError:
            raise
        except (ConfigException, OSError, KeyError, TypeError, ValueError, AttributeError) as exc:
            log.warning("cannot load kubeconfig %s: %s", self.access.kubeconfig or "(default)", _scrub(str(exc)) or type(exc).__name__)
            raise KubeConfigError(f"cannot load {self._what()}: {_scrub(_hide_paths(str(exc))) or type(exc).__name__}") from None
        except Exception as exc:  # yaml errors and the like: still a configuration problem, never a traceback
            raise KubeConfigError(f"cannot load {self._what()}: {_yaml_problem(exc)}") from None
        self._host = _host(config.host or "")
        log.debug("%s: API server %s", self.access.describe(), self._host)  # for the operator's log only
        self._client = ApiClient(configuration=config)

    async def close(self) -> None:
        if self._client is not None:
            client, self._client = self._client, None
            await client.close()

    def _what(self) -> str:
        """The access as the object of "cannot load …" (describe() may already start with "the")."""
        what = self.access.describe()
        return what if what.startswith("the ") else f"the {what}"

    # ------------------------------------------------------------------ requests

    async def request(
        self,
        method: str,
        path: str,
        what: str,
        *,
        body: dict[str, Any] | None = None,
        query: Sequence[tuple[str, Any]] = (),
        answers: tuple[int, ...] = (404,),
        rbac: str = READ_RBAC,
    ) -> tuple[int, Any]:
        """`(status, JSON body)` for a 2xx or a status in `answers`; any other outcome raises a KubeError subclass."""
        # `what` names the object in messages ("Flux Kustomizations"); `rbac` is what a 403 message asks for.
        assert self._client is not None, "use `async with KubeClient(...)` or `await open()`"
        where = self.access.describe()  # never the API server's URL: messages reach PR comments
        doing = f"{_VERBS.get(method, method)} {what}"
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = "application/json"
        try:
            data, status, _ = await self._client.call_api(
                path,
                method,
                query_params=list(query),
                header_params=headers,
                body=body,
                response_types_map={200: "object", 201: "object"},
                auth_settings=["BearerToken"],
                _return_http_data_only=False,
                _preload_content=True,
                _request_timeout=self.access.timeout,
            )
            return status, data
        except ApiException as exc:
            status = exc.status or 0
            if status in answers:
                return status, _json(exc.body)
            if status == 401:
                raise KubeUnauthorized(
                    f"{where} rejected the credential (401 Unauthorized): it is missing, expired or revoked"
                ) from None
            if status == 403:
                raise KubeForbidden(f"{where} forbids {doing} (403 Forbidden): {rbac}") from None
            raise KubeApiError(f"{where}: {doing} failed with HTTP {status} {_scrub(exc.reason or '')}".rstrip()) from None
        except (asyncio.TimeoutError, TimeoutError):
            raise KubeTimeout(f"{where} did not answer within {self.access.timeout:g}s while {doing}") from None
        except aiohttp.ClientError as exc:
            raise KubeUnreachable(f"cannot reach the API server of {self._what()}: {type(exc).__name__}") from None
        except ConfigException as exc:  # a credential plugin failed while refreshing
            raise KubeUnauthorized(f"{where}: no usable credential ({_scrub(str(exc))})") from None
        except (ValueError, TypeError) as exc:
            raise KubeApiError(f"{where}: unreadable answer for {what} ({type(exc).__name__})") from None

    async def _get(self, path: str, what: str, query: Sequence[tuple[str, Any]] = ()) -> Any:
        """GET `path`; 404 raises _NotFound, every other failure a KubeError subclass."""
        status, body = await self.request("GET", path, what, query=query)
        if status == 404:
            raise _NotFound(path)
        return body

    async def _list(self, path: str, what: str) -> list[dict[str, Any]]:
        """Every item of a list, page by page (`limit`/`continue`)."""
        items: list[dict[str, Any]] = []
        token = None
        while True:
            query: list[tuple[str, Any]] = [("limit", PAGE_SIZE)]
            if token:
                query.append(("continue", token))
            page = await self._get(path, what, query)
            if not isinstance(page, dict):
                raise KubeApiError(f"{self.access.describe()}: {what} is not a list")
            items += [i for i in page.get("items") or () if isinstance(i, dict)]
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                return items

    # ------------------------------------------------------------------ discovery

    async def preferred_version(self, group: str) -> str | None:
        """The server's preferred version of an API group (None when the group is not served)."""
        if group == "":
            return "v1"
        if self._groups is None:
            try:
                doc = await self._get("/apis", "the API groups (discovery)")
            except _NotFound:
                doc = {}
            self._groups = {
                str(g.get("name")): str((g.get("preferredVersion") or {}).get("version") or (g.get("versions") or [{}])[0].get("version", ""))
                for g in (doc or {}).get("groups") or ()
                if isinstance(g, dict)
            }
        return self._groups.get(group) or None

    async def resource(self, api_version: str, kind: str) -> tuple[str, str, bool] | None:
        """`(path prefix, plural, namespaced)` for a kind, from discovery; None when the server does not serve it."""
        group, _, version = api_version.rpartition("/")
        prefix = f"/apis/{group}/{version}" if group else f"/api/{version}"
        if api_version not in self._resources:
            try:
                doc = await self._get(prefix, f"the resources of {api_version} (discovery)")
            except _NotFound:
                doc = {}
            self._resources[api_version] = {
                str(r.get("kind")): (str(r.get("name")), bool(r.get("namespaced")))
                for r in (doc or {}).get("resources") or ()
                if isinstance(r, dict) and "/" not in str(r.get("name", ""))
            }
        found = self._resources[api_version].get(kind)
        return (prefix, found[0], found[1]) if found else None

    @staticmethod
    def _path(prefix: str, plural: str, namespaced: bool, namespace: str | None, name: str | None = None) -> str:
        path = prefix
        if namespaced and namespace:
            path += f"/namespaces/{quote(namespace, safe='')}"
        path += f"/{plural}"
        if name is not None:
            path += f"/{quote(name, safe='')}"
        return path

    # ------------------------------------------------------------------ reads

    async def get(self, api_version: str, kind: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        """One object by apiVersion/kind/namespace/name; None when absent (or its kind is not served)."""
        found = await self.resource(api_version, kind)
        if found is None:
            return None
        prefix, plural, namespaced = found
        what = f"{kind} {namespace + '/' if namespaced and namespace else ''}{name}"
        try:
            body = await self._get(self._path(prefix, plural, namespaced, namespace, name), what)
        except _NotFound:
            return None
        return body if isinstance(body, dict) else None

    async def list(self, api_version: str, kind: str, namespace: str | None = None) -> list[dict[str, Any]]:
        """Every object of a kind (in one namespace, or cluster-wide); empty when the kind is not served."""
        found = await self.resource(api_version, kind)
        if found is None:
            return []
        prefix, plural, namespaced = found
        try:
            return await self._list(self._path(prefix, plural, namespaced, namespace), f"{plural}.{api_version}")
        except _NotFound:
            return []

    async def list_kustomizations(self) -> builtins.list[dict[str, Any]]:  # `list` here is the method above
        """Every Flux Kustomization (kustomize.toolkit.fluxcd.io/v1), cluster-wide."""
        group, version = KUSTOMIZE_API
        try:
            return await self._list(f"/apis/{group}/{version}/kustomizations", "Flux Kustomizations")
        except _NotFound:
            raise KubeApiError(
                f"{self.access.describe()} does not serve {group}/{version} Kustomizations: is Flux ≥ 2.0 installed?"
            ) from None

    async def get_source(self, ref: SourceRef) -> dict[str, Any] | None:
        """A Flux source (GitRepository, OCIRepository, Bucket, …) at the server's preferred version."""
        version = await self.preferred_version(SOURCE_GROUP)
        if version is None:
            return None
        return await self.get(f"{SOURCE_GROUP}/{version}", ref.kind, ref.namespace, ref.name)

    async def list_crds(self) -> builtins.list[dict[str, Any]]:  # `list` here is the method above
        group, version = CRD_API
        try:
            return await self._list(f"/apis/{group}/{version}/customresourcedefinitions", "CustomResourceDefinitions")
        except _NotFound:
            return []


async def read_live_state(access: ClusterAccess, cluster: str) -> LiveState:
    """Kustomizations, the sources they use and the CRDs of one cluster; never raises a KubeError."""
    where = access.describe()
    try:
        async with KubeClient(access) as kube:
            kustomizations = {k.id: k for k in map(LiveKustomization.from_object, await kube.list_kustomizations())}
            refs = sorted({k.source for k in kustomizations.values() if k.source is not None}, key=str)
            results = await asyncio.gather(*(kube.get_source(ref) for ref in refs), return_exceptions=True)
            sources: dict[SourceRef, LiveSource] = {}
            source_errors: dict[SourceRef, str] = {}
            for ref, result in zip(refs, results):
                if isinstance(result, KubeError):
                    source_errors[ref] = str(result)
                elif isinstance(result, BaseException):
                    raise result
                elif result is not None:
                    sources[ref] = LiveSource.from_object(ref, result)
            crd_error = None
            crds: tuple[LiveCrd, ...] = ()
            try:
                crds = tuple(LiveCrd.from_object(body) for body in await kube.list_crds())
            except KubeError as exc:
                crd_error = str(exc)
    except KubeError as exc:
        return LiveState.unavailable(cluster, str(exc), where)
    return LiveState(
        cluster=cluster,
        where=where,
        kustomizations=kustomizations,
        sources=sources,
        source_errors=source_errors,
        crds=crds,
        crd_error=crd_error,
    )


async def read_objects(access: ClusterAccess, refs: Sequence[ObjectRef]) -> list[ObjectRead]:
    """Each object's live labels (absent → `object` None; unreadable → `error`); never raises a KubeError."""
    if not refs:
        return []
    reads = []
    try:
        async with KubeClient(access) as kube:
            for ref in refs:
                try:
                    body = await kube.get(ref.api_version, ref.kind, ref.namespace or None, ref.name)
                    reads.append(ObjectRead(ref, LiveObject.from_object(ref, body) if body is not None else None))
                except KubeError as exc:
                    reads.append(ObjectRead(ref, error=str(exc)))
    except KubeError as exc:
        done = {r.ref for r in reads}
        reads += [ObjectRead(ref, error=str(exc)) for ref in refs if ref not in done]
    return reads


async def read_object_bodies(access: ClusterAccess, refs: Sequence[ObjectRef], concurrency: int = 8) -> list[LiveBody]:
    """Each object's whole body, for drift (absent, unreadable, or a kind the cluster does not serve);
    never raises a KubeError. A Secret keeps its keys only (`LiveBody.of`): its values never leave this call."""
    if not refs:
        return []
    gate = asyncio.Semaphore(max(1, concurrency))

    async def one(kube: KubeClient, ref: ObjectRef) -> LiveBody:
        async with gate:
            try:
                if await kube.resource(ref.api_version, ref.kind) is None:
                    return LiveBody(ref, kind_served=False)
                return LiveBody.of(ref, await kube.get(ref.api_version, ref.kind, ref.namespace or None, ref.name))
            except KubeError as exc:
                return LiveBody(ref, error=str(exc))

    try:
        async with KubeClient(access) as kube:
            return list(await asyncio.gather(*(one(kube, ref) for ref in refs)))
    except KubeError as exc:
        return [LiveBody(ref, error=str(exc)) for ref in refs]


def fetch_live_state(access: ClusterAccess, cluster: str) -> LiveState:
    """`read_live_state` from synchronous code (a thread without a running loop, or the CLI)."""
    return asyncio.run(read_live_state(access, cluster))


class ObjectReader:
    """A synchronous `ObjectFetcher` for the review (it runs in a worker thread or the CLI)."""

    def __init__(self, access: ClusterAccess) -> None:
        self.access = access

    def __call__(self, refs: Sequence[ObjectRef]) -> list[ObjectRead]:
        return asyncio.run(read_objects(self.access, refs))


async def read_config_objects(access: ClusterAccess, keys: Sequence[ConfigKey], concurrency: int = 8) -> list[ClusterObject]:
    """The named ConfigMaps and Secrets (GET by name, nothing listed): their data (a Secret's decoded), absent, or
    why they could not be read; never raises a KubeError. Only the data leaves this call, never logged."""
    if not keys:
        return []
    gate = asyncio.Semaphore(max(1, concurrency))

    async def one(kube: KubeClient, key: ConfigKey) -> ClusterObject:
        kind, namespace, name = key
        async with gate:
            try:
                body = await kube.get("v1", kind, namespace, name)
            except KubeError as exc:
                return ClusterObject(kind, namespace, name, error=str(exc))
        return ClusterObject(kind, namespace, name, object_data(body, live=True) if body is not None else None)

    try:
        async with KubeClient(access) as kube:
            return list(await asyncio.gather(*(one(kube, key) for key in keys)))
    except KubeError as exc:
        return [ClusterObject(*key, error=str(exc)) for key in keys]


class ConfigReader:
    """A synchronous `ConfigFetcher` for the renderer (its thread has no loop): each object is read once per reader."""

    def __init__(self, access: ClusterAccess) -> None:
        self.access = access
        self._read: dict[ConfigKey, ClusterObject] = {}

    def __call__(self, keys: Sequence[ConfigKey]) -> list[ClusterObject]:
        wanted = [k for k in dict.fromkeys(keys) if k not in self._read]
        for found in asyncio.run(read_config_objects(self.access, wanted)) if wanted else ():
            self._read[found.key] = found
        return [self._read[k] for k in keys]
