"""Where a chart comes from: the fetch policy, Helm repository indexes and OCI references, as source-controller reads them."""

from __future__ import annotations

import hashlib
import json
import posixpath
import re
from dataclasses import dataclass, field
from typing import Any, Mapping
from urllib.parse import quote, urlsplit, urlunsplit

from bot.engine.render import yamlio
from bot.engine.core.errors import InputError, UserError
from bot.engine.render.semver import ConstraintError, parse_version, resolve_version

MIB = 1024 * 1024
REASONS = frozenset({"not-allowed", "unreachable", "needs-credentials", "too-large", "not-found", "invalid", "not-vendored"})
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
HELM_CHART_LAYER = "application/vnd.cncf.helm.chart.content.v1.tar+gzip"
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
# The OCI distribution spec's repository name and tag grammar.
_OCI_NAME = re.compile(r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*")
_OCI_TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,127}")
_DEFAULT_PORTS = {"http": 80, "https": 443, "oci": 443}


class ChartFetchError(UserError):
    """A chart that could not be fetched; `reason` says why in one word the caller can act on."""

    def __init__(self, reason: str, message: str) -> None:
        assert reason in REASONS, reason
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class FetchLimits:
    """How much one fetch may read, unpack and wait for."""

    index_bytes: int = 32 * MIB
    archive_bytes: int = 20 * MIB
    unpacked_bytes: int = 100 * MIB
    files: int = 5000
    timeout: float = 30.0


@dataclass(frozen=True)
class Credential:
    """A username and password, or a token, for one host or Secret; never shown in a repr."""

    username: str | None = field(default=None, repr=False)
    password: str | None = field(default=None, repr=False)
    token: str | None = field(default=None, repr=False)

    def __repr__(self) -> str:
        kinds = [k for k in ("username", "password", "token") if getattr(self, k)]
        return f"Credential(<{', '.join(kinds) or 'empty'} hidden>)"

    def secrets(self) -> tuple[str, ...]:
        """The values that must never appear in a message (for scrubbing)."""
        return tuple(v for v in (self.username, self.password, self.token) if v)


def _frozen(mapping: Mapping[str, Any]) -> Mapping[str, Any]:
    """A private copy, so that a caller changing its mapping later changes nothing here."""
    return dict(mapping)


@dataclass(frozen=True)
class FetchPolicy:
    """Where charts may be fetched from, through which mirrors, with which credentials.

    `allow_hosts` entries are `host` (that host on any port, public addresses only) or `host:port` (that exact
    endpoint, which may be internal: loopback, private, link-local). A bare IP literal such as `127.0.0.1`
    allows that address on any port. A mirror's target counts as an exact entry: the operator configured it.
    `source_hosts` are the hosts the base branch's sources name (bot/pipeline/releases.py fixes them once per
    run): any port, public addresses only, whatever the entry looks like; only `allow_hosts` opens an internal one.
    """

    allow_hosts: frozenset[str] = frozenset()
    source_hosts: frozenset[str] = frozenset()
    mirrors: Mapping[str, str] = field(default_factory=dict)
    credentials: Mapping[str, Credential] = field(default_factory=dict, repr=False)
    offline: bool = False
    limits: FetchLimits = FetchLimits()

    def __post_init__(self) -> None:
        object.__setattr__(self, "allow_hosts", frozenset(h.lower() for h in self.allow_hosts))
        object.__setattr__(self, "source_hosts", frozenset(h.lower().strip("[]") for h in self.source_hosts))
        object.__setattr__(self, "mirrors", _frozen({k.lower(): v.rstrip("/") for k, v in self.mirrors.items()}))
        object.__setattr__(self, "credentials", _frozen(self.credentials))

    def credential(self, secret_ref: str | None, host: str, port: int) -> Credential | None:
        """The credential for a source: its Secret's when it names one, else its host's."""
        if secret_ref:
            found = self.credentials.get(f"secret:{secret_ref}")
            if found is not None:
                return found
        return self.credentials.get(f"{host}:{port}") or self.credentials.get(host)


