"""Chart fetching against real servers on 127.0.0.1: a Helm HTTP repository fake and Debian's OCI registry.

Each attack is performed: the hostile server really streams, lies, redirects; the fetcher must refuse in time.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import tarfile
import time
import tracemalloc
import urllib.request
from pathlib import Path
from typing import Iterator

import helm_python
import pytest

from bot.adapters.charts import ChartFetcher, inspect_archive
from bot.engine.render.chartsource import ChartFetchError, Credential, FetchLimits, FetchPolicy
from tests.fakes.chartrepo import ChartRepo, package_chart, serve_chart_repo, write_index
from tests.fakes.registry import BearerRegistry, Registry, auth_registry, registry, serve_bearer_registry  # noqa: F401

MIB = 1024 * 1024


def host_of(url: str) -> str:
    return url.split("://", 1)[1].split("/", 1)[0]


def sha(path: Path) -> str:
    return "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def charts(tmp_path: Path) -> Path:
    """A repository directory with demo 1.0.0, 1.1.0 (under sub/), 1.2.0-rc.1 and 2.0.0."""
    root = tmp_path / "repo"
    for version in ("1.0.0", "1.2.0-rc.1", "2.0.0"):
        package_chart(tmp_path, "demo", version, destination=root)
    package_chart(tmp_path, "demo", "1.1.0", destination=root / "sub")
    return root


@pytest.fixture
def repo(charts: Path) -> Iterator[ChartRepo]:
    with serve_chart_repo(ChartRepo(charts)) as served:
        write_index(charts, {"demo": [
            {"version": "1.0.0", "urls": ["demo-1.0.0.tgz"], "digest": "auto"},
            # an absolute URL on the same server
            {"version": "1.1.0", "urls": [f"{served.url}/sub/demo-1.1.0.tgz"], "digest": "auto"},
            {"version": "1.2.0-rc.1", "urls": ["demo-1.2.0-rc.1.tgz"]},
            {"version": "2.0.0", "urls": ["./demo-2.0.0.tgz"], "digest": "auto"},
        ]})
        yield served


def allow(*urls: str, **kwargs: object) -> FetchPolicy:
    return FetchPolicy(allow_hosts=frozenset(host_of(u) for u in urls), **kwargs)  # type: ignore[arg-type]


def fail(call: object, *args: object, **kwargs: object) -> ChartFetchError:
    with pytest.raises(ChartFetchError) as caught:
        call(*args, **kwargs)  # type: ignore[operator]
    return caught.value


# -- HTTP repositories ---------------------------------------------------------------------------------------------


def test_exact_version_relative_url(repo: ChartRepo, charts: Path) -> None:
    chart = ChartFetcher(allow(repo.url), None).http_chart(repo.url, "demo", "1.0.0")
    assert (chart.name, chart.version, chart.url) == ("demo", "1.0.0", f"{repo.url}/demo-1.0.0.tgz")
    assert chart.digest == sha(charts / "demo-1.0.0.tgz")
    assert chart.archive == (charts / "demo-1.0.0.tgz").read_bytes()
    assert repo.paths() == ["/index.yaml", "/demo-1.0.0.tgz"]


def test_range_takes_the_highest_and_reads_the_index_once(repo: ChartRepo, charts: Path) -> None:
    fetcher = ChartFetcher(allow(repo.url), None)
    assert fetcher.http_chart(repo.url, "demo", "^1.0").version == "1.1.0"  # absolute URL under sub/
    assert fetcher.http_chart(repo.url, "demo", "").version == "2.0.0"  # empty: latest stable; "./" relative URL
    assert fetcher.http_chart(repo.url, "demo", ">=1.2.0-0 <2").version == "1.2.0-rc.1"
    assert fetcher.http_chart(repo.url, "demo", "*").version == "2.0.0"
    assert repo.paths().count("/index.yaml") == 1
    assert "/sub/demo-1.1.0.tgz" in repo.paths()


def test_repository_url_with_a_path_and_a_trailing_slash(tmp_path: Path) -> None:
    root = tmp_path / "nested"
    package_chart(tmp_path, "app", "0.1.0", destination=root / "stable")
    write_index(root / "stable", {"app": [{"version": "0.1.0", "urls": ["app-0.1.0.tgz"], "digest": "auto"}]})
    with serve_chart_repo(ChartRepo(root)) as served:
        chart = ChartFetcher(allow(served.url), None).http_chart(f"{served.url}/stable/", "app", "0.1.0")
    assert chart.url == f"{served.url}/stable/app-0.1.0.tgz"
    assert served.paths() == ["/stable/index.yaml", "/stable/app-0.1.0.tgz"]


def test_digest_mismatch_is_invalid(repo: ChartRepo, charts: Path) -> None:
    write_index(charts, {"demo": [{"version": "1.0.0", "urls": ["demo-2.0.0.tgz"],
                                   "digest": hashlib.sha256(b"something else").hexdigest()}]})
    error = fail(ChartFetcher(allow(repo.url), None).http_chart, repo.url, "demo", "1.0.0")
    assert error.reason == "invalid" and "digest" in str(error)


@pytest.mark.parametrize(("chart", "version"), [("absent", "1.0.0"), ("demo", "9.9.9"), ("demo", ">=3")])
def test_not_found(repo: ChartRepo, chart: str, version: str) -> None:
    error = fail(ChartFetcher(allow(repo.url), None).http_chart, repo.url, chart, version)
    assert error.reason == "not-found"


def test_missing_index_and_bad_constraint(tmp_path: Path, repo: ChartRepo) -> None:
    error = fail(ChartFetcher(allow(repo.url), None).http_chart, f"{repo.url}/nowhere", "demo", "1.0.0")
    assert error.reason == "not-found"
    error = fail(ChartFetcher(allow(repo.url), None).http_chart, repo.url, "demo", ">= one")
    assert error.reason == "invalid" and "improper constraint" in str(error)


def test_index_that_is_not_an_index(tmp_path: Path) -> None:
    root = tmp_path / "bad"
    root.mkdir()
    (root / "index.yaml").write_text("a: &a [*a, *a]\n" + "b: &b [" + ", ".join(["*a"] * 200) + "]\n")
    with serve_chart_repo(ChartRepo(root)) as served:
        error = fail(ChartFetcher(allow(served.url), None).http_chart, served.url, "demo", "1.0.0")
    assert error.reason == "invalid"


def test_basic_auth_and_no_credentials_echoed(charts: Path) -> None:
    password = "hunter2-very-secret"
    with serve_chart_repo(ChartRepo(charts, auth=("reader", password))) as served:
        write_index(charts, {"demo": [{"version": "1.0.0", "urls": ["demo-1.0.0.tgz"], "digest": "auto"}]})
        anonymous = fail(ChartFetcher(allow(served.url), None).http_chart, served.url, "demo", "1.0.0")
        assert anonymous.reason == "needs-credentials"
        wrong = FetchPolicy(allow_hosts=frozenset({host_of(served.url)}),
                            credentials={host_of(served.url): Credential("reader", "wrong-password-xyz")})
        refused = fail(ChartFetcher(wrong, None).http_chart, served.url, "demo", "1.0.0")
        assert refused.reason == "needs-credentials" and "wrong-password-xyz" not in str(refused)
        by_secret = FetchPolicy(allow_hosts=frozenset({host_of(served.url)}),
                                credentials={"secret:flux-system/charts-auth": Credential("reader", password)})
        assert password not in repr(by_secret) and "reader" not in repr(by_secret.credentials)
        url_with_user = served.url.replace("http://", f"http://reader:{password}@")
        chart = ChartFetcher(by_secret, None).http_chart(url_with_user, "demo", "1.0.0",
                                                         secret_ref="flux-system/charts-auth")
        assert password not in chart.url and "reader" not in chart.url
        missing = fail(ChartFetcher(by_secret, None).http_chart, url_with_user, "absent", "1.0.0",
                       secret_ref="flux-system/charts-auth")
        assert missing.reason == "not-found" and password not in str(missing) and password not in repr(missing)


# -- the cache -----------------------------------------------------------------------------------------------------


def test_pinned_version_from_the_cache_fetches_nothing(repo: ChartRepo, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    started = time.perf_counter()
    cold = ChartFetcher(allow(repo.url), cache).http_chart(repo.url, "demo", "1.0.0")
    cold_seconds = time.perf_counter() - started
    before = len(repo.log)
    started = time.perf_counter()
    warm = ChartFetcher(allow(repo.url), cache).http_chart(repo.url, "demo", "1.0.0")
    warm_seconds = time.perf_counter() - started
    assert len(repo.log) == before  # not even the index
    assert warm == cold
    print(f"\nHTTP fetch: cold {cold_seconds * 1000:.1f} ms, warm (cached) {warm_seconds * 1000:.2f} ms")
    offline = FetchPolicy(offline=True)
    assert ChartFetcher(offline, cache).http_chart(repo.url, "demo", "1.0.0") == cold  # no host allowed at all


def test_floating_constraint_reads_the_index_but_not_the_archive(repo: ChartRepo, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    ChartFetcher(allow(repo.url), cache).http_chart(repo.url, "demo", "^2")
    repo.log.clear()
    assert ChartFetcher(allow(repo.url), cache).http_chart(repo.url, "demo", "^2").version == "2.0.0"
    assert repo.paths() == ["/index.yaml"]
    error = fail(ChartFetcher(FetchPolicy(offline=True, allow_hosts=frozenset({host_of(repo.url)})), cache).http_chart,
                 repo.url, "demo", "^2")
    assert error.reason == "unreachable" and "offline" in str(error)


def test_a_damaged_cache_entry_is_fetched_again(repo: ChartRepo, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    chart = ChartFetcher(allow(repo.url), cache).http_chart(repo.url, "demo", "1.0.0")
    blob = cache / "charts" / chart.digest.removeprefix("sha256:")
    blob.write_bytes(blob.read_bytes()[:100])  # truncated
    repo.log.clear()
    assert ChartFetcher(allow(repo.url), cache).http_chart(repo.url, "demo", "1.0.0") == chart
    assert repo.paths() == ["/index.yaml", "/demo-1.0.0.tgz"]
    assert not list((cache / "charts").rglob(".partial-*"))


def test_mirror_serves_an_air_gapped_fetch_even_offline(repo: ChartRepo, tmp_path: Path) -> None:
    policy = FetchPolicy(mirrors={"charts.example.com": repo.url}, offline=True)
    chart = ChartFetcher(policy, None).http_chart("https://charts.example.com", "demo", "1.0.0")
    assert chart.version == "1.0.0" and chart.url == "https://charts.example.com/demo-1.0.0.tgz"
    assert repo.paths() == ["/index.yaml", "/demo-1.0.0.tgz"]


def test_concurrent_fetches_share_one_index_read(repo: ChartRepo) -> None:
    from concurrent.futures import ThreadPoolExecutor

    fetcher = ChartFetcher(allow(repo.url), None)
    with ThreadPoolExecutor(4) as pool:
        versions = list(pool.map(lambda c: fetcher.http_chart(repo.url, "demo", c).version, ["1.0.0", "^1", "*", "2.0.0"]))
    assert versions == ["1.0.0", "1.1.0", "2.0.0", "2.0.0"]
    assert repo.paths().count("/index.yaml") == 1


# -- hostile repositories -------------------------------------------------------------------------------------------


def test_index_pointing_at_cloud_metadata_is_refused_without_connecting(repo: ChartRepo, charts: Path) -> None:
    write_index(charts, {"demo": [{"version": "1.0.0", "urls": ["http://169.254.169.254/latest/meta-data/demo.tgz"]}]})
    # The test-wide socket guard raises NetworkEscape (not caught by the fetcher) on any connect off loopback.
    error = fail(ChartFetcher(allow(repo.url), None).http_chart, repo.url, "demo", "1.0.0")
    assert error.reason == "not-allowed" and "169.254.169.254" in str(error)
    assert repo.paths() == ["/index.yaml"]


def test_a_listed_name_that_resolves_to_an_internal_address_is_refused(repo: ChartRepo) -> None:
    port = int(host_of(repo.url).rsplit(":", 1)[1])
    looked_up: list[str] = []

    def metadata_dns(host: str, _port: int) -> list[str]:
        looked_up.append(host)
        return ["169.254.169.254"]

    policy = FetchPolicy(allow_hosts=frozenset({"charts.example.com"}))  # a bare name: public addresses only
    error = fail(ChartFetcher(policy, None, resolver=metadata_dns).http_chart, f"http://charts.example.com:{port}",
                 "demo", "1.0.0")
    assert error.reason == "not-allowed" and "charts.example.com" in str(error)
    assert "169.254" not in str(error) and looked_up == ["charts.example.com"]
    assert repo.log == []


def test_a_source_host_opens_public_addresses_only(repo: ChartRepo) -> None:
    """A host the base branch's sources name, resolving to loopback (or written as it): refused before connecting."""
    port = int(host_of(repo.url).rsplit(":", 1)[1])
    named = FetchPolicy(source_hosts=frozenset({"charts.example.com", "127.0.0.1"}))
    fetcher = ChartFetcher(named, None, resolver=lambda host, _port: ["127.0.0.1"])
    error = fail(fetcher.http_chart, f"http://charts.example.com:{port}", "demo", "1.0.0")
    assert error.reason == "not-allowed" and "internal address" in str(error)
    error = fail(fetcher.http_chart, repo.url, "demo", "1.0.0")
    assert error.reason == "not-allowed" and "internal address" in str(error)
    error = fail(fetcher.http_chart, f"http://unnamed.example.com:{port}", "demo", "1.0.0")
    assert error.reason == "not-allowed" and "not named by the base branch's sources" in str(error)
    assert repo.log == []


