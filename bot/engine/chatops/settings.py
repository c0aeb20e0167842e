"""The service's settings as frozen models, and their parsing from the YAML's mappings (pure: no env or file reading here).

bot/service/settings.py reads the file, the environment and the secrets, and builds the GitHub credentials.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Mapping

from bot.engine.chatops.commands import PERMISSION_ORDER
from bot.engine.livestate.drift import DriftOptions
from bot.engine.core.errors import ConfigError


@dataclass(frozen=True)
class DriftPolicy:
    """Scheduled drift reports of one cluster (handlers/drift.py): when, and how patient.

    `enabled` None means "on when the cluster is read live" (kubeconfig or in_cluster); False turns it off.
    `schedule` is a 5-field cron expression in UTC; otherwise every `interval_seconds` (default hourly).
    """

    enabled: bool | None = None
    schedule: str | None = None
    interval_seconds: int | None = None
    jitter: int = 300
    stuck_after_seconds: int = 1800  # DependencyNotReady (or Progressing) this long is reported as stuck

    def options(self) -> DriftOptions:
        """The drift evaluation's options this policy asks for."""
        return DriftOptions(stuck_after=timedelta(seconds=self.stuck_after_seconds))


def parse_drift_policy(raw: Any, where: str) -> DriftPolicy:
    """`drift:` of one cluster (its schedule's syntax is the scheduler's to check: bot/service/settings.py)."""
    if raw is None:
        return DriftPolicy()
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: `drift` must be a mapping (schedule, interval_seconds, jitter, enabled, stuck_after_seconds)")
    unknown = set(raw) - {"enabled", "schedule", "interval_seconds", "jitter", "stuck_after_seconds"}
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) in `drift`: {', '.join(sorted(unknown))}")

    def number(key: str, default: int | None) -> int | None:
        value = raw.get(key, default)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{where}: `drift.{key}` must be a whole number of seconds")
        return value

    enabled = raw.get("enabled")
    if enabled is not None and not isinstance(enabled, bool):
        raise ConfigError(f"{where}: `drift.enabled` must be true or false")
    schedule = raw.get("schedule")
    if schedule is not None and (not isinstance(schedule, str) or not schedule.strip()):
        raise ConfigError(f"{where}: `drift.schedule` must be a cron expression (5 fields, UTC)")
    return DriftPolicy(
        enabled=enabled,
        schedule=schedule.strip() if isinstance(schedule, str) else None,
        interval_seconds=number("interval_seconds", None),
        jitter=number("jitter", DriftPolicy.jitter) or 0,
        stuck_after_seconds=number("stuck_after_seconds", DriftPolicy.stuck_after_seconds) or 0,
    )


@dataclass(frozen=True)
class ClusterPolicy:
    """Per-cluster settings: run automatically on PR events, and who may `/precheck` it."""

    name: str
    automatic: bool = True
    permission: str = "write"
    # How to read the cluster for live preconditions (read-only); none set: no live checks.
    kubeconfig: str | None = None  # a kubeconfig file (e.g. a mounted Secret)
    context: str | None = None  # its context (default: current-context)
    in_cluster: bool = False  # the pod's own service account (deploy/rbac.yaml)
    drift: DriftPolicy = field(default_factory=DriftPolicy)  # scheduled drift reports (live clusters only)

    @property
    def live(self) -> bool:
        """Whether this cluster's live state is read on each run."""
        return bool(self.kubeconfig or self.in_cluster)

    @property
    def drift_enabled(self) -> bool:
        """Whether a scheduled drift report runs for this cluster."""
        return self.live and self.drift.enabled is not False


@dataclass(frozen=True)
class RepoPolicy:
    """One repository the bot serves."""

    name: str  # owner/repo
    clusters: tuple[ClusterPolicy, ...] = ()
    clone_url: str | None = None  # overrides the payload's repository.clone_url
    allow_forks: bool = False
    # No `clusters`: the base branch's clusters (as `check` finds them) with this permission, no live checks.
    permission: str = "write"

    def cluster(self, name: str) -> ClusterPolicy | None:
        return next((c for c in self.clusters if c.name == name), None)

    @property
    def cluster_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.clusters)


