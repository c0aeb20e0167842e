"""What kustomize-controller builds for a tier: no load restrictor inside the repository, and the spec merged
into the path's own kustomization file (fluxcd/pkg kustomize_generator.go GenerateManifest), not an overlay.

kustomize runs for real (the venv's kubectl) on small repositories written here.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from bot.adapters import git as gitrepo
from bot.engine.render.config import load_repo_config
from bot.engine.render.generate import controller_file_empty, flux_kustomization
from bot.adapters.kustomize import KustomizeBinary, locate_kustomize
from bot.engine.core.model import Severity, TierId, TierSpec, SourceRef
from bot.engine.render.rendered import ClusterRender
from bot.pipeline.session import Session
from tests.fluxrepo import dump, flux_repo, ks, obj, write_tree
from tests.gitrepo import init_repo
from tests.pipeline.test_render import app_repo, by_ref, cm, errors, logging_binary, render

FLUX = "flux-system"
APP = TierId(FLUX, "app")
MARKER = "OUTSIDE-THE-REPO-5b1c0d-MARKER"
OWNER = {"kustomize.toolkit.fluxcd.io/name": "app", "kustomize.toolkit.fluxcd.io/namespace": FLUX}


@pytest.fixture(scope="module")
def binary() -> KustomizeBinary:
    return locate_kustomize()


def component(*resources: str, extra: str = "") -> str:
    return "apiVersion: kustomize.config.k8s.io/v1alpha1\nkind: Component\nresources: [" + ", ".join(resources) + "]\n" + extra


# == 1. Load restrictions: the repository root is the boundary, not the kustomization's directory ===========

# A kustomization under apps/team/app reaching two levels up for a resource and a replacements file.
OUTSIDE_ITS_DIRECTORY = flux_repo(
    {"app": ks("app", "./apps/team/app")},
    {
        "apps/team/app/kustomization.yaml": (
            "resources: [cm.yaml, ../../../components/x.yaml]\n"
            "replacements:\n- path: ../../../components/replacements/copy.yaml\n"
            "configMapGenerator:\n- name: gen\n  files: [k=../../../components/files/data.txt]\n"
        ),
        "apps/team/app/cm.yaml": dump(cm("cm", "default", data={"copied": "not yet"})),
        "components/x.yaml": dump(cm("x", "default", data={"v": "from-x"})),
        "components/replacements/copy.yaml": yaml.safe_dump(
            {
                "source": {"kind": "ConfigMap", "name": "x", "fieldPath": "data.v"},
                "targets": [{"select": {"kind": "ConfigMap", "name": "cm"}, "fieldPaths": ["data.copied"]}],
            }
        ),
        "components/files/data.txt": "from-a-file\n",
    },
)


def _assert_outside_its_directory(cr: ClusterRender) -> None:
    assert errors(cr) == []
    objects = by_ref(cr, APP)
    assert objects["ConfigMap/default/cm"].body["data"] == {"copied": "from-x"}
    assert objects["ConfigMap/default/x"].origin.file == "components/x.yaml"
    [generated] = [m for m in objects.values() if m.ref.name.startswith("gen-")]
    assert generated.body["data"] == {"k": "from-a-file\n"}
    assert generated.origin.file == "apps/team/app/kustomization.yaml"


def test_references_outside_the_kustomization_directory_build(tmp_path: Path, binary: KustomizeBinary) -> None:
    _, cr = render(tmp_path, OUTSIDE_ITS_DIRECTORY, binary)
    _assert_outside_its_directory(cr)


def test_a_commit_materialises_the_files_outside_the_directory(tmp_path: Path, binary: KustomizeBinary) -> None:
    """A commit is written to disk only as builds need it: the files a tier reaches up to are written too."""
    root = write_tree(tmp_path / "repo", OUTSIDE_ITS_DIRECTORY)
    sha = init_repo(root).head.commit.hexsha
    with gitrepo.commit_snapshot(root, sha, tmp_path / "lazy") as (_, snapshot):
        assert snapshot.tree is not None
        cr = Session(snapshot, load_repo_config(None), binary).renderer().render_cluster("dev", "clusters/dev")
        _assert_outside_its_directory(cr)
        assert (snapshot.root / "components/replacements/copy.yaml").is_file()


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Files outside any repository, each carrying the marker: what a PR must never make the bot read."""
    base = tmp_path_factory.mktemp("outside")
    (base / "secret.yaml").write_text(dump(cm("stolen", data={"m": MARKER})))
    (base / "sec:ret.yaml").write_text(dump(cm("stolen", data={"m": MARKER})))
    (base / "secret.txt").write_text(MARKER)
    (base / "replace.yaml").write_text(f"source: {{kind: ConfigMap, name: a, fieldPath: data.x}}\ntargets: []\n# {MARKER}\n")
    (base / "dir").mkdir()
    (base / "dir/x.yaml").write_text(dump(cm("stolen-dir", data={"m": MARKER})))
    (base / "dir/kustomization.yaml").write_text("resources: [x.yaml]\n")
    return base


