"""ConfigMaps and Secrets only the cluster has (bot/engine/render/clusterobjects.py) and how a tier's variables read them
(bot/engine/render/finish.py `tier_variables`): Flux's loadVars order, `optional`, Secret data decoded, masked."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from bot.adapters.workspace import build_snapshot
from bot.engine.render.clusterobjects import ClusterObject, declared_objects, object_data
from bot.engine.render.config import load_repo_config
from bot.engine.core.errors import ConfigError
from bot.engine.render.finish import finish_key, tier_variables
from bot.engine.core.model import SourceRef, SubstituteFrom, TierId, TierSpec
from bot.engine.render.rendered import RawTier
from tests.fluxrepo import dump, obj, write_tree

TIER = TierId("flux-system", "apps")


def _spec(*sources: SubstituteFrom, substitute: dict[str, str] | None = None) -> TierSpec:
    return TierSpec(id=TIER, path="apps", source=SourceRef("GitRepository", "flux-system", "flux-system"), has_post_build=True, substitute_from=sources, substitute=substitute or {})


def _cm(name: str, **data: str) -> ClusterObject:
    return ClusterObject("ConfigMap", "flux-system", name, data)


def test_later_sources_override_earlier_and_substitute_overrides_all() -> None:
    spec = _spec(SubstituteFrom("ConfigMap", "a"), SubstituteFrom("Secret", "b"), substitute={"C": "inline"})
    external = {
        ("ConfigMap", "flux-system", "a"): _cm("a", A="1", B="from-a", C="from-a"),
        ("Secret", "flux-system", "b"): ClusterObject("Secret", "flux-system", "b", {"B": "s3cret", "C": "s3cret"}),
    }
    variables = tier_variables(spec, {}, external)
    assert dict(variables.values) == {"A": "1", "B": "s3cret", "C": "inline"}
    assert variables.secret_names == {"B"} and not variables.open_set and variables.findings == ()
    assert variables.masked == {"A": "1", "B": "<masked:B>", "C": "inline"}


def test_absent_on_the_cluster_fails_unless_optional_and_a_failed_read_stays_open() -> None:
    absent = {("ConfigMap", "flux-system", "a"): ClusterObject("ConfigMap", "flux-system", "a", None)}
    [missing] = tier_variables(_spec(SubstituteFrom("ConfigMap", "a")), {}, absent).findings
    assert missing.check == "substitution-source-missing" and missing.severity.value == "error"
    optional = tier_variables(_spec(SubstituteFrom("ConfigMap", "a", optional=True)), {}, absent)
    assert optional.findings == () and not optional.open_set  # Flux skips an optional NotFound source
    unreadable = {("ConfigMap", "flux-system", "a"): ClusterObject("ConfigMap", "flux-system", "a", error="403 Forbidden")}
    variables = tier_variables(_spec(SubstituteFrom("ConfigMap", "a")), {}, unreadable)
    assert variables.open_set and [f.check for f in variables.findings] == ["substitution-source-external"]
    assert "403 Forbidden" in variables.findings[0].message


def test_the_finish_key_never_hashes_a_secret_value() -> None:
    """Equal masked values, equal keys: the key (and the cache file it names) depends on no Secret's value."""
    spec = _spec(SubstituteFrom("Secret", "b"))
    raw = RawTier(spec=spec, content_key="k")
    keys = {finish_key(raw, tier_variables(spec, {}, {("Secret", "flux-system", "b"): ClusterObject("Secret", "flux-system", "b", {"T": v})}), False, False)
            for v in ("one", "two")}
    assert len(keys) == 1


def test_secret_data_is_decoded_and_live_reads_ignore_string_data() -> None:
    body = {"kind": "Secret", "data": {"T": base64.b64encode(b"tok").decode(), "BAD": "!!"}, "stringData": {"S": "plain"}}
    assert object_data(body, live=True) == {"T": "tok", "BAD": ""}
    assert object_data(body, live=False) == {"T": "tok", "BAD": "", "S": "plain"}
    assert object_data({"kind": "ConfigMap", "data": {"N": 3}}, live=True) == {"N": "3"}


def test_declared_objects_from_a_file_or_a_directory(tmp_path: Path) -> None:
    repo = write_tree(tmp_path / "repo", {
        "only/a.yaml": dump(obj("v1", "ConfigMap", "vars", "flux-system", data={"X": "1"}), obj("apps/v1", "Deployment", "d", "x")),
        "only/b.yml": dump(obj("v1", "Secret", "s", "apps", stringData={"YY": "2"})),
        "only/sub/c.yaml": dump(obj("v1", "ConfigMap", "deeper", "flux-system")),
        "bad.yaml": dump(obj("v1", "ConfigMap", "nameless-namespace")),
    })
    snapshot = build_snapshot(repo, tmp_path / "snap")
    found = declared_objects(snapshot, ["only"])
    assert sorted(found) == [("ConfigMap", "flux-system", "vars"), ("Secret", "apps", "s")]
    assert found[("Secret", "apps", "s")].data == {"YY": "2"} and found[("Secret", "apps", "s")].where == "only/b.yml"
    with pytest.raises(ConfigError, match="not a file or directory"):
        declared_objects(snapshot, ["nowhere"])
    with pytest.raises(ConfigError, match="metadata.name and metadata.namespace"):
        declared_objects(snapshot, ["bad.yaml"])


def test_cluster_objects_setting() -> None:
    config = load_repo_config("clusters:\n  prod:\n    path: clusters/prod\n    cluster_objects: [clusters/prod/cluster-only.yaml]\n")
    assert config.cluster_objects == {"prod": ("clusters/prod/cluster-only.yaml",)}
    with pytest.raises(ConfigError, match="climbs out"):
        load_repo_config("clusters:\n  prod:\n    path: clusters/prod\n    cluster_objects: [../x.yaml]\n")
