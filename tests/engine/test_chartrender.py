"""The pure rules applied to helm's output: masking what two renders disagree on, test hooks, values merging, messages."""

from __future__ import annotations

import pytest

from bot.engine.render.helmvalues import merge_maps
from bot.engine.render.chartrender import (
    GENERATED,
    MAX_MESSAGE,
    ChartRenderRequest,
    drop_test_hooks,
    is_manifest,
    mentions_unseeded,
    postable,
    stabilise,
    stabilise_text,
)


def test_stabilise_masks_each_differing_scalar_and_counts_it() -> None:
    first = [{"kind": "Secret", "data": {"a": "x1", "b": "same", "n": 1}, "list": [1, 2]}, {"kind": "ConfigMap"}]
    second = [{"kind": "Secret", "data": {"a": "x2", "b": "same", "n": 2}, "list": [1, 3]}, {"kind": "ConfigMap"}]
    docs, masked = stabilise(first, second)
    assert masked == 3
    assert docs == [{"kind": "Secret", "data": {"a": GENERATED, "b": "same", "n": GENERATED}, "list": [1, GENERATED]}, {"kind": "ConfigMap"}]


def test_stabilise_masks_a_differing_shape_whole() -> None:
    assert stabilise({"a": {"x": 1}}, {"a": {"y": 1}}) == ({"a": GENERATED}, 1)
    assert stabilise({"a": [1]}, {"a": [1, 2]}) == ({"a": GENERATED}, 1)
    assert stabilise({"a": 1}, {"a": "1"}) == ({"a": GENERATED}, 1)  # a type change is a change


def test_stabilise_text_keeps_agreeing_text_as_written() -> None:
    text = "kind: ConfigMap   # as written\nmetadata: {name: x}\n"
    assert stabilise_text(text, text) == (text, 0)
    out, masked = stabilise_text("kind: Secret\ndata: {p: abc}\n---\nkind: A\n", "kind: Secret\ndata: {p: xyz}\n---\nkind: A\n")
    assert masked == 1 and out == f"kind: Secret\ndata:\n  p: {GENERATED}\n---\nkind: A\n"
    assert stabilise_text(out, out) == (out, 0)
    assert stabilise_text("a: [", "b: [") == (f"# {GENERATED}\n", 1)


def test_test_hooks_are_dropped_and_other_hooks_kept() -> None:
    text = (
        "kind: Pod\nmetadata:\n  name: t\n  annotations:\n    helm.sh/hook: test\n---\n"
        "kind: Job\nmetadata:\n  name: j\n  annotations:\n    helm.sh/hook: pre-install, test\n---\n"
        "kind: ConfigMap\nmetadata:\n  name: c\n"
    )
    assert drop_test_hooks(text) == (
        "kind: Job\nmetadata:\n  name: j\n  annotations:\n    helm.sh/hook: pre-install, test\n---\n"
        "kind: ConfigMap\nmetadata:\n  name: c\n"
    )
    plain = "kind: ConfigMap\nmetadata:\n  name: test\n"
    assert drop_test_hooks(plain) is plain


def test_merge_maps_merges_maps_and_replaces_the_rest() -> None:
    base = {"a": {"x": 1, "y": [1, 2]}, "b": 1, "c": {"k": "v"}}
    assert merge_maps(base, {"a": {"y": [3]}, "b": {"now": "a map"}, "c": None}) == {"a": {"x": 1, "y": [3]}, "b": {"now": "a map"}, "c": None}
    assert base == {"a": {"x": 1, "y": [1, 2]}, "b": 1, "c": {"k": "v"}}


def test_unseeded_functions_are_found_as_whole_words() -> None:
    assert mentions_unseeded(["{{ randAlphaNum 8 }}"]) and mentions_unseeded(["x", "{{ now | date \"2006\" }}"])
    assert not mentions_unseeded(["{{ .Values.knowledge }}", "{{ include \"x.uuid\" . }}"])


def test_manifest_files_and_postable_messages() -> None:
    assert is_manifest("c/templates/a.yaml", "kind: A\n")
    assert not any(is_manifest(p, t) for p, t in [("c/templates/NOTES.txt", "hi"), ("c/templates/_h.tpl", "x"), ("c/templates/e.yaml", "\n  \n")])
    assert postable("stat /srv/work/charts/app/x: no such file", ["/srv/work/charts/app"]) == "stat x: no such file"
    assert postable("open /srv/work/charts/app failed", ["/srv/work/charts/app/"]) == "open <chart> failed"
    long = postable("e" * 5000)
    assert len(long) == MAX_MESSAGE and long.endswith("…")


def test_a_request_needs_one_chart_and_an_absolute_directory() -> None:
    common = dict(values_files=(), values={"a": 1}, release_name="r", namespace="n", kube_version="v1.33.0", api_versions=("x.io/v1",))
    with pytest.raises(ValueError, match="exactly one"):
        ChartRenderRequest(archive=b"x", chart_dir="/c", **common)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="absolute"):
        ChartRenderRequest(archive=None, chart_dir="charts/app", **common)  # type: ignore[arg-type]
    upgrade = ChartRenderRequest(archive=b"x", chart_dir=None, is_upgrade=True, **common)  # type: ignore[arg-type]
    assert upgrade.options_json() == '{"name": "r", "namespace": "n", "kube_version": "v1.33.0", "api_versions": ["x.io/v1"], "is_install": false, "is_upgrade": true}'
