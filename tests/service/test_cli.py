"""The `fluxwarden check` command: formats, exit codes, one-line errors, golden output on the example."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bot.service.cli import main
from tests.fluxrepo import dump, flux_repo, ks, kustomization, obj, write_tree
from tests.gitrepo import init_repo
from tests.golden import assert_golden

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "home-ops"


@pytest.fixture(scope="module")
def example(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A private copy of the example repo (tests must not depend on the checkout's state)."""
    dest = tmp_path_factory.mktemp("ex") / "home-ops"
    shutil.copytree(EXAMPLE, dest)
    return dest


@pytest.mark.parametrize("fmt,suffix", [("text", "txt"), ("markdown", "md"), ("json", "json")])
@pytest.mark.parametrize("cluster", ["dev", "prod"])
def test_example_golden(example: Path, capsys: pytest.CaptureFixture[str], cluster: str, fmt: str, suffix: str) -> None:
    code = main(["check", "--repo", str(example), "--cluster", cluster, "--format", fmt])
    out = capsys.readouterr()
    assert code == 0, out.err
    assert out.err == ""
    assert_golden(f"check/home-ops-{cluster}.{suffix}", out.out)


def test_example_shows_the_stale_tier_order(example: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "--repo", str(example), "--cluster", "prod", "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [(f["check"], f["kustomization"], f["file"]) for f in report["findings"]] == [
        ("dependency-not-waited", "flux-system/platform-config-cdi", "platform-config-cdi/cdi-storageprofiles.yaml"),
        ("tier-order-stale", "flux-system/platform-config-cdi", "bootstrap/standup.sh"),
        ("bootstrap", None, "bootstrap/standup.sh"),  # its resume loop applies the tiers in order (info)
        # Its charts come from public repositories, which no test reaches: a note per source, no error.
        ("chart-not-rendered", None, "platform/cert-manager/cert-manager.yaml"),
        ("chart-not-rendered", None, "platform/longhorn/longhorn.yaml"),
    ]
    assert report["helmReleases"] == {"rendered": 0, "notRendered": 2}
    cold = report["cold_start"]
    assert cold["converges"] is True and cold["rounds"] == 6
    assert cold["tiers"]["flux-system/platform-config-cdi"] == {"ready_round": 5, "failed_attempts": 1, "max_delay_seconds": 60, "blocked_by": "no served StorageProfile.cdi.kubevirt.io"}
    assert cold["tiers"]["flux-system/apps-vms"]["max_delay_seconds"] == 60
    names = [k["name"] for k in report["kustomizations"]]
    assert names.index("platform-config") < names.index("platform-config-cdi") < names.index("apps-vms")
    vms = next(k for k in report["kustomizations"] if k["name"] == "apps-vms")
    assert vms == {
        "name": "apps-vms",
        "namespace": "flux-system",
        "path": "apps/vms",
        "dependsOn": ["flux-system/platform-config", "flux-system/platform-config-cdi"],
        "wait": True,
        "prune": True,
        "objects": 3,
    }