def test_connects_to_the_address_it_checked_and_keeps_the_name(repo: ChartRepo) -> None:
    """A rebinding DNS answers 169.254.169.254 the second time: there is no second time, and Host keeps the name."""
    port = int(host_of(repo.url).rsplit(":", 1)[1])
    answers = iter([["127.0.0.1"]] + [["169.254.169.254"]] * 10)
    calls: list[str] = []

    def rebinding_dns(host: str, _port: int) -> list[str]:
        calls.append(host)
        return next(answers)

    policy = FetchPolicy(allow_hosts=frozenset({f"charts.internal:{port}"}))  # exact: an internal address is fine
    chart = ChartFetcher(policy, None, resolver=rebinding_dns).http_chart(f"http://charts.internal:{port}", "demo", "1.0.0")
    assert chart.url == f"http://charts.internal:{port}/demo-1.0.0.tgz"
    assert [(e.host, e.path) for e in repo.log] == [(f"charts.internal:{port}", "/index.yaml"),
                                                     (f"charts.internal:{port}", "/demo-1.0.0.tgz")]
    assert calls == ["charts.internal"]


def test_a_name_never_reaches_a_metadata_address_even_listed_exactly(repo: ChartRepo) -> None:
    port = int(host_of(repo.url).rsplit(":", 1)[1])
    policy = FetchPolicy(allow_hosts=frozenset({f"charts.internal:{port}"}))
    fetcher = ChartFetcher(policy, None, resolver=lambda host, _port: ["fd00:ec2::254"])
    error = fail(fetcher.http_chart, f"http://charts.internal:{port}", "demo", "1.0.0")
    assert error.reason == "not-allowed" and "metadata" in str(error) and "fd00" not in str(error)
    assert repo.log == []