@dataclass(frozen=True)
class FetchedChart:
    """A chart archive and where it came from (the URL carries no credentials)."""

    archive: bytes = field(repr=False)
    name: str
    version: str
    digest: str
    url: str


@dataclass(frozen=True)
class Endpoint:
    """The scheme, host and effective port of a URL."""

    scheme: str
    host: str
    port: int

    @property
    def authority(self) -> str:
        """`host:port`, with an IPv6 host in brackets."""
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def endpoint(url: str) -> Endpoint:
    """The endpoint of an http(s) or oci URL; anything else is "invalid"."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise ChartFetchError("invalid", f"{redact(url)!r} is not a valid URL") from None
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS or not parts.hostname:
        raise ChartFetchError("invalid", f"{redact(url)!r} is not an http, https or oci URL")
    return Endpoint(scheme, parts.hostname.lower(), port or _DEFAULT_PORTS[scheme])


def allow_match(policy: FetchPolicy, ep: Endpoint, is_ip_literal: bool) -> str | None:
    """How the policy admits an endpoint: "exact" (internal addresses allowed), "host" (public only), or None."""
    hosts = policy.allow_hosts
    if ep.authority in hosts or f"{ep.host}:{ep.port}" in hosts:
        return "exact"
    if ep.host in hosts or f"[{ep.host}]" in hosts:
        return "exact" if is_ip_literal else "host"
    if ep.host in policy.source_hosts:
        return "host"  # named by the base branch: never unlocks loopback, private or metadata addresses
    return None


def source_host(url: object) -> str | None:
    """The host a source's `spec.url` names (lower case, IPv6 without brackets), or None when it is no http(s)/oci URL."""
    if not isinstance(url, str):
        return None
    try:
        return endpoint(url.strip()).host
    except ChartFetchError:
        return None


def redact(url: str) -> str:
    """`url` without user information (credentials), query or fragment."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        host = f"[{host}]" if ":" in host else host
        netloc = f"{host}:{parts.port}" if parts.port else host
    except ValueError:
        return "<an unparsable URL>"
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def mirror_url(url: str, mirrors: Mapping[str, str]) -> str | None:
    """`url` on its host's configured mirror (keyed by `host:port` or `host`), or None when it has none."""
    ep = endpoint(url)
    base = mirrors.get(ep.authority) or mirrors.get(ep.host)
    if base is None:
        return None
    parts = urlsplit(url)
    target = urlsplit(base)
    path = target.path.rstrip("/") + parts.path
    return urlunsplit((target.scheme, target.netloc, path, parts.query, ""))


def index_url(repo_url: str) -> str:
    """`<repo>/index.yaml` (source-controller chart_repository.go DownloadIndex joins the path)."""
    parts = urlsplit(repo_url)
    return urlunsplit((parts.scheme, parts.netloc, posixpath.join(parts.path or "/", "index.yaml"), parts.query, ""))


def resolve_reference_url(repo_url: str, ref: str) -> str:
    """A chart URL from the index: absolute as it is, else relative to the repository URL with a trailing slash.

    helm/helm pkg/repo ResolveReferenceURL, which source-controller's DownloadChart calls; the repository's
    query string is kept on the result.
    """
    ref_parts = urlsplit(ref)
    if ref_parts.scheme:
        return ref
    base = urlsplit(repo_url)
    base_path = base.path.rstrip("/") + "/"
    if ref_parts.path.startswith("/") or ref_parts.netloc:
        path = ref_parts.path
    else:
        path = posixpath.normpath(posixpath.join(base_path, ref_parts.path))
        path = path if path.startswith("/") else "/" + path
    netloc = ref_parts.netloc or base.netloc
    return urlunsplit((base.scheme, netloc, path, base.query, ""))