@dataclass(frozen=True)
class Backoff:
    """How a GitHub call that a PR or a user waits on is tried again, past the adapter's own retries: `first`
    seconds, doubling up to `most`. The final writes of a run (service/runs.py) keep trying until GitHub takes
    them; the reads that gate a command (handlers/retry.py) stop at their deadline."""

    first: float = 5.0
    most: float = 120.0

    def delay(self, attempt: int) -> float:
        """The wait after failed attempt `attempt` (0-based)."""
        return min(max(self.first, 0.0) * 2 ** min(attempt, 32), self.most)


# The bot's own resident peak next to its renders: ~1 GiB on a 3,000-Kustomization PR (issue 23). A pod's memory
# limit must hold it, `Limits.render_memory` and a tenth for headroom.
SERVICE_MEMORY = 1024**3
_UNITS = {"": 1, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "K": 10**3, "M": 10**6, "G": 10**9}


def parse_bytes(raw: Any, where: str) -> int:
    """A size as Kubernetes writes one (`1536Mi`, `2Gi`) or a number of bytes; ConfigError otherwise."""
    text = str(raw).strip()
    digits = text.rstrip("KMGi")
    unit = text[len(digits):]
    if not digits.isdigit() or unit not in _UNITS or int(digits) <= 0:
        raise ConfigError(f"{where} must be a size such as 1536Mi or 2Gi (got {text[:40]!r})")
    return int(digits) * _UNITS[unit]


@dataclass(frozen=True)
class Limits:
    """Bounds on concurrent work."""

    workers: int = 2
    queue: int = 100
    run_timeout: float = 900.0
    kustomize_timeout: float = 120.0
    max_body_bytes: int = 25 * 1024 * 1024  # GitHub caps webhook payloads at 25 MB
    # A final state GitHub refused (past the adapter's retries) is written again after this many seconds,
    # doubling up to 120, until GitHub takes it: a finished run never leaves its status pending.
    final_retry_seconds: float = 5.0
    # The reads a command waits on (the commenter's permission, the PR) are tried again with the same backoff
    # on a GitHub fault (5xx, timeout) for this long before the reply says "please try again".
    read_retry_seconds: float = 120.0
    # What all renders together (kustomize builds and Helm workers) may hold resident, measured (bot/adapters/memory.py).
    # The shipped pod's 3 GiB (deploy/deployment.yaml) keep the rest for the bot's own heap (SERVICE_MEMORY) and headroom.
    render_memory: int = 1536 * 1024**2

    @property
    def backoff(self) -> Backoff:
        """The one backoff of the final writes and the gating reads."""
        return Backoff(first=self.final_retry_seconds)


@dataclass(frozen=True)
class GitIdentity:
    """Who the bot's commits (e.g. the tier order follow-up PRs) are by: author and committer."""

    name: str = "fluxwarden[bot]"
    email: str = "fluxwarden[bot]@users.noreply.github.com"


def parse_git_identity(raw: Any, env: Mapping[str, str]) -> GitIdentity:
    """`git:` (author and committer of the bot's commits), FLUXWARDEN_GIT_NAME/EMAIL overriding it."""
    raw = raw or {}
    if not isinstance(raw, dict):
        raise ConfigError("`git` must be a mapping with `name` and `email`")
    name = env.get("FLUXWARDEN_GIT_NAME") or raw.get("name") or GitIdentity.name
    email = env.get("FLUXWARDEN_GIT_EMAIL") or raw.get("email") or GitIdentity.email
    for key, value in (("name", name), ("email", email)):
        if not isinstance(value, str) or not value.strip() or any(c in value for c in "<>\n\r\0"):
            raise ConfigError(f"git.{key} must be a non-empty string without <, > or line breaks")
    return GitIdentity(name=name.strip(), email=email.strip())