def test_unlisted_loopback_port_refused_listed_port_allowed(repo: ChartRepo) -> None:
    port = int(host_of(repo.url).rsplit(":", 1)[1])
    other = FetchPolicy(allow_hosts=frozenset({f"127.0.0.1:{port + 1}", "localhost"}))
    error = fail(ChartFetcher(other, None).http_chart, repo.url, "demo", "1.0.0")
    assert error.reason == "not-allowed" and f"127.0.0.1:{port}" in str(error)
    # `localhost` listed by bare name: a name, so only public addresses; it resolves to loopback.
    error = fail(ChartFetcher(other, None).http_chart, f"http://localhost:{port}", "demo", "1.0.0")
    assert error.reason == "not-allowed" and "internal address" in str(error)
    assert repo.log == []
    listed = FetchPolicy(allow_hosts=frozenset({f"127.0.0.1:{port}"}))
    assert ChartFetcher(listed, None).http_chart(repo.url, "demo", "1.0.0").version == "1.0.0"


def test_redirect_to_an_unlisted_host_is_refused(repo: ChartRepo, charts: Path, tmp_path: Path) -> None:
    with serve_chart_repo(ChartRepo(charts)) as elsewhere:
        repo.redirects["/demo-1.0.0.tgz"] = f"{elsewhere.url}/demo-1.0.0.tgz"
        error = fail(ChartFetcher(allow(repo.url), None).http_chart, repo.url, "demo", "1.0.0")
        assert error.reason == "not-allowed" and host_of(elsewhere.url) in str(error)
        assert elsewhere.log == []
        # Listed, it is followed, and the repository's credentials stay with the repository.
        policy = FetchPolicy(allow_hosts=frozenset({host_of(repo.url), host_of(elsewhere.url)}),
                             credentials={host_of(repo.url): Credential("reader", "pw-for-repo-only")})
        assert ChartFetcher(policy, None).http_chart(repo.url, "demo", "1.0.0").version == "1.0.0"
        assert [e.authorization for e in elsewhere.log] == [None]
        assert repo.log[-1].authorization is not None


