"""A tier past a parsing bound (nesting depth, objects per build) renders to a `render-limit` finding on the tier
and the file, through real kustomize: never a RecursionError, never an internal error.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.adapters.kustomize import KustomizeBinary, locate_kustomize
from bot.engine.render.discovery import RenderLimits
from bot.engine.core.model import Severity, TierId
from bot.engine.render.yamlio import MAX_NESTING
from tests.fluxrepo import dump, flux_repo, ks, kustomization
from tests.pipeline.test_render import cm, render

APP = TierId("flux-system", "app")
HEAD = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: deep\n  namespace: default\n"


@pytest.fixture(scope="module")
def binary() -> KustomizeBinary:
    return locate_kustomize()


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


DEEP_FILES = {
    "flow-340": HEAD + "extra: " + nested(340) + "\n",
    "flow-2000": HEAD + "extra: " + nested(2_000) + "\n",
    "block-500": HEAD + "extra:\n" + "".join("  " * i + "  a:\n" for i in range(500)) + "  " * 500 + "  x\n",
    "map-900": HEAD + "extra: " + "{a: " * 900 + "x" + "}" * 900 + "\n",  # (at 10,000 kustomize refuses it itself)
    # aliases 10 deep each, nesting one another: kustomize expands them into a 400-deep object
    "alias-chain": HEAD + "extra:\n" + "".join(f"  l{i}: &l{i} " + "[" * 10 + (f"*l{i - 1}" if i else "x") + "]" * 10 + "\n" for i in range(40)),
}


@pytest.mark.parametrize("case", DEEP_FILES)
def test_a_deep_resource_file_is_a_render_limit(tmp_path: Path, binary: KustomizeBinary, case: str) -> None:
    files = flux_repo({"app": ks("app", "./app")}, {
        "app/kustomization.yaml": kustomization("deep.yaml", "ok.yaml"), "app/deep.yaml": DEEP_FILES[case], "app/ok.yaml": dump(cm("ok", "default")),
    })
    _, cr = render(tmp_path, files, binary)
    limits = [f for f in cr.findings if f.check == "render-limit"]
    assert len(limits) == 1, cr.findings
    [limit] = limits
    assert limit.severity == Severity.ERROR and limit.kustomization == APP
    assert limit.location is not None and limit.location.file == "app/deep.yaml"
    assert limit.message.startswith("app/deep.yaml nests ") and f"(limit: {MAX_NESTING})" in limit.message
    assert cr.tiers[APP].failed


def test_a_deep_value_substituted_into_an_object_is_a_render_limit(tmp_path: Path, binary: KustomizeBinary) -> None:
    """postBuild substitution writes text: a variable can bring the nesting the file did not have."""
    app = ks("app", "./app", post_build={"substitute": {"DEEP": nested(500)}})
    files = flux_repo({"app": app}, {
        "app/kustomization.yaml": kustomization("cm.yaml"),
        "app/cm.yaml": HEAD + "extra: ${DEEP}\n",
    })
    _, cr = render(tmp_path, files, binary)
    [limit] = [f for f in cr.findings if f.check == "render-limit"]
    assert limit.kustomization == APP and limit.severity == Severity.ERROR
    assert "ConfigMap/deep nests 501 levels deep (limit: 100)" in limit.message


def test_a_deep_kustomization_file_is_a_render_limit(tmp_path: Path, binary: KustomizeBinary) -> None:
    files = flux_repo({"app": ks("app", "./app")}, {
        "app/kustomization.yaml": "resources: [cm.yaml]\ncommonAnnotations: {a: " + nested(2_000) + "}\n",
        "app/cm.yaml": dump(cm("x", "default")),
    })
    _, cr = render(tmp_path, files, binary)
    [limit] = [f for f in cr.findings if f.check == "render-limit"]
    assert limit.kustomization == APP and limit.location is not None and limit.location.file == "app/kustomization.yaml"
    assert "nests more than 1,000 levels deep (limit: 100)" in limit.message


def test_objects_per_tier_are_bounded(tmp_path: Path, binary: KustomizeBinary) -> None:
    files = flux_repo({"app": ks("app", "./app"), "small": ks("small", "./small")}, {
        "app/kustomization.yaml": kustomization("cms.yaml"),
        "app/cms.yaml": dump(*(cm(f"c{i}", "default") for i in range(5))),
        "small/kustomization.yaml": kustomization("cm.yaml"),
        "small/cm.yaml": dump(cm("one", "default")),
    })
    _, cr = render(tmp_path, files, binary, limits=RenderLimits(tier_objects=4))
    [limit] = [f for f in cr.findings if f.check == "render-limit"]
    assert limit.kustomization == APP and limit.severity == Severity.ERROR
    assert limit.message == "the build has 5 objects; not rendered (limit: 4 per Kustomization)"
    assert cr.tiers[APP].failed and cr.tiers[TierId("flux-system", "small")].rendered
