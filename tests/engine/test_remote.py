"""Which clusters refuse remote bases (bot/engine/render/remote.py), read from git, and the one finding per tier."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.adapters.workspace import build_snapshot
from bot.engine.render.generate import RemoteEntry
from bot.engine.core.model import Severity, SourceRef, TierId, TierSpec
from bot.engine.render.remote import RemoteBasesRefused, no_remote_bases, remote_finding
from tests.fluxrepo import write_tree

PATCH = "patches:\n  - patch: |\n      - op: add\n        path: /spec/template/spec/containers/0/args/-\n        value: {value}\n    target: {{kind: Deployment, name: kustomize-controller}}\n"


@pytest.mark.parametrize(
    "text,refused",
    [
        (PATCH.format(value="--no-remote-bases=true"), True),
        (PATCH.format(value="--no-remote-bases"), True),
        (PATCH.format(value='"--no-remote-bases=false"'), False),
        ("# - --no-remote-bases=true\nresources: []\n", False),
        ("apiVersion: fluxcd.controlplane.io/v1\nkind: FluxInstance\nmetadata: {name: flux}\nspec:\n  cluster: {multitenant: true}\n", True),
        ("apiVersion: fluxcd.controlplane.io/v1\nkind: FluxInstance\nmetadata: {name: flux}\nspec:\n  cluster: {multitenant: false}\n", False),
    ],
)
def test_no_remote_bases_from_git(tmp_path: Path, text: str, refused: bool) -> None:
    snapshot = build_snapshot(write_tree(tmp_path / "repo", {"clusters/dev/flux-system/kustomization.yaml": text, "other/x.yaml": PATCH.format(value="--no-remote-bases")}), tmp_path / "snap")
    found = no_remote_bases(snapshot, "clusters/dev")
    assert found == (RemoteBasesRefused("clusters/dev/flux-system/kustomization.yaml") if refused else None)  # other clusters' files do not count


SPEC = TierSpec(TierId("flux-system", "crds"), "cluster/crds", SourceRef("GitRepository", "flux-system", "flux-system"))
FILE = RemoteEntry("cluster/crds/a/kustomization.yaml", "https://example.com/crds.yaml", "resources", False)
BASE = RemoteEntry("cluster/crds/b/kustomization.yaml", "github.com/org/repo//crd?ref=v1", "resources", True)


def test_remote_finding_is_one_info_listing_every_url() -> None:
    finding = remote_finding(SPEC, [FILE, BASE], None)
    assert (finding.check, finding.severity, finding.kustomization, finding.location.file) == ("remote-resource-not-fetched", Severity.INFO, SPEC.id, FILE.file)
    assert FILE.reference in finding.message and BASE.reference in finding.message and "not checked" in finding.message


def test_remote_finding_is_an_error_for_a_base_under_no_remote_bases() -> None:
    refused = RemoteBasesRefused("clusters/dev/flux-system/kustomization.yaml")
    assert remote_finding(SPEC, [FILE], refused).severity is Severity.INFO  # a single file is still fetched
    error = remote_finding(SPEC, [FILE, BASE], refused)
    assert error.severity is Severity.ERROR and BASE.reference in error.message and FILE.reference not in error.message and refused.source in error.message