CLIMB = "../" * 40  # from anywhere in a test repository up to `/`
DEEP = "d/" * 45  # deeper than CLIMB: a path that climbs 40 levels from here stays inside, lexically


def _k(text: str) -> dict[str, str]:
    return {"app/a.yaml": dump(cm("a", data={"x": "1"})), "app/kustomization.yaml": "resources: [a.yaml]\n" + text}


# id → (app files, symlinks (repo path → target), the words of the finding). "{host}" is the outside directory,
# "{hostrel}" the same without its leading `/`.
UNSAFE_CASES = {
    "resource-dotdot-out": ({**_k(""), "app/kustomization.yaml": f"resources: [a.yaml, {CLIMB}{{hostrel}}/secret.yaml]\n"}, {}, "climbs out"),
    "resource-absolute": (_k("crds: ['{host}/secret.yaml']\n"), {}, "absolute path"),
    "symlink-file-out": (_k("patches:\n- path: s.yaml\n"), {"app/s.yaml": "{host}/secret.yaml"}, "symlink"),
    "symlink-dir-out": (_k("components: [d]\n"), {"app/d": "{host}/dir"}, "symlink"),
    "file-below-a-symlinked-dir-out": (_k("configMapGenerator:\n- name: g\n  files: [d/x.yaml]\n"), {"app/d": "{host}/dir"}, "symlink"),
    "generator-key-file-out": (_k(f"secretGenerator:\n- name: g\n  files: [k={CLIMB}{{hostrel}}/secret.txt]\n"), {}, "climbs out"),
    "generator-envs-out": (_k(f"configMapGenerator:\n- name: g\n  envs: [{CLIMB}{{hostrel}}/secret.txt]\n"), {}, "climbs out"),
    "replacements-out": (_k(f"replacements:\n- path: {CLIMB}{{hostrel}}/replace.yaml\n"), {}, "climbs out"),
    "openapi-out": (_k("openapi:\n  path: '{host}/secret.yaml'\n"), {}, "absolute path"),
    "configurations-out": (_k(f"configurations: [{CLIMB}{{hostrel}}/secret.yaml]\n"), {}, "climbs out"),
    # kustomize reads a patchesStrategicMerge entry that does not parse as YAML as a file, colon or not
    "psm-entry-with-colon-out": (_k(f"patchesStrategicMerge: ['{CLIMB}{{hostrel}}/sec:ret.yaml']\n"), {}, "climbs out"),
    # kustomize decodes field names case-insensitively (Go encoding/json), in a base as in the root
    "field-name-case-in-a-base": (
        {**_k(""), "app/kustomization.yaml": "resources: [a.yaml, ../base]\n", "base/kustomization.yaml": "Resources: ['{host}/secret.yaml']\n"},
        {},
        "absolute path",
    ),
    "nested-field-name-case": (_k(f"patches:\n- PATH: {CLIMB}{{hostrel}}/secret.yaml\n"), {}, "climbs out"),
    # a builtin plugin reads its files relative to the kustomization that lists it
    "plugin-file-path-out": (
        {**_k("transformers: [t.yaml]\n"), "app/t.yaml": f"apiVersion: builtin\nkind: PatchTransformer\nmetadata: {{name: t}}\npath: {CLIMB}{{hostrel}}/secret.yaml\n"},
        {},
        "climbs out",
    ),
    "plugin-inline-generator-out": (
        _k("generators:\n- |\n  apiVersion: builtin\n  kind: ConfigMapGenerator\n  metadata: {name: g}\n  files: ['{host}/secret.txt']\n"),
        {},
        "absolute path",
    ),
    "plugin-dir-with-patches": (
        {
            **_k("transformers: [../plugins]\n"),
            "plugins/kustomization.yaml": "resources: [t.yaml]\npatches:\n- patch: '[{op: add, path: /path, value: x}]'\n  target: {kind: PatchTransformer}\n",
            "plugins/t.yaml": "apiVersion: builtin\nkind: PatchTransformer\nmetadata: {name: t}\npatch: '[]'\n",
        },
        {},
        "cannot vet",
    ),
    # Inside the repository lexically (d/…/link/../…), outside from where the directory really is: kustomize
    # loads a directory at its symlink-free path, so `t`'s references count from `t`.
    "symlinked-dir-climbs-from-its-real-place": (
        {**_k(f"components: [../{DEEP}link]\n"), "t/kustomization.yaml": f"apiVersion: kustomize.config.k8s.io/v1alpha1\nkind: Component\nresources: [{CLIMB}{{hostrel}}/secret.yaml]\n"},
        {f"{DEEP}link": "../" * 45 + "t"},
        "climbs out",
    ),
}


