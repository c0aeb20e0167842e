"""The service settings' `charts:` section: hosts, mirrors, offline, and credentials read from the environment or files."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.engine.render.chartsource import Credential
from bot.engine.core.errors import ConfigError
from bot.service.settings import load_service_config

REQUIRED = {"FLUXWARDEN_WEBHOOK_SECRET": "hook", "FLUXWARDEN_GITHUB_TOKEN": "ghp_x"}


def load(tmp_path: Path, text: str, **env: str):
    path = tmp_path / "fluxwarden.yaml"
    path.write_text(text)
    return load_service_config(path, {**REQUIRED, **env})


def test_charts_settings_build_the_fetch_policy(tmp_path: Path) -> None:
    token_file = tmp_path / "ghcr-token"
    token_file.write_text("ghcr-token-value-123\n")
    config = load(tmp_path, f"""\
charts:
  allow_hosts: [Charts.Internal:8443, ghcr.io]
  mirrors: {{charts.bitnami.com: "https://nexus.internal/bitnami/"}}
  offline: true
  credentials:
    - {{host: charts.internal:8443, username: bot, password_env: INTERNAL_PW}}
    - {{secret: flux-system/ghcr-auth, username_env: GHCR_USER, token_file: {token_file}}}
    - {{host: quay.io, token_env: QUAY_TOKEN}}
