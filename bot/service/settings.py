"""The bot's own configuration (`fluxwarden serve --config FILE`), every key overridable from the environment.

Secrets (webhook secret, token, App private key) come from env or files, never from the YAML itself,
and never appear in a repr or a log line.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from bot.adapters.github import GitHubAuth
from bot.engine.render.chartsource import Credential, FetchPolicy
from bot.engine.core.errors import ConfigError, InputError
from bot.engine.chatops.settings import (
    ChartCredentialSpec, ChartSettings, DriftPolicy, GitIdentity, LeaderElection, Limits, RepoPolicy, parse_chart_settings,
    parse_bytes, parse_git_identity, parse_leader_election, parse_repo,
)
from bot.engine.render.yamlio import load_one
from bot.pipeline.releases import ChartOptions

DEFAULT_API_URL = "https://api.github.com"


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
    # The login on the bot's comments, when GitHub cannot tell us (an installation token used as a
    # plain token gets 403 on GET /user); Apps need none (`<slug>[bot]`).
    github_login: str | None = None
    git_identity: GitIdentity = field(default_factory=GitIdentity)  # author/committer of the bot's commits
    leader_election: LeaderElection = field(default_factory=LeaderElection)  # high availability (docs/high-availability.md)
    # How HelmReleases' charts are fetched (`charts:`): hosts besides the base branch's sources, mirrors, credentials.
    charts: ChartOptions = field(default_factory=ChartOptions)

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
        doc = _read_yaml(path)
        if not isinstance(doc, dict):
            raise ConfigError(f"{path} must be a mapping")
    known = {"webhook", "github", "repos", "limits", "listen", "cache_dir", "public_url", "git"}
    known |= {"leader_election", "charts"}
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
        final_retry_seconds=float(limits_doc.get("final_retry_seconds", Limits.final_retry_seconds)),
        read_retry_seconds=float(limits_doc.get("read_retry_seconds", Limits.read_retry_seconds)),
        render_memory=parse_bytes(env.get("FLUXWARDEN_RENDER_MEMORY") or limits_doc.get("render_memory", Limits.render_memory), "limits.render_memory"),
    )
    listen = doc.get("listen") or {}
    repos = tuple(parse_repo(r) for r in doc.get("repos") or [])
    for repo in repos:
        for cluster in repo.clusters:
            _check_schedule(cluster.drift, f"repo {repo.name} cluster {cluster.name}")
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
        github_login=env.get("FLUXWARDEN_GITHUB_LOGIN") or gh.get("login"),
        git_identity=parse_git_identity(doc.get("git"), env),
        leader_election=parse_leader_election(doc.get("leader_election"), env),
        charts=chart_options(parse_chart_settings(doc.get("charts")), env),
    )


def chart_options(settings: ChartSettings, env: Mapping[str, str]) -> ChartOptions:
    """The chart options of `charts:`, its credentials read from the environment or files now.

    FLUXWARDEN_CHARTS_ALLOW_HOSTS (comma-separated) adds hosts; FLUXWARDEN_CHARTS_OFFLINE=true turns fetching off.
    """
    hosts = set(settings.allow_hosts)
    hosts.update(h.strip().lower() for h in env.get("FLUXWARDEN_CHARTS_ALLOW_HOSTS", "").split(",") if h.strip())
    offline_env = env.get("FLUXWARDEN_CHARTS_OFFLINE", "").strip().lower()
    offline = offline_env in ("1", "true", "yes", "on") if offline_env else settings.offline
    credentials = {spec.key: _credential(spec, env, n) for n, spec in enumerate(settings.credentials)}
    policy = FetchPolicy(allow_hosts=frozenset(hosts), mirrors=dict(settings.mirrors), credentials=credentials, offline=offline)
    return ChartOptions(render=settings.render, policy=policy)


def read_chart_credentials(path: Path, env: Mapping[str, str]) -> dict[str, Credential]:
    """`--chart-credentials-file FILE`: a YAML `credentials:` list as in the service settings' `charts:`, its secrets read now."""
    doc = _read_yaml(path)
    if not isinstance(doc, dict) or set(doc) - {"credentials"}:
        raise ConfigError(f"{path} must be a mapping with one key, `credentials` (a list as in the service settings' charts.credentials)")
    specs = parse_chart_settings({"credentials": doc.get("credentials")}).credentials
    return {spec.key: _credential(spec, env, n) for n, spec in enumerate(specs)}


def _credential(spec: ChartCredentialSpec, env: Mapping[str, str], n: int) -> Credential:
    """One chart credential, its secrets from the variables or files it names; a named variable that is unset stops the start."""
    where = f"charts.credentials[{n}]"

    def read(var: str | None, file: str | None, what: str) -> str | None:
        if var:
            value = env.get(var) or None
            if value is None and env.get(f"{var}_FILE"):
                file = env[f"{var}_FILE"]
            elif value is None and not file:
                raise ConfigError(f"{where}: ${var} ({what}) is not set")
            if value is not None:
                return value
        if file:
            try:
                return Path(file).read_text(encoding="utf-8").strip()
            except OSError as exc:
                raise ConfigError(f"{where}: cannot read {what} file {file}: {exc.strerror}") from None
        return None

    username = spec.username or read(spec.username_env, None, "user name")
    password = read(spec.password_env, spec.password_file, "password")
    token = read(spec.token_env, spec.token_file, "token")
    if password and not username:
        raise ConfigError(f"{where}: a password needs `username` or `username_env`")
    return Credential(username=username, password=password, token=token)


def _check_schedule(policy: DriftPolicy, where: str) -> None:
    """A drift schedule the scheduler can run (cron syntax, a positive interval), or a ConfigError."""
    from bot.adapters.scheduler import Schedule, ScheduleError  # APScheduler: only when a config is loaded

    try:
        Schedule(cron=policy.schedule, interval_seconds=policy.interval_seconds, jitter=policy.jitter).validate()
    except ScheduleError as exc:
        raise ConfigError(f"{where}: drift: {exc}") from None


def _read_yaml(path: Path) -> Any:
    """One YAML document of a settings file; an unreadable or malformed file is a ConfigError naming it."""
    try:
        return load_one(path.read_text(encoding="utf-8"), str(path)) or {}
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}") from None
    except InputError as exc:
        raise ConfigError(str(exc)) from None