def _fill(value: Any, host: Path) -> Any:
    if isinstance(value, str):
        return value.replace("{hostrel}", str(host).lstrip("/")).replace("{host}", str(host))
    return {_fill(k, host): _fill(v, host) for k, v in value.items()}


@pytest.mark.parametrize("case", list(UNSAFE_CASES))
def test_a_file_outside_the_repository_is_refused_before_kustomize_runs(tmp_path: Path, binary: KustomizeBinary, host: Path, case: str) -> None:
    files, links, words = (_fill(part, host) if isinstance(part, dict) else part for part in UNSAFE_CASES[case])
    logged, log = logging_binary(tmp_path, binary)
    _, cr = render(tmp_path, app_repo(files), logged, links=links)
    [finding] = [f for f in cr.findings if f.kustomization == APP]
    assert (finding.check, finding.severity) == ("unsafe-path", Severity.ERROR), finding
    assert words in finding.message, finding.message
    assert cr.tiers[APP].manifests == ()
    assert len(log.read_text().split()) == 1, "kustomize ran for the refused tier (only the entry may build)"
    shown = json.dumps([f.to_json() for f in cr.findings]) + json.dumps([m.body for _, m in cr.manifests()], default=str)
    assert MARKER not in shown


def test_a_symlinked_directory_inside_builds_from_its_real_place(tmp_path: Path, binary: KustomizeBinary) -> None:
    """The safe twin of the case above: `../shared` counts from the linked directory's real place."""
    files = app_repo(
        {
            "app/kustomization.yaml": "resources: [linked]\n",
            "base/kustomization.yaml": "resources: [../shared/s.yaml]\n",
            "shared/s.yaml": dump(cm("shared", data={"from": "shared"})),
        }
    )
    _, cr = render(tmp_path, files, binary, links={"app/linked": "../base"})
    assert errors(cr) == []
    assert by_ref(cr)["ConfigMap/shared"].body["data"] == {"from": "shared"}


# == 9. The spec merged into the path's own kustomization, as GenerateManifest does ==========================

EXTRA = {"components/extra/kustomization.yaml": component("c.yaml"), "components/extra/c.yaml": dump(cm("fromcomp", data={"c": "1"}))}


def test_a_spec_component_is_part_of_the_kustomization(tmp_path: Path, binary: KustomizeBinary) -> None:
    """Its ConfigMap gets the file's `namespace` and `labels`: the component joins that kustomization."""
    files = app_repo(
        {
            **EXTRA,
            "app/kustomization.yaml": "namespace: team\nlabels:\n- pairs: {team: a}\nresources: [cm.yaml]\n",
            "app/cm.yaml": dump(cm("cm")),
        },
        components=["../components/extra"],
    )
    _, cr = render(tmp_path, files, binary)
    assert errors(cr) == []
    fromcomp = by_ref(cr)["ConfigMap/team/fromcomp"]
    assert fromcomp.body["metadata"]["labels"] == {"team": "a", **OWNER}
    assert fromcomp.origin.file == "components/extra/c.yaml"


def test_spec_name_prefix_replaces_the_files(tmp_path: Path, binary: KustomizeBinary) -> None:
    files = app_repo({"app/kustomization.yaml": "namePrefix: inner-\nresources: [cm.yaml]\n", "app/cm.yaml": dump(cm("cm", "default"))}, namePrefix="outer-")
    _, cr = render(tmp_path, files, binary)
    assert errors(cr) == []
    assert set(by_ref(cr)) == {"ConfigMap/default/outer-cm"}


