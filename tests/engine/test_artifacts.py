"""ExternalArtifacts of an ArtifactGenerator mapped onto repository paths (bot/engine/render/artifacts.py), in memory.

The copy rules are source-watcher's (internal/builder/builder.go, its builder_test.go cases): a directory,
with or without a trailing slash, lands at `to/<basename>`; `dir/**` puts dir's contents at `to`; a path
after `@alias/` is relative to the source's artifact, which for an OCI artifact of `kubernetes/` is `kubernetes/`.
"""

from __future__ import annotations

from typing import Any

import pytest

from bot.engine.render.artifacts import Artifact, Copy, Placement, generated_artifacts, place, unreadable
from bot.engine.render.config import RepoConfig
from bot.engine.core.model import Manifest, ObjectRef, SourceRef
from tests.engine.builders import MemoryTree

FLUX = "flux-system"
OCI = SourceRef("OCIRepository", FLUX, FLUX)
GIT = SourceRef("GitRepository", FLUX, FLUX)
# xunholy/k8s-gitops: CI pushes ./kubernetes as the OCIRepository the cluster syncs
SUBDIR = RepoConfig(sources=(GIT, OCI), source_paths=((OCI, "kubernetes"),))
TREE = MemoryTree({
    "kubernetes/apps/base/ai/n8n/app/kustomization.yaml": "resources: [cm.yaml]\n",
    "kubernetes/apps/base/ai/n8n/app/cm.yaml": "kind: ConfigMap\n",
    "kubernetes/apps/base/ai/n8n/ks.yaml": "kind: Kustomization\n",
    "kubernetes/components/common/kustomization.yaml": "kind: Component\n",
    "apps/base/ai/n8n/app/kustomization.yaml": "resources: []\n",  # a same-named path at the repository root
    "kubernetes/apps/base/ai/n8n/app/values.yaml": "a: 1\n",
})


def generator(source: SourceRef, *copies: dict[str, Any], **spec: Any) -> Manifest:
    body = {
        "apiVersion": "source.extensions.fluxcd.io/v1beta1", "kind": "ArtifactGenerator", "metadata": {"name": "gen", "namespace": FLUX},
        "spec": {"sources": [{"alias": "repo", "kind": source.kind, "name": source.name}], "artifacts": [{"name": "app", "copy": list(copies)}], **spec},
    }
    return Manifest(ObjectRef("source.extensions.fluxcd.io/v1beta1", "ArtifactGenerator", FLUX, "gen"), body)


def mapped(source: SourceRef, *copies: tuple[str, str], config: RepoConfig = SUBDIR) -> Artifact:
    gen = generator(source, *({"from": f, "to": t} for f, t in copies))
    return generated_artifacts(gen, config.source_root, TREE)[(FLUX, "app")]


@pytest.mark.parametrize(
    ("source", "src", "dest", "copy"),
    [
        # the alias names the OCI artifact of kubernetes/: its paths are under kubernetes/
        (OCI, "@repo/apps/base/ai/n8n/app/", "@artifact/apps/base/ai/n8n/app/", Copy("kubernetes/apps/base/ai/n8n/app", "apps/base/ai/n8n/app/app")),
        (OCI, "@repo/apps/base/ai/n8n/app", "@artifact/apps/base/ai/n8n/app", Copy("kubernetes/apps/base/ai/n8n/app", "apps/base/ai/n8n/app/app")),
        (OCI, "@repo/apps/base/ai/n8n/app/", "@artifact/", Copy("kubernetes/apps/base/ai/n8n/app", "app")),
        (OCI, "@repo/apps/base/ai/n8n/app/**", "@artifact/", Copy("kubernetes/apps/base/ai/n8n/app", "")),
        (OCI, "@repo/**", "@artifact/", Copy("kubernetes", "")),
        (OCI, "@repo/", "@artifact/", Copy("kubernetes", "")),  # the source root: its contents, no basename
        (OCI, "@repo/apps/base/ai/n8n/app/values.yaml", "@artifact/x/", Copy("kubernetes/apps/base/ai/n8n/app/values.yaml", "x/values.yaml", directory=False)),
        # the repository itself (GitRepository flux-system): paths from the root
        (GIT, "@repo/apps/base/ai/n8n/app/", "@artifact/", Copy("apps/base/ai/n8n/app", "app")),
    ],
)
def test_copy_lands_where_source_watcher_puts_it(source: SourceRef, src: str, dest: str, copy: Copy) -> None:
    assert mapped(source, (src, dest)) == Artifact("ArtifactGenerator/flux-system/gen", (copy,))