@dataclass(frozen=True)
class IndexEntry:
    """One chart version of a Helm repository index."""

    name: str
    version: str
    urls: tuple[str, ...]
    digest: str | None
    created: str


def parse_index(data: bytes, source: str, max_bytes: int) -> dict[str, tuple[IndexEntry, ...]]:
    """A Helm repository index (`apiVersion` required, entries per chart), read with the bounded YAML loader."""
    if len(data) > max_bytes:
        raise ChartFetchError("too-large", f"the index of {source} is larger than {max_bytes} bytes")
    try:
        document = yamlio.load_one(data.decode("utf-8"), f"{source}/index.yaml", max_bytes=max_bytes)
    except (UnicodeDecodeError, InputError) as exc:
        raise ChartFetchError("invalid", f"the index of {source} is not valid YAML: {str(exc)[:200]}") from None
    if not isinstance(document, dict) or not document.get("apiVersion"):
        raise ChartFetchError("invalid", f"the index of {source} has no apiVersion (helm repo.ErrNoAPIVersion)")
    entries = document.get("entries") or {}
    if not isinstance(entries, dict):
        raise ChartFetchError("invalid", f"the index of {source} has no entries mapping")
    result: dict[str, tuple[IndexEntry, ...]] = {}
    for name, versions in entries.items():
        if not isinstance(name, str) or not isinstance(versions, list):
            continue
        parsed = []
        for item in versions:
            if not isinstance(item, dict) or not isinstance(item.get("version"), str):
                continue
            urls = item.get("urls") or []
            digest = item.get("digest")
            parsed.append(IndexEntry(
                name=name,
                version=item["version"],
                urls=tuple(u for u in urls if isinstance(u, str)) if isinstance(urls, list) else (),
                digest=digest.lower().removeprefix("sha256:") if isinstance(digest, str) and digest else None,
                created=str(item.get("created") or ""),
            ))
        result[name] = tuple(parsed)
    return result


def select_entry(entries: Mapping[str, tuple[IndexEntry, ...]], chart: str, constraint: str, source: str) -> IndexEntry:
    """The entry source-controller picks: the exact version string, else the highest match (latest created on a tie)."""
    versions = entries.get(chart)
    if not versions:
        raise ChartFetchError("not-found", f"chart {chart!r} is not in the index of {source}")
    # chart_repository.go getChartVersion orders equal versions (differing in build metadata) by `created`.
    ordered = sorted(versions, key=lambda e: e.created, reverse=True)
    chosen = _resolve(constraint, [e.version for e in ordered], f"chart {chart!r} in {source}")
    return next(e for e in ordered if e.version == chosen)


def _resolve(constraint: str, versions: list[str], what: str) -> str:
    try:
        chosen = resolve_version(constraint, versions)
    except ConstraintError as exc:
        raise ChartFetchError("invalid", f"{what}: {exc}") from None
    if chosen is None:
        raise ChartFetchError("not-found", f"{what}: no version matches {constraint or '*'!r}")
    return chosen


@dataclass(frozen=True)
class OciReference:
    """`oci://host[:port]/path/chart`: the registry endpoint and the repository name on it."""

    url: str
    registry: Endpoint
    repository: str

    @property
    def chart(self) -> str:
        """The chart's name: the repository's last path segment."""
        return self.repository.rsplit("/", 1)[-1]


def parse_oci_url(url: str) -> OciReference:
    """An `oci://` chart URL, checked against the distribution spec's name grammar."""
    parts = urlsplit(url)
    if parts.scheme.lower() != "oci":
        raise ChartFetchError("invalid", f"{redact(url)!r} is not an oci:// URL")
    ep = endpoint(url)
    repository = parts.path.strip("/")
    if not _OCI_NAME.fullmatch(repository) or len(repository) > 255:
        raise ChartFetchError("invalid", f"{redact(url)!r} does not name a valid OCI repository")
    return OciReference(redact(url), ep, repository)