@dataclass(frozen=True)
class LeaderElection:
    """High availability (docs/high-availability.md): a Lease elects the replica that runs scheduled jobs,
    and runs for one PR are claimed on GitHub so that replicas do not duplicate them."""

    enabled: bool = False
    namespace: str | None = None  # None: $POD_NAMESPACE, else (in-cluster) the service account's namespace
    name: str = "fluxwarden-leader"
    lease_seconds: int = 15  # leaseDurationSeconds: a dead leader is replaced this long after its last renewal
    renew_seconds: float = 10.0  # renewDeadline: the leader steps down when it could not renew for this long
    retry_seconds: float = 2.0  # retryPeriod: renew (leader) / try to acquire (others, jittered) this often
    sweep_seconds: float = 120.0  # the leader re-runs prechecks a dead replica left pending this often; 0: never
    kubeconfig: str | None = None  # how to reach the API server holding the Lease; neither: in-cluster
    context: str | None = None
    in_cluster: bool = False
    identity: str | None = None  # this replica's id (not a YAML key: tests); default $POD_NAME or hostname + random suffix


_LEADER_KEYS = {"enabled", "namespace", "name", "lease_seconds", "renew_seconds", "retry_seconds", "sweep_seconds", "kubeconfig", "context", "in_cluster"}
_TRUE, _FALSE = {"1", "true", "yes", "on"}, {"0", "false", "no", "off", ""}


def parse_leader_election(raw: Any, env: Mapping[str, str]) -> LeaderElection:
    """`leader_election:` from the YAML, each key overridable by FLUXWARDEN_LEADER_ELECTION[_<KEY>]."""
    raw = raw if raw is not None else {}
    if not isinstance(raw, dict):
        raise ConfigError("`leader_election` must be a mapping")
    unknown = set(raw) - _LEADER_KEYS
    if unknown:
        raise ConfigError(f"unknown key(s) in leader_election: {', '.join(sorted(unknown))}")

    def value(key: str, env_name: str) -> Any:
        return env[env_name] if env.get(env_name) else raw.get(key)  # an empty variable does not override

    def flag(key: str, env_name: str) -> bool:
        v = value(key, env_name)
        if isinstance(v, str):
            if v.strip().lower() not in _TRUE | _FALSE:
                raise ConfigError(f"leader_election.{key} must be true or false, not {v!r}")
            return v.strip().lower() in _TRUE
        return bool(v)

    def number(key: str, env_name: str, default: float, kind: type = float) -> Any:
        v = value(key, env_name)
        if v is None or v == "":
            return default
        try:
            n = kind(v)
        except (TypeError, ValueError):
            raise ConfigError(f"leader_election.{key} must be a number, not {v!r}") from None
        if n < 0:
            raise ConfigError(f"leader_election.{key} must not be negative")
        return n

    def text(key: str, env_name: str, default: str | None) -> str | None:
        v = value(key, env_name)
        if v is None or v == "":
            return default
        if not isinstance(v, str) or not v.strip():
            raise ConfigError(f"leader_election.{key} must be a non-empty string")
        return v.strip()

    prefix = "FLUXWARDEN_LEADER_ELECTION"
    config = LeaderElection(
        enabled=flag("enabled", prefix),
        namespace=text("namespace", f"{prefix}_NAMESPACE", None),
        name=text("name", f"{prefix}_NAME", LeaderElection.name) or LeaderElection.name,
        lease_seconds=number("lease_seconds", f"{prefix}_LEASE_SECONDS", LeaderElection.lease_seconds, int),
        renew_seconds=number("renew_seconds", f"{prefix}_RENEW_SECONDS", LeaderElection.renew_seconds),
        retry_seconds=number("retry_seconds", f"{prefix}_RETRY_SECONDS", LeaderElection.retry_seconds),
        sweep_seconds=number("sweep_seconds", f"{prefix}_SWEEP_SECONDS", LeaderElection.sweep_seconds),
        kubeconfig=text("kubeconfig", f"{prefix}_KUBECONFIG", None),
        context=text("context", f"{prefix}_CONTEXT", None),
        in_cluster=flag("in_cluster", f"{prefix}_IN_CLUSTER"),
    )
    # client-go's rules: leaseDuration > renewDeadline > JitterFactor (1.2) × retryPeriod > 0.
    if not config.lease_seconds > config.renew_seconds:
        raise ConfigError("leader_election.lease_seconds must be greater than renew_seconds")
    if not config.renew_seconds > 1.2 * config.retry_seconds > 0:
        raise ConfigError("leader_election.renew_seconds must be greater than 1.2 × retry_seconds, and retry_seconds > 0")
    if config.context and not config.kubeconfig:
        raise ConfigError("leader_election: `context` needs `kubeconfig`")
    if config.in_cluster and config.kubeconfig:
        raise ConfigError("leader_election: set either `kubeconfig` or `in_cluster`, not both")
    return config