@pytest.mark.parametrize(
    ("src", "problem"),
    [
        ("@repo/../apps/base/ai/n8n/app/", "copies @repo/../apps/base/ai/n8n/app/, outside its source"),  # os.Root: no climbing out
        ("@repo/apps/*/ai/**", "copies the files matching @repo/apps/*/ai/**"),
        ("@other/apps/", "copies from alias @other, which it does not define"),
    ],
)
def test_copies_that_are_not_a_plain_copy_of_this_repo(src: str, problem: str) -> None:
    artifact = mapped(OCI, (src, "@artifact/"))
    assert artifact.copies == () and artifact.problem is not None and problem in artifact.problem


def test_a_source_that_is_not_this_repository() -> None:
    artifact = mapped(SourceRef("OCIRepository", "elsewhere", FLUX), ("@repo/apps/", "@artifact/"))
    assert artifact.problem == "ArtifactGenerator/flux-system/gen copies @repo/apps/ from a source that is not this repository"


N8N = "kubernetes/apps/base/ai/n8n/app"


@pytest.mark.parametrize(
    ("copies", "path", "placement"),
    [
        # xunholy: `@repo/apps/x/app/` → `@artifact/apps/x/app/` lands at apps/x/app/app; the Kustomization applies
        # ./apps/x/app, which has no kustomization file: the generated one builds the copied directory
        ([Copy(N8N, "apps/base/ai/n8n/app/app")], "apps/base/ai/n8n/app", Placement(N8N, (N8N,), N8N, "apps/base/ai/n8n/app/app")),
        ([Copy(N8N, "app")], "", Placement(N8N, (N8N,), N8N, "app")),  # path ./ above `to: @artifact/`
        ([Copy(N8N, "")], "", Placement(N8N, (N8N,), N8N)),  # `dir/**` → `@artifact/`, path ./
        ([Copy("kubernetes", "")], "apps/base/ai/n8n/app", Placement(N8N, ("kubernetes",), "kubernetes")),
    ],
)
def test_placement(copies: list[Copy], path: str, placement: Placement) -> None:
    assert place(Artifact("G", tuple(copies)), path) == placement


@pytest.mark.parametrize(
    ("copies", "path", "components", "problem"),
    [
        ([Copy(N8N, "a/app"), Copy("kubernetes/components/common", "a/common")], "a", (), "G puts ./a/app, ./a/common below ./a"),
        ([Copy(N8N + "/values.yaml", "a/values.yaml", directory=False)], "a", (), "G puts only the file kubernetes/apps/base/ai/n8n/app/values.yaml below ./a"),
        ([Copy(N8N, "a/app")], "a", ("../components/common",), "G holds only ./a/app below ./a, where the Kustomization's components"),
        ([Copy(N8N, "a/app")], "b", (), "G copies nothing to ./b"),
        # inside a copy that is not at its repository place: the rest of the artifact is not the repository's
        ([Copy(N8N, "apps/base/ai/n8n/app/app")], "apps/base/ai/n8n/app/app", (), "G puts kubernetes/apps/base/ai/n8n/app at ./apps/base/ai/n8n/app/app, elsewhere"),
        # a later copy into the copied tree from elsewhere: not the repository's directory any more
        ([Copy(N8N, "a/app"), Copy("kubernetes/components/common", "a/app/common")], "a", (), "G puts ./a/app, ./a/app/common below ./a"),
    ],
)
def test_placement_refused(copies: list[Copy], path: str, components: tuple[str, ...], problem: str) -> None:
    placed = place(Artifact("G", tuple(copies)), path, components)
    assert isinstance(placed, str) and placed.startswith(problem)


def test_what_a_build_above_the_copy_reads_outside_it_is_absent() -> None:
    """The artifact holds the copy at a/app only: `../../components/common` of the copied directory is not in it."""
    artifact = Artifact("G", (Copy(N8N, "a/app"),))
    placement = place(artifact, "a")
    assert isinstance(placement, Placement)
    inputs = frozenset({N8N + "/kustomization.yaml", N8N + "/cm.yaml", "kubernetes/components/common/kustomization.yaml"})
    assert unreadable(artifact, placement, inputs) == (["kubernetes/components/common/kustomization.yaml"], [])


def test_what_a_build_reads_is_mapped_relative_to_the_copy() -> None:
    """A copy of kubernetes/apps at apps, and of another directory at components: the build's `../components` reads
    the artifact's components, copied from elsewhere."""
    artifact = Artifact("G", (Copy("kubernetes/apps", "apps"), Copy("kubernetes/other", "components")))
    placement = place(artifact, "apps/base/ai/n8n/app")
    assert isinstance(placement, Placement) and placement.path == N8N
    inputs = frozenset({N8N + "/kustomization.yaml", "kubernetes/components/common/kustomization.yaml", "kubernetes/x.yaml"})
    assert unreadable(artifact, placement, inputs) == (["kubernetes/x.yaml"], ["kubernetes/components/common/kustomization.yaml"])


def test_source_root() -> None:
    assert (SUBDIR.source_root(OCI), SUBDIR.source_root(GIT), SUBDIR.source_root(SourceRef("OCIRepository", "x", FLUX))) == ("kubernetes", "", None)