def tag_for(version: str) -> str:
    """The OCI tag of a chart version: Helm writes `+` (build metadata, not allowed in tags) as `_`."""
    tag = version.replace("+", "_")
    if not _OCI_TAG.fullmatch(tag):
        raise ChartFetchError("invalid", f"{version!r} is not a valid OCI tag")
    return tag


def select_tag(tags: list[str], constraint: str, source: str) -> str:
    """The tag of the version a semver constraint selects among a repository's tags (`_` read as `+`)."""
    versions = {t.replace("_", "+"): t for t in tags if isinstance(t, str)}
    return versions[_resolve(constraint, list(versions), f"chart {source}")]


def is_pinned_version(text: str | None) -> bool:
    """Whether `text` names one version rather than a range (source-controller's OCI shortcut: a parsable version)."""
    return bool(text) and parse_version(text or "") is not None


def check_digest(text: str) -> str:
    """A `sha256:<hex>` digest, or "invalid"."""
    if not _DIGEST.fullmatch(text or ""):
        raise ChartFetchError("invalid", f"{text!r} is not a sha256 digest")
    return text


@dataclass(frozen=True)
class Descriptor:
    """A content descriptor from an OCI manifest."""

    media_type: str
    digest: str
    size: int


def chart_layer(manifest: bytes, media_type: str, source: str) -> Descriptor:
    """The layer of an OCI image manifest whose mediaType is the chart's (or the OCIRepository layerSelector's)."""
    try:
        document = json.loads(manifest)
        layers = document["layers"]
        assert isinstance(layers, list)
    except (ValueError, KeyError, TypeError, AssertionError):
        raise ChartFetchError("invalid", f"the manifest of {source} is not an OCI image manifest") from None
    for layer in layers:
        if isinstance(layer, dict) and layer.get("mediaType") == media_type:
            size = layer.get("size")
            digest = layer.get("digest")
            if not isinstance(size, int) or not isinstance(digest, str):
                break
            return Descriptor(media_type, check_digest(digest), size)
    raise ChartFetchError("invalid", f"the manifest of {source} has no layer of type {media_type}")


@dataclass(frozen=True)
class Challenge:
    """A parsed `WWW-Authenticate` header: its scheme and parameters."""

    scheme: str
    params: Mapping[str, str]


_PARAM = re.compile(r'\s*([A-Za-z][A-Za-z0-9_-]*)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s,]*))\s*,?')


def parse_challenge(header: str) -> Challenge:
    """`Bearer realm="…",service="…",scope="…"` or `Basic realm="…"` (RFC 7235, one challenge)."""
    scheme, _, rest = (header or "").strip().partition(" ")
    params: dict[str, str] = {}
    for match in _PARAM.finditer(rest[:4096]):
        value = match.group(2) if match.group(2) is not None else match.group(3)
        params[match.group(1).lower()] = re.sub(r"\\(.)", r"\1", value or "")
    return Challenge(scheme.lower(), params)


def cache_key(source: str, chart: str, ref: str) -> str:
    """The cache index key of (source URL, chart, resolved version or digest)."""
    return hashlib.sha256(json.dumps([source, chart, ref]).encode()).hexdigest()


def member_problem(name: str) -> str | None:
    """Why a tar member's path is unsafe (absolute, a `..` step, a drive), or None."""
    if name.startswith(("/", "\\")) or re.match(r"[A-Za-z]:", name):
        return f"the archive holds an absolute path {name[:100]!r}"
    if ".." in re.split(r"[\\/]", name):
        return f"the archive holds a path that leaves the chart {name[:100]!r}"
    return None


def oci_path(reference: OciReference, kind: str, ref: str) -> str:
    """`/v2/<name>/<kind>/<ref>` (kind: manifests, blobs, tags)."""
    return f"/v2/{reference.repository}/{kind}/{quote(ref, safe=':')}"