def parse_repo(raw: Any) -> RepoPolicy:
    """One entry of `repos:`."""
    if not isinstance(raw, dict) or not isinstance(raw.get("name"), str) or "/" not in raw["name"]:
        raise ConfigError("each entry of `repos` needs `name: owner/repo`")
    default_permission = raw.get("permission", "write")
    if default_permission not in PERMISSION_ORDER:
        raise ConfigError(f"repo {raw['name']}: permission must be one of {', '.join(PERMISSION_ORDER)}")
    clusters = []
    for name, spec in (raw.get("clusters") or {}).items():
        spec = spec or {}
        permission = spec.get("permission", default_permission)
        if permission not in PERMISSION_ORDER:
            raise ConfigError(f"repo {raw['name']} cluster {name}: permission must be one of {', '.join(PERMISSION_ORDER)}")
        kubeconfig, context = spec.get("kubeconfig"), spec.get("context")
        for key, value in (("kubeconfig", kubeconfig), ("context", context)):
            if value is not None and (not isinstance(value, str) or not value.strip()):
                raise ConfigError(f"repo {raw['name']} cluster {name}: `{key}` must be a non-empty string")
        if context and not kubeconfig:
            raise ConfigError(f"repo {raw['name']} cluster {name}: `context` needs `kubeconfig`")
        in_cluster = bool(spec.get("in_cluster", False))
        if in_cluster and kubeconfig:
            raise ConfigError(f"repo {raw['name']} cluster {name}: set either `kubeconfig` or `in_cluster`, not both")
        drift = parse_drift_policy(spec.get("drift"), f"repo {raw['name']} cluster {name}")
        if drift.enabled and not (kubeconfig or in_cluster):
            raise ConfigError(f"repo {raw['name']} cluster {name}: `drift.enabled` needs live access (`kubeconfig` or `in_cluster`)")
        clusters.append(ClusterPolicy(str(name), bool(spec.get("automatic", True)), permission, kubeconfig, context, in_cluster, drift))
    return RepoPolicy(
        name=raw["name"],
        clusters=tuple(clusters),
        clone_url=raw.get("clone_url"),
        allow_forks=bool(raw.get("allow_forks", False)),
        permission=default_permission,
    )


@dataclass(frozen=True)
class ChartCredentialSpec:
    """Where one chart credential is read from (env variable names, or files): by host (`host[:port]`) or a source's `secretRef`."""

    host: str | None = None
    secret: str | None = None  # "namespace/name" of the sources' spec.secretRef
    username: str | None = None  # a user name is not a secret: it may be written out
    username_env: str | None = None
    password_env: str | None = None
    password_file: str | None = None
    token_env: str | None = None
    token_file: str | None = None

    @property
    def key(self) -> str:
        """The key `FetchPolicy.credentials` looks it up by."""
        return f"secret:{self.secret}" if self.secret else str(self.host)


@dataclass(frozen=True)
class ChartSettings:
    """`charts:` of the service settings: hosts that may be reached besides the base branch's sources, mirrors, offline, credentials."""

    render: bool = True
    allow_hosts: tuple[str, ...] = ()
    mirrors: Mapping[str, str] = field(default_factory=dict)
    offline: bool = False
    credentials: tuple[ChartCredentialSpec, ...] = ()