def test_redirect_loop_stops_after_three(repo: ChartRepo) -> None:
    for n in range(5):
        repo.redirects[f"/hop{n}"] = f"/hop{n + 1}"
    repo.redirects["/index.yaml"] = "/hop0"
    error = fail(ChartFetcher(allow(repo.url), None).http_chart, repo.url, "demo", "1.0.0")
    assert error.reason == "invalid" and "redirected more than 3" in str(error)
    assert repo.paths() == ["/index.yaml", "/hop0", "/hop1", "/hop2"]


def test_endless_archive_is_cut_at_the_limit(repo: ChartRepo) -> None:
    repo.endless.add("/demo-2.0.0.tgz")
    limits = FetchLimits(archive_bytes=2 * MIB)
    tracemalloc.start()
    started = time.perf_counter()
    error = fail(ChartFetcher(allow(repo.url, limits=limits), None).http_chart, repo.url, "demo", "2.0.0")
    elapsed = time.perf_counter() - started
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert error.reason == "too-large"
    assert elapsed < 5 and peak < 16 * MIB, (elapsed, peak)
    deadline = time.monotonic() + 5
    while not repo.streamed and time.monotonic() < deadline:
        time.sleep(0.02)
    assert repo.streamed and repo.streamed[0] < repo.endless_cap  # the server saw the client leave


