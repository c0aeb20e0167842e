"""Chart archives from Helm HTTP repositories and OCI registries: the only place that opens connections for charts.

Every connection goes to an address this module resolved and checked itself (no proxy from the environment, no
second DNS look-up that a rebinding could answer differently), every body is read with a cap, and every archive is
unpacked in a bounded way before anyone else sees it.
"""

from __future__ import annotations

import base64
import hashlib
import http.client
import io
import ipaddress
import json
import os
import re
import socket
import ssl
import tarfile
import tempfile
import threading
import time
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, TypeVar
from urllib.parse import urlencode, urljoin, urlsplit

from bot.engine.render import chartsource as cs
from bot.engine.render import yamlio
from bot.engine.render.chartsource import ChartFetchError, Credential, Endpoint, FetchedChart, FetchPolicy, OciReference
from bot.engine.core.errors import InputError

__all__ = ["ChartFetcher", "ChartFetchError", "Credential", "FetchPolicy", "FetchedChart"]

MAX_REDIRECTS = 3
_SMALL = 1024 * 1024  # manifests, tokens, error bodies, Chart.yaml
_CHUNK = 64 * 1024
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
# Cloud metadata endpoints (AWS, GCP, Azure on 169.254.169.254; AWS's IPv6 one). They are link-local or
# private anyway; named so the rule does not depend on that.
_METADATA = frozenset({ipaddress.ip_address("169.254.169.254"), ipaddress.ip_address("fd00:ec2::254")})
_USER_AGENT = "fluxwarden-chart-fetcher"

Resolver = Callable[[str, int], list[str]]
T = TypeVar("T")


def system_resolver(host: str, port: int) -> list[str]:
    """Every address the system resolver gives for `host` (TCP)."""
    return [str(info[4][0]) for info in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)]


