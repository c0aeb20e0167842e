"""The pure rules of chart sources: URLs as Helm joins them, allow-list entries, mirrors, challenges, indexes."""

from __future__ import annotations

import pytest

from bot.engine.render.chartsource import (
    ChartFetchError,
    Credential,
    FetchPolicy,
    allow_match,
    endpoint,
    index_url,
    member_problem,
    mirror_url,
    parse_challenge,
    parse_index,
    parse_oci_url,
    redact,
    resolve_reference_url,
    select_entry,
    source_host,
    select_tag,
    tag_for,
)


@pytest.mark.parametrize(
    ("repo", "ref", "expected"),
    [
        # helm/helm pkg/repo ResolveReferenceURL: the repository URL gets a trailing slash, then the ref is joined.
        ("https://charts.example.com", "demo-1.0.0.tgz", "https://charts.example.com/demo-1.0.0.tgz"),
        ("https://charts.example.com/stable", "demo-1.0.0.tgz", "https://charts.example.com/stable/demo-1.0.0.tgz"),
        ("https://charts.example.com/stable/", "../other/x.tgz", "https://charts.example.com/other/x.tgz"),
        ("https://charts.example.com/stable", "/root.tgz", "https://charts.example.com/root.tgz"),
        ("https://charts.example.com/a", "https://cdn.example.net/x.tgz", "https://cdn.example.net/x.tgz"),
        ("https://charts.example.com/a?sig=1", "x.tgz", "https://charts.example.com/a/x.tgz?sig=1"),
    ],
)
def test_resolve_reference_url(repo: str, ref: str, expected: str) -> None:
    assert resolve_reference_url(repo, ref) == expected


def test_index_url_and_redact() -> None:
    assert index_url("https://h.example/charts/") == "https://h.example/charts/index.yaml"
    assert index_url("https://h.example") == "https://h.example/index.yaml"
    assert redact("https://user:pass@h.example:8443/p?token=abc#x") == "https://h.example:8443/p"


def test_allow_match_forms() -> None:
    policy = FetchPolicy(allow_hosts=frozenset({"charts.example.com", "cm.internal:8080", "127.0.0.1", "[::1]:5000"}))
    assert allow_match(policy, endpoint("https://charts.example.com/x"), False) == "host"  # public only
    assert allow_match(policy, endpoint("https://charts.example.com:444/x"), False) == "host"
    assert allow_match(policy, endpoint("http://cm.internal:8080/"), False) == "exact"
    assert allow_match(policy, endpoint("http://cm.internal:8081/"), False) is None
    assert allow_match(policy, endpoint("http://127.0.0.1:9999/"), True) == "exact"  # a listed literal address
    assert allow_match(policy, endpoint("http://[::1]:5000/"), True) == "exact"
    assert allow_match(policy, endpoint("http://evil.example/"), False) is None


def test_source_hosts_admit_public_addresses_only() -> None:
    # Hosts the base branch's sources name: any port, and even a literal or an exact-looking entry stays "host".
    policy = FetchPolicy(source_hosts=frozenset({"Charts.Example.com", "127.0.0.1", "[::1]"}))
    assert allow_match(policy, endpoint("https://charts.example.com/x"), False) == "host"
    assert allow_match(policy, endpoint("oci://charts.example.com:5000/x"), False) == "host"
    assert allow_match(policy, endpoint("http://127.0.0.1:8080/"), True) == "host"  # never "exact": loopback stays shut
    assert allow_match(policy, endpoint("http://[::1]:8080/"), True) == "host"
    assert allow_match(policy, endpoint("https://other.example.com/"), False) is None
    both = FetchPolicy(allow_hosts=frozenset({"127.0.0.1:8080"}), source_hosts=frozenset({"127.0.0.1"}))
    assert allow_match(both, endpoint("http://127.0.0.1:8080/"), True) == "exact"  # only allow_hosts opens it
    assert [source_host(u) for u in ("https://A.example/x", "oci://ghcr.io/o/c", "http://[::1]:5000", "s3://b", 7, "nope")] == \
        ["a.example", "ghcr.io", "::1", None, None, None]