DIGEST = "sha256:" + "a" * 64
DEPLOY = dump(
    obj(
        "apps/v1",
        "Deployment",
        "web",
        "default",
        spec={
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "nginx:1.0"}]}},
        },
    )
)
IMAGE_CASES = [
    # spec newTag over the file's newName + digest: the name stays, tag and digest are replaced as a unit
    pytest.param({"name": "nginx", "newName": "registry.example/nginx", "digest": DIGEST}, {"name": "nginx", "newTag": "2.0"}, "registry.example/nginx:2.0", id="tag-over-name-and-digest"),
    pytest.param({"name": "nginx", "newTag": "1.5"}, {"name": "nginx", "newName": "mirror.example/nginx"}, "mirror.example/nginx:1.5", id="name-keeps-the-files-tag"),
    pytest.param({"name": "nginx", "newTag": "1.5"}, {"name": "nginx", "digest": DIGEST}, f"nginx@{DIGEST}", id="digest-clears-the-files-tag"),
    pytest.param({"name": "redis", "newTag": "7"}, {"name": "nginx", "newTag": "3"}, "nginx:3", id="another-name-is-added"),
    # written quoted: go-yaml v2 reads a plain 1234e56 as a number, and kustomize refuses a number for a tag
    pytest.param({"name": "nginx", "newTag": "1.5"}, {"name": "nginx", "newTag": "1234e56"}, "nginx:1234e56", id="tag-go-yaml-reads-as-a-number"),
]


@pytest.mark.parametrize("written,spec,image", IMAGE_CASES)
def test_spec_images_merge_by_name(tmp_path: Path, binary: KustomizeBinary, written: dict[str, str], spec: dict[str, str], image: str) -> None:
    text = yaml.safe_dump({"resources": ["deploy.yaml"], "images": [written]})
    files = app_repo({"app/kustomization.yaml": text, "app/deploy.yaml": DEPLOY}, images=[spec])
    files["clusters/dev/app.yaml"] = files["clusters/dev/app.yaml"].replace("newTag: 1234e56", "newTag: '1234e56'")  # as the API server has it
    _, cr = render(tmp_path, files, binary)
    assert errors(cr) == []
    assert by_ref(cr)["Deployment/default/web"].body["spec"]["template"]["spec"]["containers"][0]["image"] == image


def test_the_files_patches_apply_to_what_a_spec_component_adds(tmp_path: Path, binary: KustomizeBinary) -> None:
    """A patchesStrategicMerge of the path patching an object that only a Flux spec.components entry adds
    (mirceanton/home-ops apps/media/immich/app): one kustomization, so the patch finds it."""
    patch = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: fromcomp\ndata:\n  patched: 'yes'\n"
    files = app_repo(
        {
            **EXTRA,
            "app/kustomization.yaml": "resources: [cm.yaml]\npatchesStrategicMerge: [./patches/p.yaml]\n",
            "app/cm.yaml": dump(cm("cm")),
            "app/patches/p.yaml": patch,
        },
        components=["../components/extra"],
    )
    _, cr = render(tmp_path, files, binary)
    assert errors(cr) == []
    assert by_ref(cr)["ConfigMap/fromcomp"].body["data"] == {"c": "1", "patched": "yes"}


def test_the_spec_patches_follow_the_files(tmp_path: Path, binary: KustomizeBinary) -> None:
    """Appended to the file's patches: the spec's runs last, on what the file's made."""
    files = app_repo(
        {
            "app/kustomization.yaml": "resources: [cm.yaml]\npatches:\n- patch: '[{\"op\": \"replace\", \"path\": \"/data/v\", \"value\": \"file\"}, {\"op\": \"add\", \"path\": \"/data/f\", \"value\": \"file\"}]'\n  target: {kind: ConfigMap}\n",
            "app/cm.yaml": dump(cm("cm", data={"v": "written"})),
        },
        patches=[{"patch": "- op: replace\n  path: /data/v\n  value: spec\n", "target": {"kind": "ConfigMap", "name": "cm"}}],
    )
    _, cr = render(tmp_path, files, binary)
    assert errors(cr) == []
    assert by_ref(cr)["ConfigMap/cm"].body["data"] == {"v": "spec", "f": "file"}


def test_origins_of_component_and_generated_objects(tmp_path: Path, binary: KustomizeBinary) -> None:
    files = app_repo(
        {
            "components/gen/kustomization.yaml": component(extra="configMapGenerator:\n- name: from-comp-gen\n  literals: [a=b]\n"),
            **EXTRA,
            "app/kustomization.yml": "resources: [cm.yaml]\nconfigMapGenerator:\n- name: from-gen\n  literals: [a=b]\n",
            "app/cm.yaml": dump(cm("cm")),
        },
        components=["../components/extra", "../components/gen"],
    )
    renderer, cr = render(tmp_path, files, binary)
    assert errors(cr) == []
    origins = {m.ref.name.rsplit("-", 1)[0] if "gen-" in m.ref.name else m.ref.name: m.origin.file for m in cr.tiers[APP].manifests}
    assert origins == {
        "cm": "app/cm.yaml",
        "fromcomp": "components/extra/c.yaml",
        "from-gen": "app/kustomization.yml",
        "from-comp-gen": "components/gen/kustomization.yaml",
    }
    assert renderer.locate(by_ref(cr)["ConfigMap/cm"]).line == 1


