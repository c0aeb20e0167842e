"""The bot's own configuration (`fluxwarden serve --config FILE`), every key overridable from the environment.

Secrets (webhook secret, token, App private key) come from env or files, never from the YAML itself,
and never appear in a repr or a log line.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from bot.commands import PERMISSION_ORDER
from bot.errors import ConfigError, InputError
from bot.github import GitHubAuth
from bot.yamlio import load_one

DEFAULT_API_URL = "https://api.github.com"


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

    @property
    def live(self) -> bool:
        """Whether this cluster's live state is read on each run."""
        return bool(self.kubeconfig or self.in_cluster)


@dataclass(frozen=True)
class RepoPolicy:
    """One repository the bot serves."""

    name: str  # owner/repo
    clusters: tuple[ClusterPolicy, ...] = ()
    clone_url: str | None = None  # overrides the payload's repository.clone_url
    allow_forks: bool = False

    def cluster(self, name: str) -> ClusterPolicy | None:
        return next((c for c in self.clusters if c.name == name), None)

    @property
    def cluster_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.clusters)


@dataclass(frozen=True)
class Limits:
    """Bounds on concurrent work."""

    workers: int = 2
    queue: int = 100
    run_timeout: float = 900.0
    kustomize_timeout: float = 120.0
    max_body_bytes: int = 25 * 1024 * 1024  # GitHub caps webhook payloads at 25 MB


@dataclass(frozen=True)
class GitIdentity:
    """Who the bot's commits (e.g. the tier order follow-up PRs) are by: author and committer."""

    name: str = "fluxwarden[bot]"
    email: str = "fluxwarden[bot]@users.noreply.github.com"


def _git_identity(raw: Any, env: Mapping[str, str]) -> GitIdentity:
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
class ServiceConfig:
    """Everything `fluxwarden serve` needs."""

    webhook_secret: bytes = field(repr=False, default=b"")
    github: GitHubAuth = field(default_factory=GitHubAuth)
    repos: tuple[RepoPolicy, ...] = ()
    limits: Limits = field(default_factory=Limits)
    host: str = "0.0.0.0"
    port: int = 8080
    cache_dir: Path = Path("/var/cache/fluxwarden")
    public_url: str | None = None  # for status target links
    git_identity: GitIdentity = field(default_factory=GitIdentity)  # author/committer of the bot's commits

    def repo(self, full_name: str) -> RepoPolicy | None:
        """The policy of an allowlisted repository (case-insensitive, like GitHub names)."""
        return next((r for r in self.repos if r.name.lower() == full_name.lower()), None)


def _secret(env: Mapping[str, str], name: str, file_value: Any, key: str) -> str | None:
    """A secret from $NAME, $NAME_FILE, or a `*_file` key in the YAML; never the YAML value itself."""
    if env.get(name):
        return env[name]
    path = env.get(f"{name}_FILE") or file_value
    if path:
        try:
            return Path(path).read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise ConfigError(f"cannot read {key} file {path}: {exc.strerror}") from None
    return None


def load_service_config(path: Path | None, env: Mapping[str, str] | None = None) -> ServiceConfig:
    """Read the YAML (optional) and apply FLUXWARDEN_* environment overrides; refuse to start without a secret."""
    env = os.environ if env is None else env
    doc: dict[str, Any] = {}
    if path is not None:
        try:
            doc = load_one(path.read_text(encoding="utf-8"), str(path)) or {}
        except OSError as exc:
            raise ConfigError(f"cannot read {path}: {exc.strerror}") from None
        except InputError as exc:
            raise ConfigError(str(exc)) from None
        if not isinstance(doc, dict):
            raise ConfigError(f"{path} must be a mapping")
    known = {"webhook", "github", "repos", "limits", "listen", "cache_dir", "public_url", "git"}
    unknown = set(doc) - known
    if unknown:
        raise ConfigError(f"unknown key(s) in {path}: {', '.join(sorted(unknown))}")
    webhook = doc.get("webhook") or {}
    secret = _secret(env, "FLUXWARDEN_WEBHOOK_SECRET", webhook.get("secret_file"), "webhook secret")
    if not secret:
        raise ConfigError("no webhook secret: set FLUXWARDEN_WEBHOOK_SECRET (or _FILE, or webhook.secret_file); refusing to start")
    gh = doc.get("github") or {}
    app_id = env.get("FLUXWARDEN_GITHUB_APP_ID") or gh.get("app_id")
    installation = env.get("FLUXWARDEN_GITHUB_INSTALLATION_ID") or gh.get("installation_id")
    auth = GitHubAuth(
        token=_secret(env, "FLUXWARDEN_GITHUB_TOKEN", gh.get("token_file"), "GitHub token"),
        app_id=int(app_id) if app_id else None,
        private_key=_secret(env, "FLUXWARDEN_GITHUB_PRIVATE_KEY", gh.get("private_key_file"), "GitHub App private key"),
        installation_id=int(installation) if installation else None,
        api_url=env.get("FLUXWARDEN_GITHUB_API_URL") or gh.get("api_url") or DEFAULT_API_URL,
    )
    if not auth.token and not (auth.app_id and auth.private_key and auth.installation_id):
        raise ConfigError("no GitHub credentials: set FLUXWARDEN_GITHUB_TOKEN, or an App (app_id, private key, installation_id)")
    limits_doc = doc.get("limits") or {}
    limits = Limits(
        workers=int(env.get("FLUXWARDEN_WORKERS") or limits_doc.get("workers", Limits.workers)),
        queue=int(env.get("FLUXWARDEN_QUEUE") or limits_doc.get("queue", Limits.queue)),
        run_timeout=float(limits_doc.get("run_timeout", Limits.run_timeout)),
        kustomize_timeout=float(limits_doc.get("kustomize_timeout", Limits.kustomize_timeout)),
        max_body_bytes=int(limits_doc.get("max_body_bytes", Limits.max_body_bytes)),
    )
    listen = doc.get("listen") or {}
    repos = tuple(_repo(r) for r in doc.get("repos") or [])
    extra = env.get("FLUXWARDEN_REPOS")  # "owner/a,owner/b": allowlist with default cluster policies
    if extra:
        repos += tuple(RepoPolicy(name.strip()) for name in extra.split(",") if name.strip() and not any(r.name == name.strip() for r in repos))
    return ServiceConfig(
        webhook_secret=secret.encode(),
        github=auth,
        repos=repos,
        limits=limits,
        host=env.get("FLUXWARDEN_HOST") or listen.get("host", "0.0.0.0"),
        port=int(env.get("FLUXWARDEN_PORT") or listen.get("port", 8080)),
        cache_dir=Path(env.get("FLUXWARDEN_CACHE_DIR") or doc.get("cache_dir") or "/var/cache/fluxwarden"),
        public_url=env.get("FLUXWARDEN_PUBLIC_URL") or doc.get("public_url"),
        git_identity=_git_identity(doc.get("git"), env),
    )


def _repo(raw: Any) -> RepoPolicy:
    if not isinstance(raw, dict) or not isinstance(raw.get("name"), str) or "/" not in raw["name"]:
        raise ConfigError("each entry of `repos` needs `name: owner/repo`")
    default_permission = raw.get("permission", "write")
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
        clusters.append(ClusterPolicy(str(name), bool(spec.get("automatic", True)), permission, kubeconfig, context, in_cluster))
    return RepoPolicy(
        name=raw["name"],
        clusters=tuple(clusters),
        clone_url=raw.get("clone_url"),
        allow_forks=bool(raw.get("allow_forks", False)),
    )
