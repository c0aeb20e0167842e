"""Typed, frozen data passed between the engine's stages."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Mapping


class Severity(str, enum.Enum):
    """How bad a finding is; `error` fails the check."""

    ERROR = "error"
    WARNING = "warning"
    INFO = "info"

    @property
    def rank(self) -> int:
        return {"error": 0, "warning": 1, "info": 2}[self.value]


@dataclass(frozen=True, order=True)
class GroupKind:
    """An API group and kind; the group is "" for the core API."""

    group: str
    kind: str

    @classmethod
    def of(cls, api_version: str, kind: str) -> "GroupKind":
        return cls(api_version.rpartition("/")[0], kind)  # "v1" → core group ""

    def __str__(self) -> str:
        return f"{self.kind}.{self.group}" if self.group else self.kind


@dataclass(frozen=True, order=True)
class ObjectRef:
    """Identify an object the way Flux's inventory does (group/kind/namespace/name), keeping apiVersion."""

    api_version: str
    kind: str
    namespace: str
    name: str

    @property
    def group(self) -> str:
        return self.api_version.rpartition("/")[0]

    @property
    def group_kind(self) -> GroupKind:
        return GroupKind(self.group, self.kind)

    @property
    def identity(self) -> tuple[str, str, str, str]:
        """Flux inventory key: `<namespace>_<name>_<group>_<kind>` as a tuple (version excluded)."""
        return (self.namespace, self.name, self.api_version.rpartition("/")[0], self.kind)

    def __str__(self) -> str:
        return f"{self.kind}/{self.namespace}/{self.name}" if self.namespace else f"{self.kind}/{self.name}"

    def to_json(self) -> dict[str, str]:
        return {"apiVersion": self.api_version, "kind": self.kind, "namespace": self.namespace, "name": self.name}


@dataclass(frozen=True)
class SourceLocation:
    """Where in the repository an object or setting is written (repo-relative path, 1-based line)."""

    file: str
    line: int | None = None

    def __str__(self) -> str:
        return f"{self.file}:{self.line}" if self.line else self.file


@dataclass(frozen=True)
class Manifest:
    """One rendered Kubernetes object, after kustomize and postBuild substitution."""

    ref: ObjectRef
    body: Mapping[str, Any]
    origin: SourceLocation | None = None

    @property
    def annotations(self) -> Mapping[str, str]:
        return (self.body.get("metadata") or {}).get("annotations") or {}

    @property
    def labels(self) -> Mapping[str, str]:
        return (self.body.get("metadata") or {}).get("labels") or {}


@dataclass(frozen=True, order=True)
class TierId:
    """A Flux Kustomization's `namespace/name`: one node of the tier graph."""

    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"

    @classmethod
    def parse(cls, text: str, default_namespace: str = "flux-system") -> "TierId":
        namespace, _, name = text.rpartition("/")
        return cls(namespace or default_namespace, name)


@dataclass(frozen=True)
class SourceRef:
    """A Kustomization's `spec.sourceRef`, namespace defaulted to the Kustomization's."""

    kind: str
    name: str
    namespace: str

    def __str__(self) -> str:
        return f"{self.kind}/{self.namespace}/{self.name}"


@dataclass(frozen=True)
class SubstituteFrom:
    """One `postBuild.substituteFrom` entry."""

    kind: str  # ConfigMap | Secret
    name: str
    optional: bool = False
    namespace: str | None = None  # None: the Kustomization's own (a cluster-injected source names its own)


@dataclass(frozen=True)
class HealthCheck:
    """One `healthChecks` entry (or a `healthCheckExprs` kind, with name "*")."""

    api_version: str
    kind: str
    name: str
    namespace: str

    @property
    def group_kind(self) -> GroupKind:
        return GroupKind.of(self.api_version, self.kind)


@dataclass(frozen=True)
class TierSpec:
    """The parts of a Flux Kustomization that decide what it applies and when."""

    id: TierId
    path: str  # repo-relative, normalised, "" for the root
    source: SourceRef
    depends_on: tuple[TierId, ...] = ()
    wait: bool = False
    prune: bool = False
    suspend: bool = False
    target_namespace: str | None = None
    name_prefix: str | None = None
    name_suffix: str | None = None
    common_metadata: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    patches: tuple[Mapping[str, Any], ...] = ()
    images: tuple[Mapping[str, Any], ...] = ()
    components: tuple[str, ...] = ()
    ignore_missing_components: bool = False
    health_checks: tuple[HealthCheck, ...] = ()
    has_post_build: bool = False
    substitute_always: bool = False  # postBuild.substituteStrategy: Always
    substitute: Mapping[str, str] = field(default_factory=dict)
    substitute_from: tuple[SubstituteFrom, ...] = ()
    decryption: bool = False
    defined_in: TierId | None = None  # the tier (or None for the cluster entry) that applies this Kustomization
    origin: SourceLocation | None = None
    # `spec.kubeConfig`: the cluster it applies to is another one, named by its kubeConfig (`Secret/ns/name`)
    kube_config: str | None = None
    # `spec.path` as written, inside a source that is not the repository's own tree (an ExternalArtifact
    # assembled from this repository); `path` is then the repository directory it maps onto
    source_path: str | None = None
    interval: int = 600  # seconds: `spec.interval` (required by the API; 10m when unreadable)
    retry_interval: int | None = None  # seconds: `spec.retryInterval`; None means `interval`

    @property
    def retry_seconds(self) -> int:
        """How long a failed reconcile waits before the next (kustomize-controller api/v1 GetRetryInterval)."""
        return self.retry_interval if self.retry_interval is not None else self.interval


class Cause(enum.Enum):
    """Why a finding was made, where code (not only its reader) must know: never read back from the message."""

    STOPPED = "stopped"  # a build stopped by a limit (timeout, signal, output cap, shutdown): nothing said about its input


@dataclass(frozen=True)
class Finding:
    """One result of a check, as posted and as printed; `check` is an id of bot/engine/core/findings.py CATALOGUE."""

    check: str
    severity: Severity
    message: str
    kustomization: TierId | None = None
    object: ObjectRef | None = None
    location: SourceLocation | None = None
    cause: Cause | None = None

    def sort_key(self) -> tuple:
        return (
            self.severity.rank,
            self.check,
            str(self.kustomization or ""),
            str(self.object or ""),
            self.message,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "check": self.check,
            "severity": self.severity.value,
            "kustomization": str(self.kustomization) if self.kustomization else None,
            "object": self.object.to_json() if self.object else None,
            "file": self.location.file if self.location else None,
            "line": self.location.line if self.location else None,
            "message": self.message,
        }


def plural(count: int, word: str) -> str:
    """`1 object`, `2 objects`."""
    return f"{count} {word}" if count == 1 else f"{count} {word}s"