def test_two_gib_content_length_is_refused_before_reading(repo: ChartRepo) -> None:
    repo.lying_length["/demo-2.0.0.tgz"] = 2 * 1024 * MIB
    started = time.perf_counter()
    error = fail(ChartFetcher(allow(repo.url), None).http_chart, repo.url, "demo", "2.0.0")
    assert error.reason == "too-large" and str(2 * 1024 * MIB) in str(error)
    assert time.perf_counter() - started < 2  # the server would hold the body for 5 s


def test_an_endless_index_is_cut_too(repo: ChartRepo) -> None:
    repo.endless.add("/index.yaml")
    limits = FetchLimits(index_bytes=1 * MIB)
    error = fail(ChartFetcher(allow(repo.url, limits=limits), None).http_chart, repo.url, "demo", "1.0.0")
    assert error.reason == "too-large"


def _tgz(members: list[tuple[tarfile.TarInfo, bytes]]) -> bytes:
    buffer = io.BytesIO()
    with gzip.GzipFile(fileobj=buffer, mode="wb", compresslevel=9, mtime=0) as gz:
        with tarfile.open(fileobj=gz, mode="w") as tar:  # type: ignore[arg-type]
            for info, data in members:
                tar.addfile(info, io.BytesIO(data) if data else None)
    return buffer.getvalue()


def _file(name: str, data: bytes) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    return info, data


CHART_YAML = _file("demo/Chart.yaml", b"apiVersion: v2\nname: demo\nversion: 1.0.0\n")