def test_fields_kustomize_alone_refuses_are_dropped_as_flux_drops_them(tmp_path: Path, binary: KustomizeBinary) -> None:
    """The controller reads the file into kustomize's type and writes it back: unknown keys are gone
    (kustomize alone fails with `json: unknown field`); scalars keep their text and type."""
    text = "Resources: [cm.yaml]\nnotAField: {x: 1}\ncommonAnnotations: {version: '1.10', b: 'yes'}\nreplicas: [{name: web, count: 3}]\n"
    files = app_repo({"app/kustomization.yaml": text.replace("[cm.yaml]", "[cm.yaml, deploy.yaml]"), "app/cm.yaml": dump(cm("cm")), "app/deploy.yaml": DEPLOY})
    _, cr = render(tmp_path, files, binary)
    assert errors(cr) == []
    assert by_ref(cr)["ConfigMap/cm"].body["metadata"]["annotations"] == {"version": "1.10", "b": "yes"}
    assert by_ref(cr)["Deployment/default/web"].body["spec"]["replicas"] == 3


def test_a_generated_kustomization_is_the_tiers_own(tmp_path: Path, binary: KustomizeBinary) -> None:
    """Flux generates a path's kustomization.yaml in its own checkout: another tier naming that directory as a
    base finds no kustomization file there (in whichever order the two tiers build)."""
    files = flux_repo(
        {"plain": ks("plain", "./plain"), "user": ks("user", "./user", depends_on=["plain"])},
        {"plain/a.yaml": dump(cm("a")), "user/kustomization.yaml": "resources: [../plain]\n"},
    )
    _, cr = render(tmp_path, files, binary)
    assert set(by_ref(cr, TierId(FLUX, "plain"))) == {"ConfigMap/a"}
    [failed] = errors(cr)
    assert (failed.check, failed.kustomization) == ("render-failed", TierId(FLUX, "user"))
    assert "unable to find one of 'kustomization.yaml'" in failed.message


COMPONENT_CASES = [
    pytest.param(True, None, id="ignored-when-asked"),
    pytest.param(False, "component '../components/missing' not found (components/missing); without spec.ignoreMissingComponents the build fails", id="fails-otherwise"),
]


@pytest.mark.parametrize("ignore,message", COMPONENT_CASES)
def test_ignore_missing_components(tmp_path: Path, binary: KustomizeBinary, ignore: bool, message: str | None) -> None:
    files = app_repo({**EXTRA, "app/cm.yaml": dump(cm("cm"))}, components=["../components/extra", "../components/missing"], ignoreMissingComponents=ignore)
    logged, log = logging_binary(tmp_path, binary)
    _, cr = render(tmp_path, files, logged)
    if message is None:
        assert errors(cr) == []
        assert set(by_ref(cr)) == {"ConfigMap/cm", "ConfigMap/fromcomp"}
    else:
        [failed] = errors(cr)
        assert (failed.check, failed.kustomization, failed.message) == ("render-failed", APP, message)
        assert len(log.read_text().split()) == 1, "kustomize ran for the failed tier"


def test_owner_labels_on_every_object(tmp_path: Path, binary: KustomizeBinary) -> None:
    """kustomize-controller labels each object with its Kustomization before applying; commonMetadata comes after."""
    files = app_repo({"app/cm.yaml": dump(cm("cm", metadata={"name": "cm", "labels": {"kustomize.toolkit.fluxcd.io/name": "forged", "x": "1"}}))}, commonMetadata={"labels": {"team": "t"}})
    _, cr = render(tmp_path, files, binary)
    assert errors(cr) == []
    assert by_ref(cr)["ConfigMap/cm"].body["metadata"]["labels"] == {"x": "1", **OWNER, "team": "t"}
    entry = cr.tiers[TierId(FLUX, FLUX)]
    assert {(m.labels["kustomize.toolkit.fluxcd.io/name"], m.labels["kustomize.toolkit.fluxcd.io/namespace"]) for m in entry.manifests} == {(FLUX, FLUX)}