""", INTERNAL_PW="internal-pw-456", GHCR_USER="octo", QUAY_TOKEN_FILE=str(token_file))
    policy = config.charts.policy
    assert config.charts.render and policy.offline
    assert policy.allow_hosts == {"charts.internal:8443", "ghcr.io"}
    assert dict(policy.mirrors) == {"charts.bitnami.com": "https://nexus.internal/bitnami"}
    assert policy.credential(None, "charts.internal", 8443) == Credential("bot", "internal-pw-456")
    assert policy.credential("flux-system/ghcr-auth", "ghcr.io", 443) == Credential("octo", token="ghcr-token-value-123")
    assert policy.credential(None, "quay.io", 443) == Credential(token="ghcr-token-value-123")  # $QUAY_TOKEN_FILE
    for secret in ("internal-pw-456", "ghcr-token-value-123"):
        assert secret not in repr(config) and secret not in repr(config.charts) and secret not in repr(policy.credentials)


def test_environment_overrides_and_defaults(tmp_path: Path) -> None:
    config = load(tmp_path, "charts: {allow_hosts: [a.example]}\n", FLUXWARDEN_CHARTS_ALLOW_HOSTS="127.0.0.1:5000, b.example", FLUXWARDEN_CHARTS_OFFLINE="true")
    assert config.charts.policy.allow_hosts == {"a.example", "127.0.0.1:5000", "b.example"} and config.charts.policy.offline
    default = load_service_config(None, REQUIRED).charts
    assert default.render and not default.policy.allow_hosts and not default.policy.credentials
    assert not load(tmp_path, "charts: {render: false}\n").charts.render


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("charts: {credentials: [{host: h.example, username: u, password: hunter2}]}\n", "secrets come from *_env or *_file"),
        ("charts: {credentials: [{host: h.example, username: u, password_env: UNSET_PW}]}\n", "$UNSET_PW (password) is not set"),
        ("charts: {credentials: [{host: h.example, password_env: PW}]}\n", "needs `username`"),
        ("charts: {credentials: [{username: u, password_env: PW}]}\n", "needs `host"),
        ("charts: {credentials: [{secret: nonamespace, token_env: PW}]}\n", "NAMESPACE/NAME"),
        ("charts: {credentials: [{host: h.example, username: u}]}\n", "needs a password or token"),
        ("charts: {credentials: [{host: h.example, token_file: /nonexistent/token}]}\n", "cannot read token file"),
        ("charts: {mirrors: {h.example: ftp://x}}\n", "http(s):// or oci://"),
        ("charts: {allow_hosts: [http://h.example/]}\n", "HOST or HOST:PORT"),
        ("charts: {offline: sometimes}\n", "charts.offline must be true or false"),
        ("charts: {proxy: x}\n", "unknown key(s) in charts: proxy"),
    ],
)
def test_bad_charts_settings_stop_the_start(tmp_path: Path, text: str, words: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load(tmp_path, text, PW="pw")
    assert words in str(caught.value) and "hunter2" not in str(caught.value)


def test_the_service_passes_the_chart_settings_to_every_run(tmp_path: Path) -> None:
    from bot.service.app import build_service

    config = load(tmp_path, "charts: {allow_hosts: ['127.0.0.1:5000'], offline: true}\n", FLUXWARDEN_REPOS="o/r", FLUXWARDEN_CACHE_DIR=str(tmp_path / "cache"))
    service = build_service(config)
    assert service.bot.options.charts == config.charts
    assert service.bot.options.charts.policy.allow_hosts == {"127.0.0.1:5000"}


def test_the_example_configs_charts_section_loads_as_documented(tmp_path: Path) -> None:
    example = Path(__file__).resolve().parents[2] / "config/fluxwarden.example.yaml"
    text = example.read_text()
    block = text[text.index("\ncharts:\n"):text.index("\nlisten:")]  # the `charts:` section as the file has it
    charts = load(tmp_path, block).charts
    assert charts.render and not charts.policy.offline and not charts.policy.credentials
    assert charts.policy.allow_hosts == {"charts.internal.example:8443", "ghcr.io"}
    assert dict(charts.policy.mirrors) == {"charts.bitnami.com": "https://nexus.internal.example/repository/bitnami"}


# ------------------------------------------------------------------------------------------- render memory, the pod

ROOT = Path(__file__).resolve().parents[2]


def _pod() -> dict:
    import yaml

    return yaml.safe_load((ROOT / "deploy/deployment.yaml").read_text())["spec"]["template"]["spec"]


def test_render_memory_reads_kubernetes_sizes_and_the_environment(tmp_path: Path) -> None:
    from bot.engine.chatops.settings import Limits

    assert load_service_config(None, REQUIRED).limits.render_memory == Limits.render_memory
    assert load(tmp_path, "limits: {render_memory: 2Gi}\n").limits.render_memory == 2 * 1024**3
    assert load(tmp_path, "limits: {render_memory: 700Mi}\n", FLUXWARDEN_RENDER_MEMORY="1Gi").limits.render_memory == 1024**3
    assert load(tmp_path, "limits: {render_memory: 123456789}\n").limits.render_memory == 123456789
    for bad in ("lots", "-1Gi", "2GB", "0"):
        with pytest.raises(ConfigError, match="limits.render_memory must be a size"):
            load(tmp_path, f"limits: {{render_memory: {bad}}}\n")


def test_the_shipped_pod_limit_holds_the_render_budget_the_bot_and_headroom() -> None:
    """deploy/deployment.yaml's memory limit ≥ the default render budget + the bot's own peak + a tenth."""
    from bot.engine.chatops.settings import SERVICE_MEMORY, Limits, parse_bytes

    [container] = [c for c in _pod()["containers"] if c["name"] == "fluxwarden"]
    limit = parse_bytes(container["resources"]["limits"]["memory"], "the pod's memory limit")
    assert limit == 3 * 1024**3
    assert Limits.render_memory + SERVICE_MEMORY <= limit * 0.9
    assert Limits.render_memory >= 1024**3, "one real 1 GiB kustomize build (GOMEMLIMIT) must fit"


def test_the_code_grace_period_is_the_pods() -> None:
    from bot.service.app import EXIT_MARGIN, GRACE_SECONDS, SHUTDOWN_TIMEOUT

    assert _pod()["terminationGracePeriodSeconds"] == GRACE_SECONDS
    assert SHUTDOWN_TIMEOUT < GRACE_SECONDS - EXIT_MARGIN
