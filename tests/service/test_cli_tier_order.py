"""`fluxwarden tier-order [--repo DIR] [--fix]` on copies of examples/home-ops."""

from __future__ import annotations

import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from bot.service.cli import main
from tests.gitrepo import EXAMPLE, pre_fix

SCRIPT = "bootstrap/standup.sh"


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    dest = tmp_path / "home-ops"
    shutil.copytree(EXAMPLE, dest)
    return dest


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["tier-order", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_stale_order_is_printed_and_exits_1_without_touching_the_file(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = (repo / SCRIPT).read_bytes()
    code, out, err = run(capsys, "--repo", str(repo))
    assert code == 1 and err == ""
    assert "bootstrap/standup.sh TIER_ORDER is stale for the dependency graph of dev and prod" in out
    assert "platform-config-cdi is not listed; it depends on platform-config" in out
    assert "  platform-config-cdi    # added" in out
    assert "required by platform-config-cdi dependsOn platform-config (dev, prod)" in out
    assert "+  platform-config-cdi\n" in out  # the diff
    assert "run with --fix" in out
    assert (repo / SCRIPT).read_bytes() == before


def test_fix_edits_only_the_missing_line_and_check_is_then_clean(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = (repo / SCRIPT).read_text()
    mode = (repo / SCRIPT).stat().st_mode
    code, out, _ = run(capsys, "--repo", str(repo), "--fix")
    assert code == 0 and f"edited {SCRIPT}" in out
    after = (repo / SCRIPT).read_text()
    old_lines, new_lines = before.splitlines(), after.splitlines()
    assert len(new_lines) == len(old_lines) + 1
    index = new_lines.index("  platform-config-cdi")
    assert new_lines[index - 1].startswith("  platform-config ") and new_lines[:index] + new_lines[index + 1 :] == old_lines
    assert stat.S_IMODE((repo / SCRIPT).stat().st_mode) == stat.S_IMODE(mode)
    # Now right: exit 0, nothing printed as changed.
    code, out, _ = run(capsys, "--repo", str(repo))
    assert code == 0 and "is in dependency order for dev and prod" in out
    # And the precheck agrees, for both clusters.
    for cluster in ("dev", "prod"):
        code = main(["check", "--repo", str(repo), "--cluster", cluster, "--format", "json"])
        out, _ = capsys.readouterr()
        assert "tier-order-stale" not in out
        assert code == 0


def test_already_right_exits_0(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pre_fix(repo)  # before the CDI split the list was complete
    before = (repo / SCRIPT).read_bytes()
    code, out, _ = run(capsys, "--repo", str(repo), "--fix")
    assert code == 0
    assert out == "bootstrap/standup.sh TIER_ORDER is in dependency order for dev and prod:\n  platform platform-config apps apps-vms\n"
    assert (repo / SCRIPT).read_bytes() == before


def test_wrong_position_is_moved(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    script = repo / SCRIPT
    text = script.read_text()
    apps = "  apps              # plain workloads\n"
    script.write_text(text.replace(apps, "").replace("TIER_ORDER=(\n", "TIER_ORDER=(\n" + apps))
    code, out, _ = run(capsys, "--repo", str(repo), "--fix")
    assert code == 0
    assert "apps is listed before platform-config, which it depends on" in out
    assert "moves apps right after platform-config-cdi, required by apps dependsOn platform-config (dev, prod)" in out
    names = [line.split("#")[0].strip() for line in script.read_text().split("TIER_ORDER=(\n", 1)[1].split(")", 1)[0].splitlines()]
    assert names == ["platform", "platform-config", "platform-config-cdi", "apps", "apps-vms"]
    assert apps in script.read_text()  # the moved line kept its comment


def test_clusters_that_disagree_exit_2_with_one_line(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    disagree(repo)
    code, out, err = run(capsys, "--repo", str(repo), "--fix")
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("fluxwarden: error: no single tier order fits every cluster (dev, prod)")
    assert "apps dependsOn platform-config (dev)" in err and "platform-config dependsOn apps (prod)" in err


def test_tier_of_one_cluster_only(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (repo / "monitoring").mkdir()
    (repo / "monitoring/kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - namespace.yaml\n"
    )
    (repo / "monitoring/namespace.yaml").write_text("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: monitoring\n")
    (repo / "clusters/prod/monitoring.yaml").write_text(KUSTOMIZATION.format(name="monitoring", path="./monitoring", dep="platform"))
    kfile = repo / "clusters/prod/kustomization.yaml"
    kfile.write_text(kfile.read_text().replace("  - ../base\n", "  - ../base\n  - monitoring.yaml\n"))
    code, out, _ = run(capsys, "--repo", str(repo), "--fix")
    assert code == 0
    assert "adds monitoring right after platform, required by monitoring dependsOn platform (prod)" in out


def test_usage_errors_exit_2(repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "--repo", str(tmp_path / "missing"))
    assert code == 2 and err.strip().endswith("is not a directory") and err.count("\n") == 1
    (repo / ".fluxwarden.yaml").write_text("clusters:\n  dev: {path: clusters/dev}\n")
    code, _, err = run(capsys, "--repo", str(repo))
    assert code == 2 and "no tier order configured" in err
    with pytest.raises(SystemExit) as info:
        main(["tier-order", "--bogus"])
    assert info.value.code == 2
    assert capsys.readouterr().err.startswith("fluxwarden: error: unrecognized arguments")


def test_console_script_entry_point(repo: Path) -> None:
    """The installed `fluxwarden` runs it too (no traceback, exit 1 while stale)."""
    result = subprocess.run(
        [sys.executable, "-m", "bot.service.cli", "tier-order", "--repo", str(repo)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 1, result.stderr
    assert "platform-config-cdi" in result.stdout and result.stderr == ""


KUSTOMIZATION = """\
apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata:
  name: {name}
  namespace: flux-system
spec:
  dependsOn:
    - name: {dep}
  interval: 10m
  path: {path}
  prune: true
  sourceRef:
    kind: GitRepository
    name: flux-system
"""

PROD_DISAGREES = """\
  - target: {group: kustomize.toolkit.fluxcd.io, kind: Kustomization, name: platform-config}
    patch: |-
      - op: replace
        path: /spec/dependsOn
        value: [{name: platform}, {name: apps}]
  - target: {group: kustomize.toolkit.fluxcd.io, kind: Kustomization, name: apps}
    patch: |-
      - op: replace
        path: /spec/dependsOn
        value: [{name: platform}]
"""


def disagree(root: Path) -> None:
    """Make prod order apps before platform-config while dev keeps platform-config before apps."""
    kfile = root / "clusters/prod/kustomization.yaml"
    kfile.write_text(kfile.read_text().replace("patches:\n", "patches:\n" + PROD_DISAGREES))


def test_the_build_cache_is_used_as_check_uses_it(repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cache = tmp_path / "cache"
    first = run(capsys, "--repo", str(repo), "--cache-dir", str(cache))
    written = sorted(p.relative_to(cache) for p in cache.rglob("*") if p.is_file())
    assert written, "tier-order wrote nothing to its build cache"
    assert run(capsys, "--repo", str(repo), "--cache-dir", str(cache)) == first  # a warm run says the same
    empty = tmp_path / "unused"
    run(capsys, "--repo", str(repo), "--no-cache", "--cache-dir", str(empty))
    assert not empty.exists()