def _internal(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """Loopback, private, link-local, multicast, unspecified, reserved or metadata: not a public address."""
    mapped = getattr(address, "ipv4_mapped", None)
    if mapped is not None:
        return _internal(mapped)
    return address in _METADATA or address.is_multicast or address.is_unspecified or not address.is_global


class _PinnedHTTPConnection(http.client.HTTPConnection):
    """An HTTP connection to an address checked in advance; the Host header keeps the name."""

    def __init__(self, host: str, port: int, address: str, timeout: float) -> None:
        super().__init__(host, port, timeout=timeout)
        self._address = address

    def connect(self) -> None:
        """Connect to the checked address, never to a fresh resolution of the name."""
        self.sock = socket.create_connection((self._address, self.port), self.timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class _PinnedHTTPSConnection(http.client.HTTPSConnection):
    """An HTTPS connection to an address checked in advance; SNI, certificate check and Host keep the name."""

    def __init__(self, host: str, port: int, address: str, timeout: float, context: ssl.SSLContext) -> None:
        super().__init__(host, port, timeout=timeout, context=context)
        self._address = address
        self._tls = context

    def connect(self) -> None:
        """Connect to the checked address, then speak TLS for the name."""
        sock = socket.create_connection((self._address, self.port), self.timeout)
        self.sock = self._tls.wrap_socket(sock, server_hostname=self.host)


@dataclass(frozen=True)
class _Response:
    """A finished GET: status, headers and the (capped) body, and the URL that answered."""

    status: int
    headers: Mapping[str, str]
    body: bytes
    url: str


class _Origin:
    """Where a credential may be sent: the endpoint it belongs to and the header that carries it."""

    def __init__(self, authority: str, header: str | None) -> None:
        self.authority, self.header = authority, header


class _BoundedGunzip(io.RawIOBase):
    """A gzip stream decompressed on demand, failing once more than `cap` bytes came out (a gzip bomb)."""

    def __init__(self, data: bytes, cap: int) -> None:
        super().__init__()
        self._data, self._pos, self._cap, self.total = memoryview(data), 0, cap, 0
        self._inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)
        self._ready = b""

    def readable(self) -> bool:
        return True

    def _more(self, size: int) -> bytes:
        while not self._inflate.eof:
            if self._inflate.unconsumed_tail:
                source = self._inflate.unconsumed_tail
            elif self._pos < len(self._data):
                source = bytes(self._data[self._pos:self._pos + _CHUNK])
                self._pos += len(source)
            else:
                raise ChartFetchError("invalid", "the chart archive is a truncated gzip stream")
            try:
                out = self._inflate.decompress(source, size)
            except zlib.error:
                raise ChartFetchError("invalid", "the chart archive is not a gzip stream") from None
            if out:
                self.total += len(out)
                if self.total > self._cap:
                    raise ChartFetchError("too-large", f"the chart archive unpacks to more than {self._cap} bytes")
                return out
        return b""

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        if not self._ready:
            self._ready = self._more(max(len(buffer), _CHUNK))
        taken = self._ready[: len(buffer)]
        self._ready = self._ready[len(taken):]
        buffer[: len(taken)] = taken
        return len(taken)


def inspect_archive(archive: bytes, limits: cs.FetchLimits) -> tuple[str, str]:
    """The chart name and version of a gzipped tar, read in a bounded way; unsafe or oversized archives refused."""
    reader = _BoundedGunzip(archive, limits.unpacked_bytes)
    chart_yaml: bytes | None = None
    files = 0
    try:
        with tarfile.open(fileobj=reader, mode="r|") as tar:
            for member in tar:
                files += 1
                if files > limits.files:
                    raise ChartFetchError("too-large", f"the chart archive holds more than {limits.files} files")
                problem = cs.member_problem(member.name)
                if problem:
                    raise ChartFetchError("invalid", problem)
                if not (member.isfile() or member.isdir()):
                    raise ChartFetchError("invalid", f"the chart archive holds a link or device {member.name[:100]!r}")
                parts = member.name.strip("/").split("/")
                if member.isfile() and len(parts) == 2 and parts[1] == "Chart.yaml" and chart_yaml is None:
                    handle = tar.extractfile(member)
                    chart_yaml = handle.read(_SMALL + 1) if handle is not None else None
    except tarfile.TarError as exc:
        raise ChartFetchError("invalid", f"the chart archive is not a tar file: {str(exc)[:120]}") from None
    if chart_yaml is None:
        raise ChartFetchError("invalid", "the chart archive has no <chart>/Chart.yaml")
    try:
        meta = yamlio.load_one(chart_yaml.decode("utf-8"), "Chart.yaml", max_bytes=_SMALL)
    except (UnicodeDecodeError, InputError):
        raise ChartFetchError("invalid", "the chart's Chart.yaml is not valid YAML") from None
    if not isinstance(meta, dict) or not isinstance(meta.get("name"), str) or not isinstance(meta.get("version"), str):
        raise ChartFetchError("invalid", "the chart's Chart.yaml has no name or version")
    return meta["name"], meta["version"]


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class _Cache:
    """Archives by content (`charts/<sha256>`) and an index from (source, chart, version or digest) to them."""

    def __init__(self, root: Path | None) -> None:
        self._root = None if root is None else root / "charts"

    def get(self, key: str) -> FetchedChart | None:
        """The chart cached under `key`, when its archive is present and whole."""
        if self._root is None:
            return None
        try:
            ref = json.loads((self._root / "refs" / key).read_text())
            sha = ref["sha256"]
            if not re.fullmatch(r"[0-9a-f]{64}", sha):
                return None
            archive = (self._root / sha).read_bytes()
        except (OSError, ValueError, KeyError, TypeError):
            return None
        if _sha256(archive) != sha:
            return None
        return FetchedChart(archive, str(ref["name"]), str(ref["version"]), f"sha256:{sha}", str(ref["url"]))

    def has_blob(self, sha: str) -> bytes | None:
        """An archive already stored under its digest, whole."""
        if self._root is None:
            return None
        try:
            archive = (self._root / sha).read_bytes()
        except OSError:
            return None
        return archive if _sha256(archive) == sha else None

    def put(self, chart: FetchedChart, keys: set[str]) -> None:
        """Store the archive and point every key at it; each file appears whole or not at all."""
        if self._root is None:
            return
        sha = chart.digest.removeprefix("sha256:")
        (self._root / "refs").mkdir(parents=True, exist_ok=True)
        if not (self._root / sha).is_file():
            self._atomic(self._root / sha, chart.archive)
        ref = json.dumps({"sha256": sha, "name": chart.name, "version": chart.version, "url": chart.url}).encode()
        for key in keys:
            self._atomic(self._root / "refs" / key, ref)

    @staticmethod
    def _atomic(path: Path, data: bytes) -> None:
        fd, temp = tempfile.mkstemp(dir=path.parent, prefix=".partial-")
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(temp, path)
        except BaseException:
            with _suppress():
                os.unlink(temp)
            raise


class _suppress:
    """Ignore an OSError (cleanup of a temporary file)."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: object, *_: object) -> bool:
        return kind is not None and issubclass(kind, OSError)  # type: ignore[arg-type]


class ChartFetcher:
    """Fetches chart archives under a `FetchPolicy`; thread-safe; indexes and tag lists read once per fetcher."""

    def __init__(self, policy: FetchPolicy, cache_dir: Path | None, *, resolver: Resolver = system_resolver) -> None:
        self._policy, self._cache, self._resolve = policy, _Cache(cache_dir), resolver
        self._lock = threading.Lock()
        self._key_locks: dict[str, threading.Lock] = {}
        self._memo: dict[str, object] = {}
        self._auth: dict[str, str] = {}
        self._dns: dict[str, list[ipaddress.IPv4Address | ipaddress.IPv6Address]] = {}
        self._tls: ssl.SSLContext | None = None  # made on the first https request: loading the CA store takes ~20 ms
        self._mirror_targets = frozenset(cs.endpoint(base).authority for base in policy.mirrors.values())

    # -- public API --------------------------------------------------------------------------------------------

    def http_chart(self, repo_url: str, chart: str, version_constraint: str, *, secret_ref: str | None = None) -> FetchedChart:
        """The chart `chart` at the highest version of a Helm HTTP repository satisfying `version_constraint`."""
        with self._scrubbed(repo_url):
            return self._http_chart(repo_url, chart, version_constraint or "", secret_ref)

    def oci_chart(self, url: str, *, tag: str | None = None, semver: str | None = None, digest: str | None = None,
                  insecure: bool = False, secret_ref: str | None = None, layer_media_type: str | None = None) -> FetchedChart:
        """A chart from an OCI registry by digest, else semver (over the tags), else tag (default `latest`)."""
        with self._scrubbed(url):
            return self._oci_chart(url, tag, semver, digest, insecure, secret_ref, layer_media_type or cs.HELM_CHART_LAYER)

    # -- HTTP repositories -------------------------------------------------------------------------------------

    def _http_chart(self, repo_url: str, chart: str, constraint: str, secret_ref: str | None) -> FetchedChart:
        ep = cs.endpoint(repo_url)
        if ep.scheme not in ("http", "https"):
            raise ChartFetchError("invalid", f"{cs.redact(repo_url)!r} is not an http(s) Helm repository")
        source = cs.redact(repo_url)
        pinned = cs.is_pinned_version(constraint)
        keys = {cs.cache_key(source, chart, constraint)} if pinned else set()
        if pinned and (hit := self._cache.get(next(iter(keys)))) is not None:
            return hit
        origin = self._origin(repo_url, self._policy.credential(secret_ref, ep.host, ep.port), basic_first=True)
        entries = self._once(f"index {source}", lambda: cs.parse_index(
            self._get(cs.index_url(repo_url), self._policy.limits.index_bytes, origin, "the index").body,
            source, self._policy.limits.index_bytes))
        entry = cs.select_entry(entries, chart, constraint, source)
        keys.add(cs.cache_key(source, chart, entry.version))
        for key in keys:
            if (hit := self._cache.get(key)) is not None:
                self._cache.put(hit, keys)
                return hit
        if not entry.urls:
            raise ChartFetchError("invalid", f"chart {chart!r} {entry.version} in {source} has no download URL")
        chart_url = cs.resolve_reference_url(repo_url, entry.urls[0])
        archive = self._get(chart_url, self._policy.limits.archive_bytes, origin, "the chart archive").body
        sha = _sha256(archive)
        if entry.digest and entry.digest != sha:
            raise ChartFetchError("invalid", f"chart {chart!r} {entry.version} from {cs.redact(chart_url)}: the "
                                             f"archive's digest sha256:{sha} is not the index's sha256:{entry.digest}")
        name, version = inspect_archive(archive, self._policy.limits)
        fetched = FetchedChart(archive, name, version, f"sha256:{sha}", cs.redact(chart_url))
        self._cache.put(fetched, keys)
        return fetched

    # -- OCI registries ----------------------------------------------------------------------------------------

    def _oci_chart(self, url: str, tag: str | None, semver: str | None, digest: str | None, insecure: bool,
                   secret_ref: str | None, media_type: str) -> FetchedChart:
        ref = cs.parse_oci_url(url)
        base = f"{'http' if insecure else 'https'}://{ref.registry.authority}"
        cred = self._policy.credential(secret_ref, ref.registry.host, ref.registry.port)
        origin = self._origin(base, cred, basic_first=False)
        keys: set[str] = set()
        if digest:
            reference = cs.check_digest(digest)
            keys.add(cs.cache_key(ref.url, ref.chart, reference))
        else:
            if semver is not None and not cs.is_pinned_version(semver):
                reference = cs.select_tag(self._tags(ref, base, origin, cred), semver, ref.url)
            else:
                reference = cs.tag_for(semver or tag or "latest")
            if cs.is_pinned_version(reference.replace("_", "+")):
                # A chart version is immutable by Helm's convention: a semver tag is pinned like a digest.
                keys.add(cs.cache_key(ref.url, ref.chart, reference))
        for key in keys:
            if (hit := self._cache.get(key)) is not None:
                return hit
        manifest = self._oci_get(ref, base, cs.oci_path(ref, "manifests", reference), origin, cred,
                                 _SMALL * 4, "the manifest", accept=cs.OCI_MANIFEST).body
        if digest and f"sha256:{_sha256(manifest)}" != digest:
            raise ChartFetchError("invalid", f"the manifest of {ref.url}@{digest} does not have that digest")
        layer = cs.chart_layer(manifest, media_type, ref.url)
        if layer.size > self._policy.limits.archive_bytes:
            raise ChartFetchError("too-large", f"the chart layer of {ref.url} is {layer.size} bytes, over the "
                                               f"{self._policy.limits.archive_bytes}-byte limit")
        sha = layer.digest.removeprefix("sha256:")
        archive = self._cache.has_blob(sha)
        if archive is None:
            archive = self._oci_get(ref, base, cs.oci_path(ref, "blobs", layer.digest), origin, cred,
                                    self._policy.limits.archive_bytes, "the chart layer").body
            if _sha256(archive) != sha:
                raise ChartFetchError("invalid", f"the chart layer of {ref.url} does not have its digest {layer.digest}")
        name, version = inspect_archive(archive, self._policy.limits)
        keys.add(cs.cache_key(ref.url, ref.chart, f"sha256:{_sha256(manifest)}"))
        shown = f"{ref.url}@{digest}" if digest else f"{ref.url}:{reference}"
        fetched = FetchedChart(archive, name, version, f"sha256:{sha}", shown)
        self._cache.put(fetched, keys)
        return fetched

    def _tags(self, ref: OciReference, base: str, origin: _Origin, cred: Credential | None) -> list[str]:
        """Every tag of the repository (following `Link` pages), read once per fetcher."""
        def read() -> list[str]:
            tags: list[str] = []
            path: str | None = cs.oci_path(ref, "tags", "list")
            budget = self._policy.limits.index_bytes
            for _page in range(50):
                if path is None:
                    break
                response = self._oci_get(ref, base, path, origin, cred, budget, "the tag list")
                budget -= len(response.body)
                try:
                    page = json.loads(response.body).get("tags") or []
                except (ValueError, AttributeError):
                    raise ChartFetchError("invalid", f"the tag list of {ref.url} is not JSON") from None
                tags.extend(t for t in page if isinstance(t, str))
                link = re.match(r"\s*<([^>]+)>\s*;\s*rel=\"?next\"?", response.headers.get("link", ""))
                path = urlsplit(urljoin(base, link.group(1)))._replace(scheme="", netloc="").geturl() if link else None
            return tags
        return self._once(f"tags {ref.url}", read)

    def _oci_get(self, ref: OciReference, base: str, path: str, origin: _Origin, cred: Credential | None,
                 cap: int, what: str, accept: str | None = None) -> _Response:
        """A registry GET: anonymous first, then the challenge's Bearer token or Basic credentials."""
        scope_key = f"{origin.authority}/{ref.repository}"
        with self._lock:
            known = self._auth.get(scope_key)
        attempt = replace_origin(origin, known) if known else origin
        response = self._get(base + path, cap, attempt, what, accept=accept, allow_401=True)
        if response.status != 401:
            return response
        challenge = cs.parse_challenge(response.headers.get("www-authenticate", ""))
        if challenge.scheme == "bearer" and challenge.params.get("realm"):
            header = f"Bearer {self._bearer(challenge, cred, ref)}"
        elif challenge.scheme == "basic" and cred is not None and cred.username:
            header = _basic(cred)
        elif cred is not None and cred.token and not cred.username:
            header = f"Bearer {cred.token}"
        else:
            raise ChartFetchError("needs-credentials", f"{ref.url} needs credentials and the source has none")
        with self._lock:
            self._auth[scope_key] = header
        response = self._get(base + path, cap, replace_origin(origin, header), what, accept=accept, allow_401=True)
        if response.status == 401:
            raise ChartFetchError("needs-credentials", f"{ref.url} refused the credentials given")
        return response

    def _bearer(self, challenge: cs.Challenge, cred: Credential | None, ref: OciReference) -> str:
        """A registry token from the challenge's realm (distribution token spec), with Basic credentials if any."""
        realm = challenge.params["realm"]
        query = {k: challenge.params[k] for k in ("service", "scope") if challenge.params.get(k)}
        query.setdefault("scope", f"repository:{ref.repository}:pull")
        url = realm + ("&" if "?" in realm else "?") + urlencode(query)
        realm_ep = cs.endpoint(url)
        header = _basic(cred) if cred is not None and cred.username else None
        response = self._get(url, _SMALL, _Origin(realm_ep.authority, header), "the registry token", allow_401=True)
        if response.status == 401:
            if cred is None:
                raise ChartFetchError("needs-credentials", f"{ref.url} needs credentials and the source has none")
            raise ChartFetchError("needs-credentials", f"{ref.url} refused the credentials given")
        try:
            body = json.loads(response.body)
            token = body.get("token") or body.get("access_token")
        except (ValueError, AttributeError):
            token = None
        if not isinstance(token, str) or not token:
            raise ChartFetchError("invalid", f"the token service of {ref.url} gave no token")
        return token

    # -- the one HTTP client -----------------------------------------------------------------------------------

    def _origin(self, url: str, cred: Credential | None, *, basic_first: bool) -> _Origin:
        """Credentials bound to the endpoint they were given for (on its mirror when it has one)."""
        target = cs.mirror_url(url, self._policy.mirrors) or url
        header = None
        if cred is not None and basic_first:
            header = _basic(cred) if cred.username else (f"Bearer {cred.token}" if cred.token else None)
        return _Origin(cs.endpoint(target).authority, header)

    def _get(self, url: str, cap: int, origin: _Origin, what: str, *, accept: str | None = None,
             allow_401: bool = False) -> _Response:
        """GET `url` (on its mirror when configured) under the policy; follows at most 3 redirects, each checked."""
        mirrored = cs.mirror_url(url, self._policy.mirrors)
        if self._policy.offline and mirrored is None:
            raise ChartFetchError("unreachable", f"offline: {what} at {cs.redact(url)} is not cached and has no mirror")
        current = mirrored or url
        deadline = time.monotonic() + self._policy.limits.timeout
        for _hop in range(MAX_REDIRECTS + 1):
            response = self._once_get(current, cap, origin, what, accept, deadline)
            if response.status in _REDIRECTS:
                location = response.headers.get("location")
                if not location:
                    raise ChartFetchError("invalid", f"{cs.redact(current)} redirected without a Location")
                current = urljoin(current, location)
                continue
            if response.status == 401 and allow_401:
                return response
            if response.status in (401, 403):
                had = origin.header is not None
                raise ChartFetchError("needs-credentials", f"{what} at {cs.redact(current)} "
                                      + ("refused the credentials given" if had else "needs credentials and the source has none"))
            if response.status == 404:
                raise ChartFetchError("not-found", f"{what} at {cs.redact(current)} was not found (HTTP 404)")
            if response.status != 200:
                raise ChartFetchError("unreachable", f"{what} at {cs.redact(current)} answered HTTP {response.status}")
            return response
        raise ChartFetchError("invalid", f"{what} at {cs.redact(url)} redirected more than {MAX_REDIRECTS} times")

    def _admit(self, ep: Endpoint) -> str:
        """The address to connect to for `ep`, after the allow list and the address checks; else "not-allowed"."""
        try:
            literal = ipaddress.ip_address(ep.host)
        except ValueError:
            literal = None
        match = "exact" if ep.authority in self._mirror_targets else cs.allow_match(self._policy, ep, literal is not None)
        if match is None:
            raise ChartFetchError("not-allowed", f"{ep.authority} is not named by the base branch's sources nor listed in "
                                                 f"charts.allow_hosts (--allow-chart-host)")
        addresses = [literal] if literal is not None else self._addresses(ep)
        if match != "exact" and any(_internal(a) for a in addresses):
            raise ChartFetchError("not-allowed", f"{ep.host} resolves to an internal address (loopback, private, "
                                                 f"link-local or metadata); only an exact host:port entry allows that")
        if literal is None and any(a in _METADATA for a in addresses):
            # A name never reaches a metadata endpoint, listed or not: only its own literal address, listed, does.
            raise ChartFetchError("not-allowed", f"{ep.host} resolves to a cloud metadata address")
        return str(addresses[0])

    def _addresses(self, ep: Endpoint) -> list[ipaddress.IPv4Address | ipaddress.IPv6Address]:
        """The addresses of a name, looked up once per fetcher, so a rebinding DNS cannot change them mid-fetch."""
        key = ep.authority
        with self._lock:
            known = self._dns.get(key)
        if known is not None:
            return known
        try:
            found = [ipaddress.ip_address(a.split("%", 1)[0]) for a in self._resolve(ep.host, ep.port)]
        except (OSError, UnicodeError, ValueError):
            raise ChartFetchError("unreachable", f"{ep.host} could not be resolved") from None
        if not found:
            raise ChartFetchError("unreachable", f"{ep.host} could not be resolved")
        with self._lock:
            return self._dns.setdefault(key, found)

    def _once_get(self, url: str, cap: int, origin: _Origin, what: str, accept: str | None, deadline: float) -> _Response:
        """One GET to a checked address; the body read up to `cap` bytes (a larger one is "too-large")."""
        ep = cs.endpoint(url)
        if ep.scheme not in ("http", "https"):
            raise ChartFetchError("not-allowed", f"{cs.redact(url)} is not an http(s) URL")
        address = self._admit(ep)
        timeout = max(0.1, min(self._policy.limits.timeout, deadline - time.monotonic()))
        if ep.scheme == "https":
            with self._lock:
                self._tls = self._tls or ssl.create_default_context()
            conn: http.client.HTTPConnection = _PinnedHTTPSConnection(ep.host, ep.port, address, timeout, self._tls)
        else:
            conn = _PinnedHTTPConnection(ep.host, ep.port, address, timeout)
        parts = urlsplit(url)
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        headers = {"User-Agent": _USER_AGENT, "Accept-Encoding": "identity"}
        if accept:
            headers["Accept"] = accept
        if origin.header and ep.authority == origin.authority:
            headers["Authorization"] = origin.header  # never to another host (Helm's passCredentials off)
        try:
            conn.request("GET", path, headers=headers)
            raw = conn.getresponse()
            names = {k.lower(): v for k, v in raw.getheaders()}
            if raw.status != 200:
                return _Response(raw.status, names, b"", url)
            length = names.get("content-length", "")
            if length.strip().isdigit() and int(length) > cap:
                raise ChartFetchError("too-large", f"{what} at {cs.redact(url)} is {int(length)} bytes, over the "
                                                   f"{cap}-byte limit")
            return _Response(raw.status, names, _read_capped(raw, cap, deadline, what, url), url)
        except ChartFetchError:
            raise
        except (OSError, http.client.HTTPException) as exc:
            kind = "timed out" if isinstance(exc, (socket.timeout, TimeoutError)) else "failed"
            raise ChartFetchError("unreachable", f"{what} at {cs.redact(url)}: the connection {kind}") from None
        finally:
            conn.close()

    # -- helpers -----------------------------------------------------------------------------------------------

    def _once(self, key: str, compute: Callable[[], T]) -> T:
        """`compute()` once per fetcher and key, even when threads ask at the same time."""
        with self._lock:
            if key in self._memo:
                return self._memo[key]  # type: ignore[return-value]
            lock = self._key_locks.setdefault(key, threading.Lock())
        with lock:
            with self._lock:
                if key in self._memo:
                    return self._memo[key]  # type: ignore[return-value]
            value = compute()
            with self._lock:
                self._memo[key] = value
            return value

    def _scrubbed(self, url: str) -> _Scrub:
        """A guard masking every configured credential, and any in `url`, in the error it lets through."""
        secrets: set[str] = set()
        for cred in self._policy.credentials.values():
            secrets.update(cred.secrets())
        try:
            parts = urlsplit(url)
            secrets.update(s for s in (parts.username, parts.password) if s)
        except ValueError:
            pass
        return _Scrub(frozenset(s for s in secrets if len(s) >= 3))


def replace_origin(origin: _Origin, header: str) -> _Origin:
    """The same origin carrying another Authorization header."""
    return _Origin(origin.authority, header)


def _basic(cred: Credential) -> str:
    secret = cred.password if cred.password is not None else (cred.token or "")
    return "Basic " + base64.b64encode(f"{cred.username}:{secret}".encode()).decode()


def _read_capped(raw: http.client.HTTPResponse, cap: int, deadline: float, what: str, url: str) -> bytes:
    """The body, read in chunks; past `cap` bytes or past the deadline it stops reading and fails."""
    chunks: list[bytes] = []
    total = 0
    while True:
        chunk = raw.read(min(_CHUNK, cap + 1 - total))
        if not chunk:
            return b"".join(chunks)
        total += len(chunk)
        if total > cap:
            raise ChartFetchError("too-large", f"{what} at {cs.redact(url)} is larger than the {cap}-byte limit")
        if time.monotonic() > deadline:
            raise ChartFetchError("unreachable", f"{what} at {cs.redact(url)} took longer than the time limit")
        chunks.append(chunk)


class _Scrub:
    """Re-raise a `ChartFetchError` with any credential value in its message masked (a last line of defence)."""

    def __init__(self, secrets: frozenset[str]) -> None:
        self._secrets = secrets

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: object, exc: BaseException | None, _tb: object) -> None:
        if isinstance(exc, ChartFetchError):
            message = str(exc)
            cleaned = message
            for secret in self._secrets:
                cleaned = cleaned.replace(secret, "***")
            if cleaned != message:
                raise ChartFetchError(exc.reason, cleaned) from None