def test_gzip_bomb_is_refused_through_the_repository(repo: ChartRepo, charts: Path) -> None:
    bomb = _tgz([CHART_YAML, _file("demo/templates/zeros.yaml", b"\0" * (64 * MIB))])
    assert len(bomb) < 200 * 1024
    (charts / "bomb.tgz").write_bytes(bomb)
    write_index(charts, {"demo": [{"version": "1.0.0", "urls": ["bomb.tgz"], "digest": "auto"}]})
    limits = FetchLimits(unpacked_bytes=8 * MIB)
    tracemalloc.start()
    error = fail(ChartFetcher(allow(repo.url, limits=limits), None).http_chart, repo.url, "demo", "1.0.0")
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert error.reason == "too-large" and "unpacks to more than" in str(error)
    assert peak < 16 * MIB


@pytest.mark.parametrize(
    ("members", "reason", "words"),
    [
        ([CHART_YAML, _file("../../etc/evil", b"x")], "invalid", "leaves the chart"),
        ([CHART_YAML, _file("/etc/evil", b"x")], "invalid", "absolute path"),
        ([CHART_YAML] + [_file(f"demo/f{n}", b"") for n in range(30)], "too-large", "more than 20 files"),
        ([_file("demo/values.yaml", b"a: 1\n")], "invalid", "no <chart>/Chart.yaml"),
    ],
)
def test_unsafe_archives(members: list[tuple[tarfile.TarInfo, bytes]], reason: str, words: str) -> None:
    with pytest.raises(ChartFetchError) as caught:
        inspect_archive(_tgz(members), FetchLimits(files=20))
    assert caught.value.reason == reason and words in str(caught.value)


def test_symlink_member_is_invalid() -> None:
    link = tarfile.TarInfo("demo/templates/passwd")
    link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
    with pytest.raises(ChartFetchError) as caught:
        inspect_archive(_tgz([CHART_YAML, (link, b"")]), FetchLimits())
    assert caught.value.reason == "invalid"


def test_not_gzip_is_invalid() -> None:
    with pytest.raises(ChartFetchError) as caught:
        inspect_archive(b"PK\x03\x04 not a tarball", FetchLimits())
    assert caught.value.reason == "invalid"


def test_unreachable_host(tmp_path: Path) -> None:
    with serve_chart_repo(ChartRepo(tmp_path)) as served:
        url = served.url
    error = fail(ChartFetcher(allow(url), None).http_chart, url, "demo", "1.0.0")  # the server is gone
    assert error.reason == "unreachable"


def test_credential_repr_hides_values() -> None:
    cred = Credential("alice", "p4ssw0rd", "tok3n-abc")
    assert "alice" not in repr(cred) and "p4ssw0rd" not in repr(cred) and "tok3n" not in repr(cred)


# -- OCI registries (Debian's docker-registry) --------------------------------------------------------------------


def push(tmp_path: Path, reg: Registry, version: str, name: str = "demo") -> Path:
    tgz = package_chart(tmp_path, name, version, destination=tmp_path / "oci-out")
    if reg.auth is None:
        helm_python.push(tgz, f"{reg.oci}/charts", plain_http=True)
    else:
        client = helm_python.RegistryClient(plain_http=True, credentials_file=tmp_path / "registry-creds.json")
        client.login(reg.host, *reg.auth, plain_http=True)
        client.push(tgz, f"{reg.oci}/charts", plain_http=True)
    return tgz


def manifest_digest(reg: Registry, tag: str) -> str:
    request = urllib.request.Request(f"http://{reg.host}/v2/charts/demo/manifests/{tag}",
                                     headers={"Accept": "application/vnd.oci.image.manifest.v1+json"})
    with urllib.request.urlopen(request, timeout=5) as response:
        return "sha256:" + hashlib.sha256(response.read()).hexdigest()