def test_substitution_disabled_by_a_label_or_an_annotation(tmp_path: Path, binary: KustomizeBinary) -> None:
    disabled = {"kustomize.toolkit.fluxcd.io/substitute": "disabled"}
    objects = [
        cm("by-label", metadata={"name": "by-label", "labels": disabled}, data={"v": "${VAR}"}),
        cm("by-annotation", metadata={"name": "by-annotation", "annotations": disabled}, data={"v": "${VAR}"}),
        # the words in a value are data, not the switch
        cm("in-data", data={"v": "${VAR}", "note": "kustomize.toolkit.fluxcd.io/substitute: disabled"}),
        cm("plain", data={"v": "${VAR}"}),
    ]
    files = app_repo({"app/cms.yaml": dump(*objects)}, post_build={"substitute": {"VAR": "set"}})
    _, cr = render(tmp_path, files, binary)
    assert errors(cr) == []
    assert {m.ref.name: m.body["data"]["v"] for m in cr.tiers[APP].manifests} == {"by-label": "${VAR}", "by-annotation": "${VAR}", "in-data": "set", "plain": "set"}


def test_the_rewritten_file_keeps_every_scalar_as_written() -> None:
    """Edited as YAML nodes: plain, quoted and block scalars, anchors and YAML 1.1 oddities reach kustomize unchanged."""
    text = (
        "resources: &r [a.yaml]\nbases: *r\ncommonAnnotations:\n  q: '1.10'\n  p: 1.10\n  b: on\n  eq: =\n"
        "configMapGenerator:\n- name: g\n  literals:\n  - |\n    K=multi\n    line\n"
        "images:\n- name: nginx\n  newName: r.example/nginx\n  digest: sha256:abc\n"
    )
    spec = TierSpec(id=APP, path="app", source=SourceRef("GitRepository", FLUX, FLUX), target_namespace="ns", images=({"name": "nginx", "newTag": "2.0"},))
    out = flux_kustomization(spec, text, None, ["../c"])
    original, rewritten = yaml.compose(text), yaml.compose(out)
    by_key = lambda node: {k.value: v for k, v in node.value}  # noqa: E731
    for key in ("commonAnnotations", "configMapGenerator", "resources", "bases"):
        assert yaml.serialize(by_key(rewritten)[key]) == yaml.serialize(by_key(original)[key]), key
    data = yaml.safe_load(out.replace(": =", ": '='"))  # (PyYAML's loader cannot construct a bare `=`)
    assert (data["namespace"], data["components"], data["buildMetadata"]) == ("ns", ["../c"], ["originAnnotations"])
    assert data["images"] == [{"name": "nginx", "newName": "r.example/nginx", "newTag": "2.0"}]
    assert data["commonAnnotations"]["p"] == 1.1 and data["commonAnnotations"]["q"] == "1.10" and data["commonAnnotations"]["b"] is True


def test_kustomize_messages_name_repo_files_and_object_ids(tmp_path: Path, binary: KustomizeBinary) -> None:
    """Paths in kustomize's message are repo paths (it built in a mirror of the path), object ids stay whole."""
    files = app_repo(
        {
            "app/kustomization.yaml": "resources: [cm.yaml, ../base]\npatchesStrategicMerge: [p.yaml]\n",
            "app/cm.yaml": dump(cm("cm")),
            "app/p.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: nope}\n",
            "base/kustomization.yaml": "resources: [gone.yaml]\n",
        }
    )
    _, cr = render(tmp_path, files, binary)
    [failed] = errors(cr)
    assert "open base/gone.yaml: no such file or directory" in failed.message
    assert str(tmp_path) not in failed.message and "<path outside the repository>" not in failed.message
    files["base/kustomization.yaml"] = "resources: []\n"
    _, cr = render(tmp_path / "2", files, binary)
    [failed] = errors(cr)
    assert "no matches for Id ConfigMap.v1.[noGrp]/nope.[noNs]" in failed.message


def test_a_skipped_component_that_appears_is_built_in(tmp_path: Path) -> None:
    """A review reuses the base's build of a tier no changed path touches: a component it skipped counts as touched."""
    from bot.pipeline.review import review_repository
    from tests.gitrepo import commit_all

    root = write_tree(tmp_path / "repo", app_repo({"app/cm.yaml": dump(cm("cm"))}, components=["../components/extra"], ignoreMissingComponents=True))
    repo = init_repo(root)
    base = repo.head.commit.hexsha
    write_tree(root, EXTRA)
    head = commit_all(repo, "add the component")
    review = review_repository(root, "dev", base, head)
    [tier] = review.diff.tiers
    assert (tier.tier, [c.ref.name for c in tier.changes]) == (APP, ["fromcomp"])


