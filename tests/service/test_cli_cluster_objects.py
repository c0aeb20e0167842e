"""`fluxwarden check --live` reads the substituteFrom ConfigMaps/Secrets git lacks from the cluster (the loopback fake
Kubernetes API, real HTTP); without `--live`, `clusters.<name>.cluster_objects` declares them. A Secret's value never shows."""

from __future__ import annotations

import base64
import json
import subprocess
from pathlib import Path

import pytest

from bot.service.cli import main
from tests.fakes.kube import FakeKube
from tests.fluxrepo import dump, flux_repo, ks, kustomization, obj, write_tree

CANARY = "canary-s3cr3t-9f1c2e"  # a Secret value on the cluster: it must appear in no output
SOURCES = [{"kind": "ConfigMap", "name": "cluster-vars"}, {"kind": "Secret", "name": "cluster-secrets"}]
SUBSTITUTION_IDS = ("undefined-variable", "literal-token", "substitution-source-external", "substitution-source-missing")


def _repo(root: Path, config: str | None = None, sources: list[dict] = SOURCES) -> Path:
    files = flux_repo(
        {"apps": ks("apps", "./apps", post_build={"substituteFrom": sources})},
        {
            "apps/kustomization.yaml": kustomization("app.yaml"),
            "apps/app.yaml": dump(obj("v1", "ConfigMap", "app", "default", data={"host": "web.${DOMAIN}", "token": "${TOKEN}"})),
        },
    )
    if config is not None:
        files[".fluxwarden.yaml"] = config
    return write_tree(root, files)


def _cluster(fake: FakeKube, *, secret: bool = True) -> None:
    fake.add(obj("v1", "ConfigMap", "cluster-vars", "flux-system", data={"DOMAIN": "example.org"}))
    if secret:
        fake.add(obj("v1", "Secret", "cluster-secrets", "flux-system", data={"TOKEN": base64.b64encode(CANARY.encode()).decode()}))


def _ids(report: dict) -> set[str]:
    return {f["check"] for f in report["findings"]}


def test_live_reads_the_sources_git_lacks_and_never_shows_the_secret(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    repo = _repo(tmp_path / "repo")
    fake = FakeKube()
    _cluster(fake)
    with fake.start_in_thread():
        kubeconfig = fake.kubeconfig(tmp_path / "kubeconfig")
        outputs = []
        for fmt in ("json", "text", "markdown"):
            main(["check", "--repo", str(repo), "--cluster", "dev", "--no-cache", "--live", "--kubeconfig", str(kubeconfig), "--format", fmt])
            out, err = capsys.readouterr()
            outputs.append(out + err)
    report = json.loads(outputs[0])
    assert not _ids(report) & set(SUBSTITUTION_IDS), report["findings"]
    for text in outputs:
        assert CANARY not in text and base64.b64encode(CANARY.encode()).decode() not in text
    # Read by name, once per run (three runs), GET only: the two sources, never a list of ConfigMaps or Secrets.
    reads = [p for m, p, _ in fake.requests if "/configmaps" in p or "/secrets" in p]
    assert sorted(set(reads)) == ["/api/v1/namespaces/flux-system/configmaps/cluster-vars", "/api/v1/namespaces/flux-system/secrets/cluster-secrets"]
    assert len(reads) == 6
    assert {m for m, _, _ in fake.requests} == {"GET"}


def test_without_live_the_tier_is_open(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    repo = _repo(tmp_path / "repo")
    main(["check", "--repo", str(repo), "--cluster", "dev", "--no-cache", "--format", "json"])
    assert "substitution-source-external" in _ids(json.loads(capsys.readouterr().out))  # today's behaviour, unchanged


def test_a_source_missing_on_the_cluster_is_an_error_unless_optional(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fake = FakeKube()
    _cluster(fake, secret=False)
    optional = [SOURCES[0], {**SOURCES[1], "optional": True}]
    with fake.start_in_thread():
        kubeconfig = fake.kubeconfig(tmp_path / "kubeconfig")
        found = {}
        for name, sources in (("required", SOURCES), ("optional", optional)):
            repo = _repo(tmp_path / name, sources=sources)
            main(["check", "--repo", str(repo), "--cluster", "dev", "--no-cache", "--live", "--kubeconfig", str(kubeconfig), "--format", "json"])
            found[name] = json.loads(capsys.readouterr().out)
    [missing] = [f for f in found["required"]["findings"] if f["check"] == "substitution-source-missing"]
    assert missing["severity"] == "error" and "Secret/flux-system/cluster-secrets" in missing["message"]
    # Optional and absent: Flux skips it, so `${TOKEN}` is a known-undefined variable, not an open set.
    assert "substitution-source-missing" not in _ids(found["optional"]) and "substitution-source-external" not in _ids(found["optional"])


def test_a_forbidden_read_keeps_the_tier_open(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    repo = _repo(tmp_path / "repo")
    fake = FakeKube()
    _cluster(fake)
    fake.inject(r"/secrets/", status=403, times=None)
    with fake.start_in_thread():
        kubeconfig = fake.kubeconfig(tmp_path / "kubeconfig")
        main(["check", "--repo", str(repo), "--cluster", "dev", "--no-cache", "--live", "--kubeconfig", str(kubeconfig), "--format", "json"])
    out = capsys.readouterr().out
    [external] = [f for f in json.loads(out)["findings"] if f["check"] == "substitution-source-external"]
    assert "could not be read from the cluster" in external["message"] and "403" in external["message"]
    assert CANARY not in out


def test_a_declared_file_provides_them_without_live(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = "clusters:\n  dev:\n    path: clusters/dev\n    cluster_objects: [cluster-only]\n"
    repo = _repo(tmp_path / "repo", config)
    write_tree(repo, {"cluster-only/objects.yaml": dump(
        obj("v1", "ConfigMap", "cluster-vars", "flux-system", data={"DOMAIN": "example.org"}),
        obj("v1", "Secret", "cluster-secrets", "flux-system", stringData={"TOKEN": CANARY}),
    )})
    main(["check", "--repo", str(repo), "--cluster", "dev", "--no-cache", "--format", "json"])
    out = capsys.readouterr().out
    assert not _ids(json.loads(out)) & set(SUBSTITUTION_IDS)
    main(["build", "--repo", str(repo), "--cluster", "dev", "--no-cache"])
    built = capsys.readouterr().out
    assert "host: web.example.org" in built and "token: <masked:TOKEN>" in built
    assert CANARY not in out + built


def test_a_review_with_live_never_shows_the_secret(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Review diffs and the comment text (markdown, as the bot posts it) show the Secret's variable masked."""
    repo = _repo(tmp_path / "repo")
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q", "-b", "main"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "base"], check=True)
    write_tree(repo, {"apps/app.yaml": dump(obj("v1", "ConfigMap", "app", "default", data={"host": "api.${DOMAIN}", "token": "v2-${TOKEN}"}))})
    fake = FakeKube()
    _cluster(fake)
    with fake.start_in_thread():
        kubeconfig = fake.kubeconfig(tmp_path / "kubeconfig")
        texts = []
        for fmt in ("markdown", "json", "text"):
            main(["check", "--repo", str(repo), "--cluster", "dev", "--no-cache", "--base", "main", "--live", "--kubeconfig", str(kubeconfig), "--format", fmt])
            out, err = capsys.readouterr()
            texts.append(out + err)
    assert "api.example.org" in texts[0] and "v2-<masked:TOKEN>" in texts[0]
    for text in texts:
        assert CANARY not in text