def test_oci_tag_semver_and_digest(registry: Registry, tmp_path: Path) -> None:  # noqa: F811
    archives = {v: push(tmp_path, registry, v) for v in ("1.2.3", "1.2.9", "1.3.0", "2.0.0-rc.1", "1.4.0+build.7")}
    fetcher = ChartFetcher(FetchPolicy(allow_hosts=frozenset({registry.host})), None)
    url = f"{registry.oci}/charts/demo"
    by_tag = fetcher.oci_chart(url, tag="1.2.3", insecure=True)
    assert (by_tag.name, by_tag.version, by_tag.digest) == ("demo", "1.2.3", sha(archives["1.2.3"]))
    assert by_tag.url == f"{url}:1.2.3"
    assert fetcher.oci_chart(url, semver="~1.2", insecure=True).version == "1.2.9"
    assert fetcher.oci_chart(url, semver=">=1.0", insecure=True).version == "1.4.0+build.7"  # tag 1.4.0_build.7
    assert fetcher.oci_chart(url, semver=">=2.0.0-0", insecure=True).version == "2.0.0-rc.1"
    assert fetcher.oci_chart(url, semver="1.4.0+build.7", insecure=True).version == "1.4.0+build.7"
    assert [r for r in registry.requests() if "tags/list" in r] == ["GET /v2/charts/demo/tags/list HTTP/1.1"]
    digest = manifest_digest(registry, "1.3.0")
    pinned = fetcher.oci_chart(url, digest=digest, insecure=True)
    assert pinned.version == "1.3.0" and pinned.url == f"{url}@{digest}" and pinned.digest == sha(archives["1.3.0"])
    error = fail(fetcher.oci_chart, url, digest="sha256:" + "0" * 64, insecure=True)
    assert error.reason == "not-found"
    error = fail(fetcher.oci_chart, url, tag="1.2.3", insecure=True, layer_media_type="application/x-other")
    assert error.reason == "invalid" and "application/x-other" in str(error)
    error = fail(fetcher.oci_chart, url, semver=">=5", insecure=True)
    assert error.reason == "not-found"


def test_oci_cache_hit_makes_no_request(registry: Registry, tmp_path: Path) -> None:  # noqa: F811
    push(tmp_path, registry, "0.4.0")
    cache, url = tmp_path / "cache", f"{registry.oci}/charts/demo"
    policy = FetchPolicy(allow_hosts=frozenset({registry.host}))
    digest = manifest_digest(registry, "0.4.0")
    started = time.perf_counter()
    cold = ChartFetcher(policy, cache).oci_chart(url, digest=digest, insecure=True)
    cold_seconds = time.perf_counter() - started
    seen = len(registry.requests())
    assert seen == 2  # the manifest and the blob
    started = time.perf_counter()
    warm = ChartFetcher(policy, cache).oci_chart(url, digest=digest, insecure=True)
    warm_seconds = time.perf_counter() - started
    by_version = ChartFetcher(policy, cache).oci_chart(url, semver="0.4.0", insecure=True)
    time.sleep(0.2)  # the access log is written after the response
    # The digest: nothing. A first fetch by version tag: its manifest only (the blob is in the content cache)...
    assert registry.requests()[seen:] == ["GET /v2/charts/demo/manifests/0.4.0 HTTP/1.1"]
    assert warm == cold and by_version.archive == cold.archive
    ChartFetcher(policy, cache).oci_chart(url, semver="0.4.0", insecure=True)
    time.sleep(0.2)
    assert len(registry.requests()) == seen + 1  # ...and that version, once cached, nothing
    print(f"\nOCI fetch: cold {cold_seconds * 1000:.1f} ms, warm (cached) {warm_seconds * 1000:.2f} ms")


def test_oci_unlisted_registry_is_refused(registry: Registry, tmp_path: Path) -> None:  # noqa: F811
    push(tmp_path, registry, "1.0.0")
    error = fail(ChartFetcher(FetchPolicy(), None).oci_chart, f"{registry.oci}/charts/demo", tag="1.0.0", insecure=True)
    assert error.reason == "not-allowed" and registry.host in str(error)
    assert registry.requests() == []


def test_oci_basic_auth_registry(auth_registry: Registry, tmp_path: Path) -> None:  # noqa: F811
    assert auth_registry.auth is not None
    user, password = auth_registry.auth
    push(tmp_path, auth_registry, "3.1.0")
    url = f"{auth_registry.oci}/charts/demo"
    anonymous = FetchPolicy(allow_hosts=frozenset({auth_registry.host}))
    error = fail(ChartFetcher(anonymous, None).oci_chart, url, tag="3.1.0", insecure=True)
    assert error.reason == "needs-credentials"
    wrong = FetchPolicy(allow_hosts=frozenset({auth_registry.host}),
                        credentials={"secret:apps/oci": Credential(user, "not-the-password-123")})
    error = fail(ChartFetcher(wrong, None).oci_chart, url, tag="3.1.0", insecure=True, secret_ref="apps/oci")
    assert error.reason == "needs-credentials" and "not-the-password-123" not in str(error)
    good = FetchPolicy(allow_hosts=frozenset({auth_registry.host}),
                       credentials={"secret:apps/oci": Credential(user, password)})
    fetcher = ChartFetcher(good, None)
    assert fetcher.oci_chart(url, semver="^3", insecure=True, secret_ref="apps/oci").version == "3.1.0"
    missing = fail(fetcher.oci_chart, url, tag="9.9.9", insecure=True, secret_ref="apps/oci")
    assert missing.reason == "not-found" and password not in str(missing)