def test_mirror_url_and_credentials() -> None:
    assert mirror_url("https://ghcr.io/v2/x/manifests/1", {"ghcr.io": "http://cache:5000/ghcr"}) == \
        "http://cache:5000/ghcr/v2/x/manifests/1"
    assert mirror_url("https://other.io/v2/x", {"ghcr.io": "http://cache:5000"}) is None
    cred = Credential("u", "p")
    policy = FetchPolicy(credentials={"secret:flux/s": cred, "h.example": Credential(token="t")})
    assert policy.credential("flux/s", "h.example", 443) is cred
    assert policy.credential(None, "h.example", 443) == Credential(token="t")
    assert policy.credential("flux/absent", "other", 443) is None
    assert "credentials" not in repr(policy)


def test_parse_challenge() -> None:
    challenge = parse_challenge('Bearer realm="https://ghcr.io/token",service="ghcr.io",scope="repository:a/b:pull"')
    assert challenge.scheme == "bearer"
    assert dict(challenge.params) == {"realm": "https://ghcr.io/token", "service": "ghcr.io",
                                      "scope": "repository:a/b:pull"}
    assert parse_challenge('Basic realm="Registry Realm"').scheme == "basic"


def test_index_entries_and_selection() -> None:
    text = b"""apiVersion: v1
entries:
  demo:
    - {version: 1.0.0+b1, urls: [a.tgz], created: "2024-01-01T00:00:00Z"}
    - {version: 1.0.0+b2, urls: [b.tgz], created: "2024-02-01T00:00:00Z", digest: ABCDEF}
    - {version: 0.9.0, urls: [c.tgz]}
    - {version: 1.5, urls: [d.tgz]}
"""
    entries = parse_index(text, "repo", 1 << 20)
    # Equal precedence (build metadata only): the later `created` wins (source-controller getChartVersion).
    assert select_entry(entries, "demo", "~1.0.0", "repo").urls == ("b.tgz",)
    assert select_entry(entries, "demo", "~1.0.0", "repo").digest == "abcdef"
    assert select_entry(entries, "demo", "1.0.0+b1", "repo").urls == ("a.tgz",)  # the exact string first
    assert select_entry(entries, "demo", "", "repo").urls == ("b.tgz",)  # 1.5 is a float in YAML: skipped
    with pytest.raises(ChartFetchError) as caught:
        parse_index(b"entries: {}\n", "repo", 1 << 20)
    assert caught.value.reason == "invalid"
    with pytest.raises(ChartFetchError) as caught:
        parse_index(b"x" * 100, "repo", 10)
    assert caught.value.reason == "too-large"


def test_oci_references_and_tags() -> None:
    ref = parse_oci_url("oci://ghcr.io:443/stefanprodan/charts/podinfo")
    assert (ref.registry.authority, ref.repository, ref.chart) == ("ghcr.io:443", "stefanprodan/charts/podinfo", "podinfo")
    assert tag_for("1.2.3+build.1") == "1.2.3_build.1"  # Helm: `+` is not allowed in OCI tags
    assert select_tag(["1.0.0", "1.2.0_b.1", "latest", "2.0.0-rc.1"], "^1", "x") == "1.2.0_b.1"
    for bad in ("https://ghcr.io/x", "oci://ghcr.io/UPPER/case", "oci://ghcr.io/"):
        with pytest.raises(ChartFetchError):
            parse_oci_url(bad)


@pytest.mark.parametrize(("name", "bad"), [("demo/Chart.yaml", False), ("demo/../../x", True), ("/etc/x", True),
                                           ("C:/x", True), ("demo/..x/ok", False), ("demo\\..\\x", True)])
def test_member_problem(name: str, bad: bool) -> None:
    assert (member_problem(name) is not None) is bad