def test_output_file(example: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "report.md"
    assert main(["check", "--repo", str(example), "--cluster", "dev", "--format", "markdown", "--output", str(target)]) == 0
    assert capsys.readouterr().out == ""
    assert target.read_text().startswith("### ⚠️ dev: 2 warnings")


def test_a_command_runs_as_a_process_that_ends_and_gives_the_settings_back(example: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A CLI command (the process ends after it) collects no garbage and shares parsed YAML keys; the caller's
    settings are as they were after (the service keeps both off)."""
    import gc

    from bot.engine.render.yamlio import FastSafeLoader, load_all
    from bot.pipeline import check

    seen: list[tuple[bool, bool]] = []
    real = check.check_repositories
    monkeypatch.setattr("bot.service.cli.check_repositories", lambda *a, **k: seen.append((gc.isenabled(), FastSafeLoader.share_keys)) or real(*a, **k))
    assert gc.isenabled() and not FastSafeLoader.share_keys
    assert main(["check", "--repo", str(example), "--cluster", "prod", "--output", str(tmp_path / "out.txt")]) in (0, 1)
    assert seen == [(False, True)] and gc.isenabled() and not FastSafeLoader.share_keys
    text = "a: {name: x}\n---\nb: {name: y}\n"
    apart = [next(iter(d.values())) for d in load_all(text, "t.yaml")]
    assert [next(iter(d)) for d in apart] == ["name", "name"] and next(iter(apart[0])) is not next(iter(apart[1]))
    gc.disable()
    try:
        with check.one_command():
            shared = [next(iter(d.values())) for d in load_all(text, "t.yaml")]
            assert next(iter(shared[0])) is next(iter(shared[1]))  # one string for the key of both documents
        assert not gc.isenabled()  # disabled before: stays so
    finally:
        gc.enable()


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    from bot import __version__

    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0 and capsys.readouterr().out == f"fluxwarden {__version__}\n"


@pytest.mark.parametrize("where", ["missing-dir/report.md", "a-directory", "read-only/report.md"])
def test_unwritable_output_fails_before_the_run(example: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], where: str) -> None:
    (tmp_path / "a-directory").mkdir()
    (tmp_path / "read-only").mkdir(mode=0o555)
    target = tmp_path / where
    if where.startswith("read-only") and os.access(tmp_path / "read-only", os.W_OK):
        pytest.skip("running as root: a read-only directory is writable")
    # A repository that does not exist: had the run started, the error would be about it, not the output.
    code = main(["check", "--repo", str(tmp_path / "no-repo"), "--cluster", "dev", "--output", str(target)])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and err.count("\n") == 1 and err.startswith(f"fluxwarden: error: --output {target}")


@pytest.mark.parametrize("command", [["drift"], ["check", "--live"]])
def test_no_kubeconfig_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, command: list[str]) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("KUBECONFIG", raising=False)
    code = main([*command, "--repo", str(EXAMPLE), "--cluster", "prod", "--no-cache"][: None if command[0] == "check" else -1])
    out, err = capsys.readouterr()
    assert (code, out) == (2, "")
    assert err == "fluxwarden: error: no kubeconfig: $KUBECONFIG is not set and ~/.kube/config does not exist; pass --kubeconfig FILE\n"
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "nowhere"))
    assert main([*command, "--repo", str(EXAMPLE), "--cluster", "prod"]) == 2
    assert capsys.readouterr().err == "fluxwarden: error: no kubeconfig: no file of $KUBECONFIG exists; pass --kubeconfig FILE\n"


def test_error_finding_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_tree(tmp_path, flux_repo({"a": ks("a", "./a", depends_on=["b"]), "b": ks("b", "./b", depends_on=["a"])},
                                   {"a/kustomization.yaml": kustomization(), "b/kustomization.yaml": kustomization()}))
    assert main(["check", "--repo", str(tmp_path), "--cluster", "dev"]) == 1
    out = capsys.readouterr().out
    assert "ERROR   dependency-cycle" in out
    assert "flux-system/a → flux-system/b → flux-system/a" in out


@pytest.mark.parametrize(
    "argv,message",
    [
        (["check", "--cluster", "nope"], "unknown cluster 'nope' (known: dev, prod)"),
        (["check", "--cluster", "dev", "--format", "yaml"], "invalid choice: 'yaml'"),
        (["frobnicate"], "invalid choice: 'frobnicate'"),
    ],
    ids=["unknown-cluster", "bad-format", "bad-command"],
)
def test_usage_errors_are_one_line_exit_2(example: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str) -> None:
    with pytest.raises(SystemExit) if argv[0] != "check" or "--cluster" not in argv or "--format" in argv else _no_raise():
        code = main([*argv, "--repo", str(example)] if argv[0] == "check" else argv)
        assert code == 2
    err = capsys.readouterr().err
    assert message in err
    assert len(err.strip().splitlines()) == 1
    assert "Traceback" not in err


def test_without_cluster_check_checks_every_cluster(example: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """No --cluster on a repository of several: one verdict each, as `/precheck` with no cluster; the worst exit status."""
    code = main(["check", "--repo", str(example), "--no-cache"])
    out = capsys.readouterr().out
    verdicts = [line for line in out.splitlines() if line.startswith(("✅", "⚠️", "❌"))]
    assert [v.split(":")[0].split()[-1] for v in verdicts] == ["dev", "prod"]
    separate = [main(["check", "--repo", str(example), "--cluster", c, "--no-cache"]) for c in ("dev", "prod")]
    capsys.readouterr()
    assert code == max(separate)
    assert main(["check", "--repo", str(example), "--no-cache", "--format", "json"]) == code
    assert [r["cluster"] for r in json.loads(capsys.readouterr().out)["clusters"]] == ["dev", "prod"]


def test_without_cluster_build_names_the_clusters_and_asks_for_one(example: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["build", "--repo", str(example), "--no-cache"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1
    assert "has 2 clusters: dev (clusters/dev), prod (clusters/prod); pass --cluster NAME" in err


def test_a_repository_of_one_cluster_needs_no_cluster_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_tree(tmp_path, flux_repo({"a": ks("a", "./a")}, {"a/kustomization.yaml": kustomization("cm.yaml"), "a/cm.yaml": dump(obj("v1", "ConfigMap", "c", "default"))}))
    assert main(["check", "--repo", str(tmp_path), "--no-cache"]) == 0
    assert capsys.readouterr().out.startswith("✅ dev:")
    assert main(["build", "--repo", str(tmp_path), "--no-cache"]) == 0
    assert "name: c" in capsys.readouterr().out


def test_clusters_lists_each_entry_and_how_it_was_found(example: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["clusters", "--repo", str(example)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[:2] for line in lines] == [["dev", "clusters/dev"], ["prod", "clusters/prod"]]
    assert all(line.endswith("configured in .fluxwarden.yaml") for line in lines)
    (example / ".fluxwarden.yaml").write_text("tier_order: {file: bootstrap/standup.sh, variable: TIER_ORDER}\n")
    assert main(["clusters", "--repo", str(example)]) == 0
    found = capsys.readouterr().out.splitlines()
    assert [line.split()[:2] for line in found] == [["dev", "clusters/dev"], ["prod", "clusters/prod"]]
    assert all(line.endswith("a folder of clusters/ that no other includes or applies") for line in found)
    boot = tmp_path / "boot"
    write_tree(boot, {
        "kubernetes/main/flux-system/gotk-sync.yaml": dump(ks("flux-system", "./kubernetes/main")),
        "kubernetes/main/flux-system/kustomization.yaml": kustomization("gotk-sync.yaml"),
        "kubernetes/main/kustomization.yaml": kustomization("flux-system"),
    })
    assert main(["clusters", "--repo", str(boot), "--format", "json"]) == 0
    [entry] = json.loads(capsys.readouterr().out)
    assert entry["name"] == "default" and entry["entry"] == "kubernetes/main"
    assert "applies its own directory" in entry["how"] or "gotk-sync" in entry["how"]
    assert main(["clusters", "--repo", str(tmp_path / "empty-dir")]) == 2
    (tmp_path / "nothing").mkdir()
    assert main(["clusters", "--repo", str(tmp_path / "nothing")]) == 1
    assert "no cluster found" in capsys.readouterr().out


class _no_raise:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> bool:
        return False


def test_missing_repo_dir(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "--repo", str(tmp_path / "absent"), "--cluster", "dev"]) == 2
    assert "is not a directory" in capsys.readouterr().err


def test_bad_config_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_tree(tmp_path, {".fluxwarden.yaml": "clusters: [dev]\n", "clusters/dev/kustomization.yaml": kustomization()})
    assert main(["check", "--repo", str(tmp_path), "--cluster", "dev"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("fluxwarden: error: .fluxwarden.yaml: `clusters` must map")


def test_unknown_config_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_tree(tmp_path, {".fluxwarden.yaml": "clustres: {}\n", "clusters/dev/kustomization.yaml": kustomization()})
    assert main(["check", "--repo", str(tmp_path), "--cluster", "dev"]) == 2
    assert "unknown key(s) clustres" in capsys.readouterr().err


def test_kustomize_missing_is_an_infrastructure_error(example: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLUXWARDEN_KUSTOMIZE", "/nonexistent/kustomize")
    assert main(["check", "--repo", str(example), "--cluster", "dev"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("fluxwarden: infrastructure error: kustomize binary '/nonexistent/kustomize'")


def test_console_script_runs_without_activated_venv(example: Path, tmp_path: Path) -> None:
    """The installed entry point finds the venv's kubectl even when PATH lacks the venv."""
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    proc = subprocess.run(
        [sys.executable, "-m", "bot.service.cli", "check", "--repo", str(example), "--cluster", "prod"],
        capture_output=True, text=True, env=env, cwd=Path(__file__).resolve().parents[2], timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "tier-order-stale" in proc.stdout


@pytest.mark.parametrize("fmt", ["json", "text"])
def test_the_program_ends_with_its_output_whole_and_its_exit_code(example: Path, tmp_path: Path, fmt: str) -> None:
    """The program leaves at once after a command (no interpreter teardown): what it wrote is all there, to a
    pipe and to --output, and the exit code is the command's (2: a usage error, said on stderr)."""
    cwd = Path(__file__).resolve().parents[2]
    for cluster, code in (("prod", 0), ("dev", 0), ("nowhere", 2)):
        piped = subprocess.run(
            [sys.executable, "-m", "bot.service.cli", "check", "--repo", str(example), "--cluster", cluster, "--format", fmt],
            capture_output=True, text=True, cwd=cwd, timeout=120,
        )
        written = tmp_path / f"{cluster}.{fmt}"
        to_file = subprocess.run(
            [sys.executable, "-m", "bot.service.cli", "check", "--repo", str(example), "--cluster", cluster, "--format", fmt, "--output", str(written)],
            capture_output=True, text=True, cwd=cwd, timeout=120,
        )
        assert (piped.returncode, to_file.returncode) == (code, code), piped.stderr + to_file.stderr
        if code == 2:
            assert piped.stdout == "" and piped.stderr.startswith("fluxwarden: error: ") and piped.stderr.endswith("\n")
            continue
        assert piped.stdout == written.read_text(encoding="utf-8") and piped.stdout.endswith("\n")
        if fmt == "json":
            assert json.loads(piped.stdout)["cluster"] == cluster


def test_entry_without_kustomization_file_is_generated(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Like `flux bootstrap`, the entry path needs no kustomization.yaml: Flux generates one."""
    write_tree(tmp_path, {
        "clusters/dev/apps.yaml": dump(ks("apps", "./apps")),
        "apps/cm.yaml": dump(obj("v1", "ConfigMap", "x", "default", data={"a": "b"})),
    })
    assert main(["check", "--repo", str(tmp_path), "--cluster", "dev", "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert {k["name"]: k["objects"] for k in report["kustomizations"]} == {"flux-system": 1, "apps": 1}


def test_serve_refuses_to_start_without_a_secret(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FLUXWARDEN_WEBHOOK_SECRET", raising=False)
    monkeypatch.delenv("FLUXWARDEN_WEBHOOK_SECRET_FILE", raising=False)
    assert main(["serve"]) == 2
    assert capsys.readouterr().err.startswith("fluxwarden: error: no webhook secret")


def test_serve_needs_github_credentials(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLUXWARDEN_WEBHOOK_SECRET", "s")
    for name in ("FLUXWARDEN_GITHUB_TOKEN", "FLUXWARDEN_GITHUB_TOKEN_FILE", "FLUXWARDEN_GITHUB_APP_ID"):
        monkeypatch.delenv(name, raising=False)
    assert main(["serve"]) == 2
    assert "no GitHub credentials" in capsys.readouterr().err


def test_example_service_config_loads(tmp_path: Path) -> None:
    from bot.service.settings import load_service_config

    root = Path(__file__).resolve().parents[2]
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    (secrets / "webhook-secret").write_text("webhook-secret-value-123\n")
    (secrets / "github-token").write_text("ghp_tokenvalue1234567890\n")
    (secrets / "app-private-key.pem").write_text("-----BEGIN RSA PRIVATE KEY-----\nnot a key\n-----END RSA PRIVATE KEY-----\n")
    config_file = tmp_path / "fluxwarden.yaml"
    config_file.write_text((root / "config/fluxwarden.example.yaml").read_text().replace("/var/run/secrets/fluxwarden", str(secrets)))
    config = load_service_config(config_file, {"FLUXWARDEN_CACHE_DIR": str(tmp_path), "FLUXWARDEN_REPOS": "other/repo"})
    assert config.webhook_secret == b"webhook-secret-value-123"
    assert config.github.token == "ghp_tokenvalue1234567890" and config.github.app_id == 123456
    assert [r.name for r in config.repos] == ["home-ops/cluster", "other/repo"]
    prod = config.repo("HOME-OPS/cluster").cluster("prod")
    assert (prod.automatic, prod.permission) == (True, "maintain")
    assert config.limits.workers == 2 and config.port == 8080 and config.cache_dir == tmp_path
    assert "webhook-secret-value-123" not in repr(config) and "ghp_tokenvalue" not in repr(config)
    # Environment overrides win over the file.
    env = {"FLUXWARDEN_WEBHOOK_SECRET": "from-env", "FLUXWARDEN_GITHUB_API_URL": "https://ghe.example/api/v3", "FLUXWARDEN_PORT": "9000"}
    config = load_service_config(config_file, env)
    assert (config.webhook_secret, config.github.api_url, config.port) == (b"from-env", "https://ghe.example/api/v3", 9000)


# -- nothing checked is not a pass -------------------------------------------------------------


def test_a_cluster_that_renders_no_object_fails(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An entry whose build gives nothing (an empty kustomization) checked nothing: exit 1, saying so."""
    write_tree(tmp_path, {"clusters/dev/kustomization.yaml": kustomization()})
    assert main(["check", "--repo", str(tmp_path), "--cluster", "dev", "--no-cache"]) == 1
    out = capsys.readouterr().out
    assert "ERROR   nothing-rendered" in out
    assert "nothing of cluster dev (entry ./clusters/dev) was checked" in out
    assert "not checked: flux-system/flux-system (rendered no object)" in out


def test_an_entry_that_fails_to_build_says_nothing_was_checked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_tree(tmp_path, {"clusters/dev/kustomization.yaml": kustomization("missing.yaml")})
    assert main(["check", "--repo", str(tmp_path), "--cluster", "dev", "--no-cache", "--format", "json"]) == 1
    findings = json.loads(capsys.readouterr().out)["findings"]
    assert {(f["check"], f["severity"]) for f in findings} >= {("render-failed", "error"), ("nothing-rendered", "error")}
    nothing = next(f for f in findings if f["check"] == "nothing-rendered")
    assert "flux-system/flux-system (failed to render)" in nothing["message"] and nothing["file"] == "clusters/dev"


def test_an_entry_whose_kustomizations_all_apply_other_sources_checked_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The entry only wires the cluster up: when none of the tiers it applies renders, its content went unchecked."""
    write_tree(tmp_path, flux_repo({"apps": ks("apps", "./apps", source="other-repo"), "infra": ks("infra", "./infra", source_kind="OCIRepository")}))
    assert main(["check", "--repo", str(tmp_path), "--cluster", "dev", "--no-cache", "--format", "json"]) == 1
    findings = json.loads(capsys.readouterr().out)["findings"]
    nothing = next(f for f in findings if f["check"] == "nothing-rendered")
    assert nothing["message"] == (
        "nothing of cluster dev (entry ./clusters/dev) was checked: none of the 2 Kustomizations its entry applies rendered an object; "
        "not checked: flux-system/apps (applies GitRepository/other-repo, not this repository), "
        "flux-system/infra (applies OCIRepository/flux-system, not this repository)"
    )


@pytest.mark.parametrize("defined, own_objects, nothing", [
    pytest.param(True, True, False, id="other-repositories-defined-entry-has-content"),
    pytest.param(False, True, True, id="sources-not-defined"),
    pytest.param(True, False, True, id="entry-only-wiring"),
])
def test_an_entry_whose_tiers_apply_repositories_it_defines(tmp_path: Path, capsys: pytest.CaptureFixture[str], defined: bool, own_objects: bool, nothing: bool) -> None:
    """controlplaneio-fluxcd/d2-fleet's `update` cluster: the entry holds the cluster's own objects (namespaces,
    RBAC, image automation) and defines GitRepositories of other repositories that its Kustomizations apply.
    The entry was checked: no `nothing-rendered`. A source the render does not define may be this repository
    under another name, and an entry of Kustomizations only is wiring: both still check nothing."""
    sources = [
        obj("source.toolkit.fluxcd.io/v1", "GitRepository", "apps", "flux-system", spec={"url": "https://github.com/acme/apps", "interval": "1h"}),
        obj("source.toolkit.fluxcd.io/v1", "GitRepository", "infra", "flux-system", spec={"url": "https://github.com/acme/infra", "interval": "1h"}),
    ]
    extra = {
        "clusters/dev/kustomization.yaml": kustomization(
            "apps.yaml", "infra.yaml", *(["sources.yaml"] if defined else []), *(["team.yaml"] if own_objects else []),
        ),
        "clusters/dev/sources.yaml": dump(*sources),
        "clusters/dev/team.yaml": dump(obj("v1", "Namespace", "team")),
    }
    write_tree(tmp_path, flux_repo({"apps": ks("apps", "./apps", source="apps"), "infra": ks("infra", "./infra", source="infra")}, extra))
    code = main(["check", "--repo", str(tmp_path), "--cluster", "dev", "--no-cache", "--format", "json"])
    findings = json.loads(capsys.readouterr().out)["findings"]
    assert any(f["check"] == "nothing-rendered" for f in findings) is nothing
    assert code == (1 if nothing else 0)


def test_one_rendered_tier_is_enough(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_tree(tmp_path, flux_repo(
        {"apps": ks("apps", "./apps", source="other-repo"), "local": ks("local", "./local")},
        {"local/cm.yaml": dump(obj("v1", "ConfigMap", "x", "default"))},
    ))
    assert main(["check", "--repo", str(tmp_path), "--cluster", "dev", "--no-cache", "--format", "json"]) == 0
    findings = json.loads(capsys.readouterr().out)["findings"]
    assert [(f["check"], f["severity"]) for f in findings] == [("not-rendered", "info")]


# -- limits: a finding, never an internal error ------------------------------------------------


@pytest.mark.parametrize("body", ["extra: " + "[" * 2_000 + "]" * 2_000 + "\n", "extra: " + "[" * 340 + "]" * 340 + "\n"], ids=["flow-2000", "flow-340"])
def test_a_deep_yaml_file_is_a_render_limit_not_an_internal_error(tmp_path: Path, body: str) -> None:
    """Issue 23: 340 levels and more once raised RecursionError (`internal error`, exit 2); now exit 1 with the bound."""
    repo = tmp_path / "repo"
    write_tree(repo, flux_repo({"apps": ks("apps", "./apps")}, {
        "apps/kustomization.yaml": kustomization("deep.yaml"),
        "apps/deep.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: deep, namespace: default}\n" + body,
    }))
    init_repo(repo)
    proc = subprocess.run(
        [sys.executable, "-m", "bot.service.cli", "check", "--repo", str(repo), "--cluster", "dev", "--no-cache"],
        capture_output=True, text=True, env={"PATH": os.environ["PATH"], "HOME": str(tmp_path)}, cwd=Path(__file__).resolve().parents[2], timeout=120,
    )
    assert proc.returncode == 1, proc.stderr
    assert "internal error" not in proc.stderr + proc.stdout and proc.stderr == ""
    assert "ERROR   render-limit  flux-system/apps  apps/deep.yaml" in proc.stdout
    assert "(limit: 100); not rendered" in proc.stdout


def test_a_kustomize_that_fails_to_start_is_one_line(example: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A broken wrapper fails every tier the same way: the run says so once, with its real error, not a finding per tier."""
    wrapper = tmp_path / "bin" / "kustomize"
    wrapper.parent.mkdir()
    wrapper.write_text('#!/bin/sh\necho "Traceback (most recent call last):" >&2\necho "ImportError: cannot import name kustomize" >&2\nexit 1\n')
    wrapper.chmod(0o755)
    code = main(["check", "--repo", str(example), "--cluster", "dev", "--no-cache", "--kustomize", str(wrapper)])
    out, err = capsys.readouterr()
    assert (code, out) == (2, "")
    assert err == f"fluxwarden: infrastructure error: kustomize at {wrapper} failed to start: Traceback (most recent call last): / ImportError: cannot import name kustomize\n"


def test_markdown_of_a_500_tier_repository_fits_one_comment(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`check --format markdown` stays within GitHub's 65,536 characters: findings alike grouped, notes folded, tiers cut."""
    import yaml

    from bench.synth import generate
    from bot.engine.core.github_limits import MAX_COMMENT

    root = tmp_path / "synth"
    generate(root, tiers=500, objects=3000, clusters=("dev",), git=False)
    for path in sorted((root / "clusters" / "base").glob("tier-*.yaml")):  # every tier waits for one that does not exist
        doc = yaml.safe_load(path.read_text())
        doc["spec"]["dependsOn"] = [*doc["spec"].get("dependsOn", []), {"name": f"gone-{path.stem}"}]
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
    code = main(["check", "--repo", str(root), "--cache-dir", str(tmp_path / "cache"), "--format", "markdown"])
    out = capsys.readouterr().out
    assert code == 1
    assert len(out) <= MAX_COMMENT
    missing = [line for line in out.splitlines() if "`missing-dependency`" in line]
    assert len(missing) == 1 and "`missing-dependency` ×500" in missing[0] and "and 497 more" in missing[0]
    assert "… and " in out and "more tiers (see `fluxwarden check --format text`)" in out  # 501 tiers do not fit: cut, and said
    assert out.rstrip().endswith("</details>")