NEWLINE_CASES = [
    # a path component with a newline in it is still a path: `x\n/..` cancels like any other
    pytest.param("resources: [a.yaml, \"x\\n/../{climb}{hostrel}/secret.yaml\"]\n", id="resource"),
    # an entry that is not YAML objects is a path to kustomize, however many lines it has
    pytest.param("generators: [\"not: [yaml\\n/../{climb}{hostrel}/secret.yaml\"]\n", id="generator-that-is-not-yaml"),
    pytest.param("patchesStrategicMerge: [\"a: 1\\na: 2\\n/../{climb}{hostrel}/secret.yaml\"]\n", id="patch-with-a-repeated-key"),
]


@pytest.mark.parametrize("text", NEWLINE_CASES)
def test_a_multi_line_entry_that_kustomize_reads_as_a_path_is_checked(tmp_path: Path, binary: KustomizeBinary, host: Path, text: str) -> None:
    files = _fill({**_k(""), "app/kustomization.yaml": text.replace("{climb}", CLIMB)}, host)
    logged, log = logging_binary(tmp_path, binary)
    _, cr = render(tmp_path, app_repo(files), logged)
    [finding] = [f for f in cr.findings if f.kustomization == APP]
    assert (finding.check, "climbs out" in finding.message) == ("unsafe-path", True), finding
    assert len(log.read_text().split()) == 1
    assert MARKER not in json.dumps([m.body for _, m in cr.manifests()], default=str)


def test_a_resource_file_name_with_a_newline_builds(tmp_path: Path, binary: KustomizeBinary) -> None:
    files = app_repo({"app/kustomization.yaml": yaml.safe_dump({"resources": ["odd\nname.yaml"]}), "app/odd\nname.yaml": dump(cm("odd"))})
    _, cr = render(tmp_path, files, binary)
    assert errors(cr) == []
    assert set(by_ref(cr)) == {"ConfigMap/odd"}


_HEAD = "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"


@pytest.mark.parametrize(
    "text,generated,spec,empty",
    [
        (_HEAD + "resources: []\n", None, {}, True),  # fluxcd/flux2#4601: the controller drops the empty list
        (_HEAD + "resources: []\npatches: []\nnamespace: ''\nlabels: {}\ncomponents: ~\n", None, {}, True),
        (_HEAD + "resources: [cm.yaml]\n", None, {}, False),
        (_HEAD + "resources: []\nconfigMapGenerator: [{name: g, literals: [a=b]}]\n", None, {}, False),
        (_HEAD + "resources: []\nnamespace: 'null'\n", None, {}, False),  # a quoted string, not a null
        (_HEAD + "resources: []\n", None, {"target_namespace": "apps"}, False),  # the spec's field is merged in
        (_HEAD, None, {}, False),  # nothing written at all: not this rule
        ("resources: [\n", None, {}, False),  # not YAML: the build says so
        (None, [], {}, True),  # no kustomization file, no manifest: the generated file is empty
        (None, ["./cm.yaml"], {}, False),
        (None, [], {"name_prefix": "p-"}, False),
    ],
    ids=["resources-empty", "all-fields-empty", "a-resource", "a-generator", "quoted-null", "target-namespace", "bare", "invalid",
         "generated-empty", "generated", "generated-prefix"],
)
def test_the_file_the_controller_writes_back_is_empty(text: str | None, generated: list[str] | None, spec: dict[str, str], empty: bool) -> None:
    tier = TierSpec(id=APP, path="app", source=SourceRef("GitRepository", FLUX, FLUX), **spec)  # type: ignore[arg-type]
    assert controller_file_empty(tier, text, generated) is empty


# == Remote entries: left out of the build's copy of the kustomization file =============================

from bot.adapters.workspace import build_snapshot  # noqa: E402
from bot.engine.render.generate import KustomizationIndex, build_layout, is_remote_base, without_remote  # noqa: E402
from bot.engine.core.model import GroupKind  # noqa: E402,F401

REMOTE_FILE = "https://github.com/cert-manager/cert-manager/releases/download/v1.8.2/cert-manager.crds.yaml"
REMOTE_BASE = "github.com/kubernetes-csi/external-snapshotter//client/config/crd?ref=v6.0.1"