def test_oci_digests_are_verified(registry: Registry, tmp_path: Path) -> None:  # noqa: F811
    push(tmp_path, registry, "1.0.0")
    real = manifest_digest(registry, "1.0.0")
    # The real registry holds no manifest under another digest: 404.
    error = fail(ChartFetcher(FetchPolicy(allow_hosts=frozenset({registry.host})), None).oci_chart,
                 f"{registry.oci}/charts/demo", digest=real[:-4] + "abcd", insecure=True)
    assert error.reason == "not-found"
    # A lying registry answers any digest, and serves a layer that is not what the manifest says: both refused.
    archive = package_chart(tmp_path, "demo", "6.0.0", destination=tmp_path / "liar").read_bytes()
    with serve_bearer_registry(BearerRegistry(archive, "6.0.0", any_digest=True, corrupt_blob=True)) as fake:
        fetcher = ChartFetcher(FetchPolicy(allow_hosts=frozenset({host_of(fake.url)})), None)
        url = f"oci://{host_of(fake.url)}/charts/demo"
        error = fail(fetcher.oci_chart, url, digest="sha256:" + "1" * 64, insecure=True)
        assert error.reason == "invalid" and "does not have that digest" in str(error)
        error = fail(fetcher.oci_chart, url, tag="6.0.0", insecure=True)
        assert error.reason == "invalid" and "does not have its digest" in str(error)


def test_oci_bearer_token_flow(tmp_path: Path) -> None:
    archive = package_chart(tmp_path, "demo", "5.0.0", destination=tmp_path / "bearer").read_bytes()
    with serve_bearer_registry(BearerRegistry(archive, "5.0.0", auth=("robot", "robot-pass-777"))) as fake:
        host = host_of(fake.url)
        url = f"oci://{host}/charts/demo"
        error = fail(ChartFetcher(FetchPolicy(allow_hosts=frozenset({host})), None).oci_chart, url, tag="5.0.0",
                     insecure=True)
        assert error.reason == "needs-credentials"
        fake.log.clear()
        policy = FetchPolicy(allow_hosts=frozenset({host}), credentials={host: Credential("robot", "robot-pass-777")})
        chart = ChartFetcher(policy, None).oci_chart(url, tag="5.0.0", insecure=True)
        assert chart.version == "5.0.0" and chart.archive == archive
        paths = [p for p, _ in fake.log]
        assert paths[0] == "/v2/charts/demo/manifests/5.0.0" and fake.log[0][1] is None  # anonymous first
        assert paths[1].startswith("/token?") and "scope=repository%3Acharts%2Fdemo%3Apull" in paths[1]
        assert fake.log[1][1] is not None and fake.log[1][1].startswith("Basic ")
        assert fake.log[2] == ("/v2/charts/demo/manifests/5.0.0", f"Bearer {fake.token}")
        assert fake.log[3][1] == f"Bearer {fake.token}"  # the blob, with the token already known
        assert len(fake.log) == 4


def test_registry_fixture_fails_in_ci_without_the_binary(monkeypatch: pytest.MonkeyPatch) -> None:
    """In CI the OCI tests must run: a missing registry binary fails them instead of skipping."""
    from tests.fakes import registry as fake_registry

    monkeypatch.setattr(fake_registry, "BINARY", "/nonexistent/docker-registry")
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception):
        fake_registry._binary()
    monkeypatch.setenv("CI", "false")
    with pytest.raises(pytest.skip.Exception):
        fake_registry._binary()
