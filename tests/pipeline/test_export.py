"""`fluxwarden build`: the rendered objects as YAML, tier by tier, Secret values masked, exit codes."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from bot.service.cli import main
from tests.fluxrepo import dump, flux_repo, ks, kustomization, obj, write_tree
from tests.golden import assert_golden

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "home-ops"
SOPS_VALUE = "ENC[AES256_GCM,data:c2VjcmV0,iv:aXY=,tag:dGFn,type:str]"


@pytest.fixture(scope="module")
def example(tmp_path_factory: pytest.TempPathFactory) -> Path:
    dest = tmp_path_factory.mktemp("ex") / "home-ops"
    shutil.copytree(EXAMPLE, dest)
    return dest


def test_example_golden(example: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["build", "--repo", str(example), "--cluster", "prod", "--cache-dir", str(tmp_path / "c")])
    out = capsys.readouterr()
    assert code == 0, out.err
    # Only the notes that its two charts (public repositories, out of a test's reach) were not rendered.
    assert [line.split(":", 2)[1].strip() for line in out.err.splitlines()] == ["info chart-not-rendered HelmRelease/cert-manager/cert-manager", "info chart-not-rendered HelmRelease/longhorn-system/longhorn"]
    assert_golden("export/home-ops-prod.yaml", out.out)
    assert "config.kubernetes.io/origin" not in out.out  # our own build metadata never shows
    documents = [d for d in yaml.safe_load_all(out.out) if d is not None]
    assert len(documents) == 42  # what `check` counts for prod: 6 tiers, 42 objects
    # Each tier opens with a comment naming it; tiers in apply order (dependencies first).
    heads = [line for line in out.out.splitlines() if line.startswith("# Kustomization ")]
    assert heads[0] == "# Kustomization flux-system/flux-system (path ./clusters/prod)"
    assert heads.index("# Kustomization flux-system/platform-config (path ./platform-config)") < heads.index(
        "# Kustomization flux-system/apps-vms (path ./apps/vms)"
    )


def test_one_tier_by_name(example: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["build", "--repo", str(example), "--cluster", "prod", "--tier", "flux-system/apps-vms", "--no-cache"]) == 0
    by_ns_name = capsys.readouterr().out
    assert by_ns_name.splitlines()[0] == "# Kustomization flux-system/apps-vms (path ./apps/vms)"
    assert by_ns_name.count("# Kustomization ") == 1
    assert len([d for d in yaml.safe_load_all(by_ns_name) if d]) == 3
    assert main(["build", "--repo", str(example), "--cluster", "prod", "--tier", "apps-vms", "--no-cache"]) == 0
    assert capsys.readouterr().out == by_ns_name


def test_unknown_tier_is_a_usage_error(example: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["build", "--repo", str(example), "--cluster", "prod", "--tier", "flux-system/nope", "--no-cache"]) == 2
    out = capsys.readouterr()
    assert out.out == ""
    assert out.err.startswith("fluxwarden: error: tier 'flux-system/nope' is not a Kustomization of cluster prod (tiers: flux-system/flux-system")
    assert len(out.err.splitlines()) == 1


def secrets_repo(root: Path) -> Path:
    """A tier with a plain Secret, a SOPS-encrypted one and a ConfigMap fed a variable from a Secret."""
    sops_secret = obj("v1", "Secret", "encrypted", "default", data={"token": SOPS_VALUE},
                      sops={"mac": "ENC[AES256_GCM,data:bWFj,iv:aXY=,tag:dGFn,type:str]", "age": [{"recipient": "age1xyz"}]})
    files = flux_repo(
        {"apps": ks("apps", "./apps", decryption={"provider": "sops"}, post_build={"substituteFrom": [{"kind": "Secret", "name": "vars"}]})},
        {
            "clusters/dev/vars.yaml": dump(obj("v1", "Secret", "vars", "flux-system", stringData={"PASSWORD": "hunter2"})),
            "apps/kustomization.yaml": kustomization("secret.yaml", "sops.yaml", "cm.yaml"),
            "apps/secret.yaml": dump(obj("v1", "Secret", "plain", "default", data={"key": "c2VjcmV0LXZhbHVl"}, stringData={"other": "plain-text"})),
            "apps/sops.yaml": dump(sops_secret),
            "apps/cm.yaml": dump(obj("v1", "ConfigMap", "app", "default", data={"password": "${PASSWORD}"})),
        },
    )
    files["clusters/dev/kustomization.yaml"] = kustomization("vars.yaml", "apps.yaml")
    return write_tree(root, files)


def _objects(text: str) -> dict[str, dict]:
    return {f"{d['kind']}/{d['metadata']['name']}": d for d in yaml.safe_load_all(text) if d}


def test_secret_values_are_masked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    repo = secrets_repo(tmp_path / "repo")
    assert main(["build", "--repo", str(repo), "--cluster", "dev", "--no-cache"]) == 0
    text = capsys.readouterr().out
    for secret in ("c2VjcmV0LXZhbHVl", "plain-text", "hunter2", "c2VjcmV0", "bWFj"):
        assert secret not in text
    objects = _objects(text)
    assert objects["Secret/plain"]["data"] == {"key": "**masked**"}
    assert objects["Secret/plain"]["stringData"] == {"other": "**masked**"}
    assert objects["Secret/encrypted"]["data"] == {"token": "ENC[**masked**]"}  # git has it SOPS-encrypted
    assert objects["Secret/encrypted"]["sops"]["age"] == [{"recipient": "age1xyz"}]
    assert objects["Secret/vars"]["stringData"] == {"PASSWORD": "**masked**"}
    assert objects["ConfigMap/app"]["data"] == {"password": "<masked:PASSWORD>"}  # substituted from a Secret


def test_show_secrets_prints_what_git_has(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    repo = secrets_repo(tmp_path / "repo")
    assert main(["build", "--repo", str(repo), "--cluster", "dev", "--no-cache", "--show-secrets"]) == 0
    objects = _objects(capsys.readouterr().out)
    assert objects["Secret/plain"]["data"] == {"key": "c2VjcmV0LXZhbHVl"}
    assert objects["Secret/plain"]["stringData"] == {"other": "plain-text"}
    assert objects["Secret/encrypted"]["data"] == {"token": SOPS_VALUE}  # never decrypted: the key is not in git
    assert objects["Secret/vars"]["stringData"] == {"PASSWORD": "hunter2"}


def test_a_failed_tier_exits_1_with_its_findings_on_stderr(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_tree(tmp_path, flux_repo(
        {"good": ks("good", "./good"), "bad": ks("bad", "./bad")},
        {
            "good/kustomization.yaml": kustomization("cm.yaml"),
            "good/cm.yaml": dump(obj("v1", "ConfigMap", "good", "default")),
            "bad/kustomization.yaml": kustomization("missing.yaml"),
        },
    ))
    output = tmp_path / "out.yaml"
    assert main(["build", "--repo", str(tmp_path), "--cluster", "dev", "--no-cache", "--output", str(output)]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    errors = captured.err.splitlines()
    assert errors and all(line.startswith("fluxwarden: error render-failed flux-system/bad: ") for line in errors)
    text = output.read_text()
    assert "# Kustomization flux-system/bad (path ./bad): failed to render" in text
    assert set(_objects(text)) == {"ConfigMap/good", "Kustomization/good", "Kustomization/bad"}
    # The good tier alone renders: exit 0.
    assert main(["build", "--repo", str(tmp_path), "--cluster", "dev", "--no-cache", "--tier", "good"]) == 0
    assert capsys.readouterr().err == ""


def test_a_tier_of_another_source_is_not_printed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_tree(tmp_path, flux_repo(
        {"ext": ks("ext", "./ext", source="other-repo"), "local": ks("local", "./local")},
        {"local/cm.yaml": dump(obj("v1", "ConfigMap", "x", "default"))},
    ))
    assert main(["build", "--repo", str(tmp_path), "--cluster", "dev", "--no-cache"]) == 0  # the cluster rendered
    captured = capsys.readouterr()
    assert "# Kustomization flux-system/ext (path ./ext): not rendered: it applies GitRepository/other-repo" in captured.out
    assert "fluxwarden: info not-rendered flux-system/ext" in captured.err
    assert main(["build", "--repo", str(tmp_path), "--cluster", "dev", "--no-cache", "--tier", "ext"]) == 1  # asked for, not there


def test_nothing_rendered_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_tree(tmp_path, {"clusters/dev/kustomization.yaml": kustomization()})
    assert main(["build", "--repo", str(tmp_path), "--cluster", "dev", "--no-cache"]) == 1
    assert "fluxwarden: error nothing-rendered: nothing of cluster dev" in capsys.readouterr().err