def test_without_remote_keeps_every_other_entry_and_key() -> None:
    text = (
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nnamespace: x\n"
        f"resources:\n  - {REMOTE_FILE}\n  - local.yaml\n"
        "configMapGenerator:\n  - name: dash\n    files:\n      - a.json\n      - b.json=https://example.com/b.json\n"
        "    env: https://example.com/e.env\n"
    )
    body = yaml.safe_load(without_remote(text, {REMOTE_FILE, "https://example.com/b.json", "https://example.com/e.env"}))
    assert body == {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "namespace": "x",
        "resources": ["local.yaml"],
        "configMapGenerator": [{"name": "dash", "files": ["a.json"]}],
    }


def test_without_remote_leaves_a_file_kustomize_still_builds() -> None:
    """kustomize refuses an empty kustomization: a file that held only remote entries gets buildMetadata."""
    body = yaml.safe_load(without_remote(f"apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [{REMOTE_BASE}]\n", {REMOTE_BASE}))
    assert body == {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization", "buildMetadata": ["originAnnotations"]}


@pytest.mark.parametrize(
    "reference,field,base",
    [
        (REMOTE_FILE, "resources", False),
        ("https://raw.githubusercontent.com/org/repo/main/crd.yaml", "resources", False),
        (REMOTE_BASE, "resources", True),
        ("https://github.com/org/repo//deploy?ref=v1", "resources", True),
        ("https://github.com/stefanprodan/podinfo/deploy/overlays/dev?ref=master", "resources", True),
        ("git@github.com:org/repo.git", "resources", True),
        ("https://raw.githubusercontent.com/fluxcd/flux2/v0.31.4//manifests/dash.json", "configMapGenerator", False),
    ],
)
def test_is_remote_base(reference: str, field: str, base: bool) -> None:
    assert is_remote_base(reference, field) is base


def _tree(tmp_path: Path, files: dict[str, str], links: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    import os

    root = write_tree(tmp_path / "repo", files)
    for rel, target in (links or {}).items():
        os.symlink(target, root / rel)
    return build_snapshot(root, tmp_path / "snap")


TOBOSHII_CRDS = {
    "cluster/crds/kustomization.yaml": "resources: [cert-manager, local]\n",
    "cluster/crds/cert-manager/kustomization.yaml": f"# renovate: chart=cert-manager\nresources:\n  - {REMOTE_FILE}\n",
    "cluster/crds/local/kustomization.yaml": "resources: [crds.yaml]\n",
    "cluster/crds/local/crds.yaml": "kind: X\n",
}


def test_build_layout_rewrites_a_nested_file_in_a_real_directory(tmp_path: Path) -> None:
    snapshot = _tree(tmp_path, TOBOSHII_CRDS)
    index = KustomizationIndex(snapshot)
    dirs, _, problems = index.reach("cluster/crds")
    plan = index.remote_plan(dirs, "cluster/crds")
    assert problems == [] and plan.problems == ()
    assert [(e.file, e.reference, e.base) for e in plan.entries] == [("cluster/crds/cert-manager/kustomization.yaml", REMOTE_FILE, False)]
    assert plan.directories == {"cluster/crds", "cluster/crds/cert-manager"}
    spec = TierSpec(TierId("flux-system", "crds"), "cluster/crds", source=SourceRef("GitRepository", "flux-system", "flux-system"))
    layout = build_layout(snapshot, spec, "cluster/crds", [], index.info("cluster/crds").references, plan, index)
    [(path, body)] = layout.rewritten
    assert path == "cluster/crds/cert-manager/kustomization.yaml" and REMOTE_FILE not in body
    # the rewritten directory is the mirror's own; its siblings are links to the repository's
    assert "cluster/crds/local" in layout.links and not any(link.startswith("cluster/crds/cert-manager") for link in layout.links)


def test_a_remote_entry_reached_through_a_symlink_is_refused(tmp_path: Path) -> None:
    """kustomize would load the linked directory at its real path, the unrewritten file: refused, never fetched."""
    files = {k.replace("cluster/crds/cert-manager/", "vendor/cm/"): v for k, v in TOBOSHII_CRDS.items()}
    snapshot = _tree(tmp_path, files, {"cluster/crds/cert-manager": "../../vendor/cm"})
    index = KustomizationIndex(snapshot)
    dirs, _, _ = index.reach("cluster/crds")
    plan = index.remote_plan(dirs, "cluster/crds")
    assert plan.entries == () and [p.reference for p in plan.problems] == [REMOTE_FILE]
    assert "symlink" in plan.problems[0].reason