_CHART_KEYS = {"render", "allow_hosts", "mirrors", "offline", "credentials"}
_CREDENTIAL_KEYS = {"host", "secret", "username", "username_env", "password_env", "password_file", "token_env", "token_file"}


def parse_chart_settings(raw: Any) -> ChartSettings:
    """`charts:` from the YAML (the secrets themselves are read by bot/service/settings.py, never from here)."""
    if raw is None:
        return ChartSettings()
    if not isinstance(raw, dict):
        raise ConfigError("`charts` must be a mapping (allow_hosts, mirrors, offline, credentials, render)")
    unknown = set(raw) - _CHART_KEYS
    if unknown:
        raise ConfigError(f"unknown key(s) in charts: {', '.join(sorted(unknown))}")
    for key in ("render", "offline"):
        if not isinstance(raw.get(key, False), bool):
            raise ConfigError(f"charts.{key} must be true or false")
    hosts = raw.get("allow_hosts") or []
    if not isinstance(hosts, list) or not all(isinstance(h, str) and h.strip() and "/" not in h for h in hosts):
        raise ConfigError("charts.allow_hosts must be a list of HOST or HOST:PORT strings")
    mirrors = raw.get("mirrors") or {}
    if not isinstance(mirrors, dict):
        raise ConfigError("charts.mirrors must map HOST to a URL")
    for host, url in mirrors.items():
        if not isinstance(host, str) or not host.strip() or not isinstance(url, str) or not url.startswith(("http://", "https://", "oci://")):
            raise ConfigError(f"charts.mirrors: {host!r} must map to an http(s):// or oci:// URL")
    entries = raw.get("credentials") or []
    if not isinstance(entries, list):
        raise ConfigError("charts.credentials must be a list")
    return ChartSettings(
        render=raw.get("render", True),
        allow_hosts=tuple(h.strip().lower() for h in hosts),
        mirrors={k.strip().lower(): v.strip() for k, v in mirrors.items()},
        offline=raw.get("offline", False),
        credentials=tuple(_chart_credential(entry, n) for n, entry in enumerate(entries)),
    )


def _chart_credential(raw: Any, n: int) -> ChartCredentialSpec:
    where = f"charts.credentials[{n}]"
    if not isinstance(raw, dict):
        raise ConfigError(f"{where} must be a mapping")
    unknown = set(raw) - _CREDENTIAL_KEYS
    if unknown:
        # A literal `password:` or `token:` is refused: secrets never live in this file.
        raise ConfigError(f"unknown key(s) in {where}: {', '.join(sorted(unknown))} (secrets come from *_env or *_file)")
    if not isinstance(raw.get("host"), str) and not isinstance(raw.get("secret"), str):
        raise ConfigError(f"{where} needs `host: HOST[:PORT]` or `secret: NAMESPACE/NAME`")
    if raw.get("host") and raw.get("secret"):
        raise ConfigError(f"{where}: set either `host` or `secret`, not both")
    secret = raw.get("secret")
    if secret is not None and (not isinstance(secret, str) or secret.count("/") != 1 or not all(secret.split("/"))):
        raise ConfigError(f"{where}: `secret` must be NAMESPACE/NAME")
    for key in _CREDENTIAL_KEYS - {"secret"}:
        value = raw.get(key)
        if value is not None and (not isinstance(value, str) or not value.strip()):
            raise ConfigError(f"{where}: `{key}` must be a non-empty string")
    if not any(raw.get(k) for k in ("password_env", "password_file", "token_env", "token_file")):
        raise ConfigError(f"{where} needs a password or token (password_env, password_file, token_env or token_file)")
    host = raw.get("host")
    return ChartCredentialSpec(
        host=host.strip().lower() if isinstance(host, str) else None, secret=secret,
        **{k: raw[k].strip() for k in _CREDENTIAL_KEYS - {"host", "secret"} if raw.get(k)},
    )
