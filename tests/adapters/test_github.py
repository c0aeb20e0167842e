"""bot.adapters.github against the loopback fake GitHub, over real HTTP (no PyGithub method is patched)."""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from typing import Iterator

import pytest
import requests
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from bot.engine.core.errors import ConfigError, InfraError
from bot.adapters.github import GitHubAdapter, GitHubAuth, GitHubError, GitHubNotFound
from bot.engine.chatops.github_models import PullRequestInfo
from tests.fakes import Effect, FakeGitHub

TOKEN = "ghp_" + "T0k3nS3cr3t" * 3
BOT = "fluxwarden-bot"
REPO = "octo/flux"
APP_ID = 4242
INSTALLATION_ID = 77
SHA = "a" * 40
MARKER = "fluxwarden:review prod"


@pytest.fixture(scope="module")
def rsa_key() -> tuple[str, str]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()).decode()
    public = key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo).decode()
    return private, public


@pytest.fixture
def fake(rsa_key: tuple[str, str]) -> Iterator[FakeGitHub]:
    fake = FakeGitHub()
    with fake.start_in_thread():
        fake.add_user(BOT, token=TOKEN)
        fake.add_repo(REPO)
        fake.set_permission(REPO, BOT, "write")
        fake.add_app(APP_ID, "fluxwarden", public_key_pem=rsa_key[1])
        fake.add_installation(INSTALLATION_ID, APP_ID)
        yield fake


def token_adapter(fake: FakeGitHub, **kw: object) -> GitHubAdapter:
    opts: dict = {"timeout": 5, "retries": 3, "backoff": 0.01, "max_rate_limit_wait": 5, "min_write_interval": 0}
    opts.update(kw)
    return GitHubAdapter(GitHubAuth(token=opts.pop("token", TOKEN), api_url=fake.base_url), **opts)


def app_adapter(fake: FakeGitHub, rsa_key: tuple[str, str], **kw: object) -> GitHubAdapter:
    opts: dict = {"timeout": 5, "retries": 3, "backoff": 0.01, "min_write_interval": 0}
    opts.update(kw)
    auth = GitHubAuth(app_id=APP_ID, private_key=rsa_key[0], installation_id=INSTALLATION_ID, api_url=fake.base_url)
    return GitHubAdapter(auth, **opts)


def marked(body: str, part: int = 1, marker: str = MARKER) -> str:
    line = f"<!-- {marker} -->" if part == 1 else f"<!-- {marker} part={part} -->"
    return f"{line}\n{body}"


def writes(fake: FakeGitHub) -> list[tuple[str, str]]:
    return [(e.method, e.path) for e in fake.effects]


# ------------------------------------------------------------------------------ auth


def test_token_auth_reads_a_pull_request(fake: FakeGitHub) -> None:
    fake.add_pull(REPO, head_sha=SHA, head_ref="feat/x", base_sha="b" * 40, draft=True, author="alice")
    gh = token_adapter(fake)
    assert not gh.is_app and gh.installation_token() == TOKEN
    info = gh.pull_request(REPO, 1)
    assert info == PullRequestInfo(
        number=1, state="open", draft=True, head_sha=SHA, head_ref="feat/x", head_repo=REPO,
        head_clone_url=f"{fake.web_url}/{REPO}.git", base_ref="main", base_sha="b" * 40, fork=False, author="alice",
    )
    assert [r.path for r in fake.requests] == [f"/repos/{REPO}/pulls/1"]  # lazy PyGithub: one request
    assert fake.requests[0].actor == BOT
    assert gh.rate_limit_remaining == 4999


def test_fork_and_deleted_fork_pull_requests(fake: FakeGitHub) -> None:
    fake.add_pull(REPO, head_sha=SHA, head_repo="mallory/flux", head_clone_url="https://example.invalid/mallory/flux.git")
    fake.add_pull(REPO, head_sha="c" * 40, head_repo=None)
    gh = token_adapter(fake)
    fork = gh.pull_request(REPO, 1)
    assert fork.fork and fork.head_repo == "mallory/flux" and fork.head_clone_url == "https://example.invalid/mallory/flux.git"
    gone = gh.pull_request(REPO, 2)
    assert gone.fork and gone.head_repo is None and gone.head_clone_url is None


def test_open_pull_requests_follows_pagination(fake: FakeGitHub) -> None:
    for i in range(25):
        fake.add_pull(REPO, head_sha=f"{i:040x}", head_ref=f"b{i}")
    fake.add_pull(REPO, head_sha="f" * 40, state="closed")
    gh = token_adapter(fake, per_page=10)
    pulls = gh.open_pull_requests(REPO)
    assert sorted(p.number for p in pulls) == list(range(1, 26))
    assert len(fake.find_requests("GET", r"/pulls$")) == 3


def test_missing_pull_request_is_not_found(fake: FakeGitHub) -> None:
    with pytest.raises(GitHubNotFound) as err:
        token_adapter(fake).pull_request(REPO, 99)
    assert err.value.status == 404 and isinstance(err.value, InfraError)


def test_app_auth_mints_one_installation_token_and_acts_as_the_bot(fake: FakeGitHub, rsa_key: tuple[str, str]) -> None:
    fake.add_pull(REPO, head_sha=SHA)
    gh = app_adapter(fake, rsa_key)
    assert gh.is_app
    assert gh.pull_request(REPO, 1).head_sha == SHA
    token = gh.installation_token()
    assert token == fake.issued_tokens[-1] and token.startswith("ghs_")
    gh.open_pull_requests(REPO)
    assert len(fake.issued_tokens) == 1  # cached until close to expiry
    mint = fake.find_requests("POST", r"/app/installations/77/access_tokens$")
    assert len(mint) == 1 and mint[0].actor == f"app:{APP_ID}"
    api = [r for r in fake.requests if r.path.startswith("/repos/")]
    assert {r.actor for r in api} == {"fluxwarden[bot]"}
    assert gh.bot_login == "fluxwarden[bot]"


def test_app_token_is_refreshed_when_it_nears_expiry(fake: FakeGitHub, rsa_key: tuple[str, str]) -> None:
    fake.installation_token_ttl = 5  # inside PyGithub's 20 s refresh window: every use mints a new one
    gh = app_adapter(fake, rsa_key)
    first, second = gh.installation_token(), gh.installation_token()
    assert first != second and fake.issued_tokens == [first, second]


def test_app_jwt_signed_with_another_key_is_rejected(fake: FakeGitHub) -> None:
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = other.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()).decode()
    gh = GitHubAdapter(GitHubAuth(app_id=APP_ID, private_key=pem, installation_id=INSTALLATION_ID, api_url=fake.base_url), retries=0)
    with pytest.raises(GitHubError) as err:
        gh.installation_token()
    assert err.value.status == 401
    assert "PRIVATE KEY" not in str(err.value) and pem[40:80] not in str(err.value)


def test_unknown_token_is_401_without_the_token_anywhere(fake: FakeGitHub, caplog: pytest.LogCaptureFixture) -> None:
    bad = "ghp_" + "NotAKnownToken" * 3
    caplog.set_level(logging.DEBUG)
    gh = token_adapter(fake, token=bad)
    with pytest.raises(GitHubError) as err:
        gh.pull_request(REPO, 1)
    exc = err.value
    assert exc.status == 401 and "401" in str(exc) and "Bad credentials" in str(exc)
    for text in (str(exc), repr(exc), repr(exc.args), caplog.text, repr(gh), repr(gh.auth), str(gh.auth)):
        assert bad not in text
    assert exc.__cause__ is None and exc.__suppress_context__
    assert len(fake.requests) == 1  # a 401 is not retried


def test_debug_logs_of_pygithub_never_show_tokens(fake: FakeGitHub, rsa_key: tuple[str, str], caplog: pytest.LogCaptureFixture) -> None:
    fake.add_pull(REPO, head_sha=SHA)
    pygithub_logger = logging.getLogger("github")
    old_level = pygithub_logger.level
    pygithub_logger.setLevel(logging.DEBUG)  # an operator debugging: PyGithub then logs response bodies
    caplog.set_level(logging.DEBUG)
    try:
        for gh in (app_adapter(fake, rsa_key), token_adapter(fake)):
            gh.pull_request(REPO, 1)
            token = gh.installation_token()
            assert token and token not in caplog.text
    finally:
        pygithub_logger.setLevel(old_level)
    assert "access_tokens" in caplog.text and "***" in caplog.text  # the mint was logged, redacted
    assert TOKEN not in caplog.text and fake.issued_tokens[0] not in caplog.text


def test_auth_repr_masks_secrets(rsa_key: tuple[str, str]) -> None:
    token_auth = GitHubAuth(token=TOKEN)
    app_auth = GitHubAuth(app_id=1, private_key=rsa_key[0], installation_id=2)
    for auth in (token_auth, app_auth):
        for text in (repr(auth), str(auth), f"{auth}", repr([auth])):
            assert TOKEN not in text and "PRIVATE KEY" not in text and "***" in text
    assert "app_id=1" in repr(app_auth) and "installation_id=2" in repr(app_auth)


@pytest.mark.parametrize(
    "auth",
    [
        GitHubAuth(),
        GitHubAuth(token=TOKEN, app_id=1),
        GitHubAuth(app_id=1, private_key="x"),
        GitHubAuth(token=" "),
        GitHubAuth(token=TOKEN, api_url="ftp://example"),
        GitHubAuth(app_id=1, private_key="", installation_id=2),
    ],
)
def test_invalid_auth_is_a_config_error(auth: GitHubAuth) -> None:
    with pytest.raises(ConfigError):
        GitHubAdapter(auth)


def test_bad_private_key_is_a_config_error_that_hides_the_key() -> None:
    secret = "-----BEGIN RSA PRIVATE KEY-----\nc2VjcmV0LWtleS1ieXRlcw==\n-----END RSA PRIVATE KEY-----\n"
    with pytest.raises(ConfigError) as err:
        GitHubAdapter(GitHubAuth(app_id=1, private_key=secret, installation_id=2))
    assert "c2VjcmV0" not in str(err.value) and err.value.__cause__ is None


# ------------------------------------------------------------------------------ permissions


@pytest.mark.parametrize(
    ("role", "legacy", "expected"),
    [
        ("admin", None, "admin"),
        ("maintain", None, "maintain"),
        ("write", None, "write"),
        ("triage", None, "triage"),
        ("read", None, "read"),
        ("security-reviewer", "read", "read"),  # a custom role: its legacy base permission
        ("release-manager", "write", "write"),
    ],
)
def test_permission_mapping(fake: FakeGitHub, role: str, legacy: str | None, expected: str) -> None:
    fake.set_permission(REPO, "carol", role, legacy=legacy)
    assert token_adapter(fake).permission(REPO, "carol") == expected


def test_permission_of_outsiders_and_unknown_users(fake: FakeGitHub) -> None:
    fake.add_user("dave")
    fake.add_repo("octo/secret", private=True)
    gh = token_adapter(fake)
    assert gh.permission(REPO, "dave") == "read"  # public repository
    assert gh.permission("octo/secret", "dave") == "none"
    assert gh.permission(REPO, "no-such-user") == "none"  # 404
    with pytest.raises(ValueError):
        gh.permission("not-a-repo", "dave")


def test_fake_permission_endpoint_has_legacy_and_role_fields(fake: FakeGitHub) -> None:
    fake.set_permission(REPO, "mia", "maintain")
    fake.set_permission(REPO, "tim", "triage")
    headers = {"Authorization": f"Bearer {TOKEN}"}
    got = {}
    for login in ("mia", "tim"):
        resp = requests.get(f"{fake.base_url}/repos/{REPO}/collaborators/{login}/permission", headers=headers, timeout=5)
        assert resp.status_code == 200
        got[login] = (resp.json()["permission"], resp.json()["role_name"])
        for header in ("X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "X-RateLimit-Used", "X-RateLimit-Resource", "ETag"):
            assert header in resp.headers
    assert got == {"mia": ("write", "maintain"), "tim": ("read", "triage")}
    again = requests.get(resp.url, headers={**headers, "If-None-Match": resp.headers["ETag"]}, timeout=5)
    assert again.status_code == 304
    assert requests.get(resp.url, headers={"Authorization": "token nope"}, timeout=5).status_code == 401


# ------------------------------------------------------------------------------ comments


def test_upsert_comments_creates_then_is_idempotent(fake: FakeGitHub) -> None:
    fake.add_pull(REPO, head_sha=SHA)
    gh = token_adapter(fake)
    bodies = [marked("one"), marked("two", 2), marked("three", 3)]
    ids = gh.upsert_comments(REPO, 1, MARKER, bodies)
    assert len(ids) == 3 and [c.body for c in fake.issue_comments(REPO, 1)] == bodies
    assert {c.user for c in fake.issue_comments(REPO, 1)} == {BOT}
    assert writes(fake) == [("POST", f"/repos/{REPO}/issues/1/comments")] * 3
    fake.clear_logs()
    assert gh.upsert_comments(REPO, 1, MARKER, bodies) == ids
    assert fake.effects == []  # unchanged: no PATCH at all


def test_upsert_comments_edits_in_place_only_what_changed(fake: FakeGitHub) -> None:
    fake.add_pull(REPO, head_sha=SHA)
    gh = token_adapter(fake)
    ids = gh.upsert_comments(REPO, 1, MARKER, [marked("one"), marked("two", 2)])
    fake.clear_logs()
    new = [marked("one"), marked("two, revised", 2)]
    assert gh.upsert_comments(REPO, 1, MARKER, new) == ids
    effects = fake.effects
    assert [(e.method, e.path) for e in effects] == [("PATCH", f"/repos/{REPO}/issues/comments/{ids[1]}")]
    assert isinstance(effects[0], Effect) and effects[0].json == {"body": new[1]} and effects[0].actor == BOT
    assert [c.body for c in fake.issue_comments(REPO, 1)] == new


def test_upsert_comments_shrinking_deletes_surplus_parts(fake: FakeGitHub) -> None:
    fake.add_pull(REPO, head_sha=SHA)
    gh = token_adapter(fake)
    ids = gh.upsert_comments(REPO, 1, MARKER, [marked("1"), marked("2", 2), marked("3", 3)])
    fake.clear_logs()
    assert gh.upsert_comments(REPO, 1, MARKER, [marked("all in one")]) == ids[:1]
    assert writes(fake) == [
        ("PATCH", f"/repos/{REPO}/issues/comments/{ids[0]}"),
        ("DELETE", f"/repos/{REPO}/issues/comments/{ids[1]}"),
        ("DELETE", f"/repos/{REPO}/issues/comments/{ids[2]}"),
    ]
    assert [c.id for c in fake.issue_comments(REPO, 1)] == ids[:1]
    fake.clear_logs()
    assert gh.upsert_comments(REPO, 1, MARKER, [marked("1"), marked("2", 2)])[0] == ids[0]
    assert [e.method for e in fake.effects] == ["PATCH", "POST"]


def test_upsert_comments_leaves_other_authors_and_markers_alone(fake: FakeGitHub) -> None:
    fake.add_pull(REPO, head_sha=SHA)
    quoted = fake.add_comment(REPO, 1, f"> <!-- {MARKER} -->\n> old report\n\nwhy?", user="alice")
    forged = fake.add_comment(REPO, 1, f"<!-- {MARKER} -->\nI typed the marker myself", user="mallory")
    other_cluster = fake.add_comment(REPO, 1, "<!-- fluxwarden:review dev -->\ndev report", user=BOT)
    mentions = fake.add_comment(REPO, 1, f"note\n<!-- {MARKER} -->", user=BOT)  # marker not on line 1
    gh = token_adapter(fake)
    [mine] = gh.upsert_comments(REPO, 1, MARKER, [marked("report")])
    assert mine not in {quoted.id, forged.id, other_cluster.id, mentions.id}
    assert writes(fake) == [("POST", f"/repos/{REPO}/issues/1/comments")]
    assert len(fake.issue_comments(REPO, 1)) == 5
    fake.clear_logs()
    gh.upsert_comments(REPO, 1, MARKER, [])  # no report: remove only ours
    assert writes(fake) == [("DELETE", f"/repos/{REPO}/issues/comments/{mine}")]


def test_upsert_comments_heals_duplicate_parts(fake: FakeGitHub) -> None:
    fake.add_pull(REPO, head_sha=SHA)
    first = fake.add_comment(REPO, 1, marked("report"), user=BOT)
    dup = fake.add_comment(REPO, 1, marked("report"), user=BOT)  # e.g. a POST retried after a timeout
    assert token_adapter(fake).upsert_comments(REPO, 1, MARKER, [marked("report")]) == [first.id]
    assert writes(fake) == [("DELETE", f"/repos/{REPO}/issues/comments/{dup.id}")]


def test_upsert_comments_as_app_uses_the_bot_login(fake: FakeGitHub, rsa_key: tuple[str, str]) -> None:
    fake.add_pull(REPO, head_sha=SHA)
    gh = app_adapter(fake, rsa_key)
    ids = gh.upsert_comments(REPO, 1, MARKER, [marked("v1")])
    assert gh.upsert_comments(REPO, 1, MARKER, [marked("v2")]) == ids
    [comment] = fake.issue_comments(REPO, 1)
    assert comment.user == "fluxwarden[bot]" and comment.body == marked("v2")
    assert len(fake.find_requests("GET", r"^/app$")) == 1  # the login is looked up once
    assert not fake.find_requests("GET", r"^/user$")  # (GitHub refuses /user to installation tokens)


def test_upsert_comments_rejects_bodies_without_their_marker(fake: FakeGitHub) -> None:
    gh = token_adapter(fake, bot_login=BOT)
    with pytest.raises(ValueError):
        gh.upsert_comments(REPO, 1, MARKER, ["no marker"])
    with pytest.raises(ValueError):
        gh.upsert_comments(REPO, 1, MARKER, [marked("a"), marked("b", 3)])
    with pytest.raises(ValueError):
        gh.upsert_comments(REPO, 1, MARKER, [marked("x" * 70000)])
    assert fake.requests == []


# ------------------------------------------------------------------------------ reactions and statuses


def test_add_reaction(fake: FakeGitHub) -> None:
    fake.add_pull(REPO, head_sha=SHA)
    comment = fake.add_comment(REPO, 1, "/fluxwarden check", user="alice")
    gh = token_adapter(fake)
    gh.add_reaction(REPO, comment.id)
    gh.add_reaction(REPO, comment.id)  # GitHub answers 200 with the existing reaction
    gh.add_reaction(REPO, comment.id, "rocket")
    assert [(r.content, r.user) for r in fake.reactions_for(comment.id)] == [("eyes", BOT), ("rocket", BOT)]
    assert fake.find_effects("POST", r"/reactions$")[0].json == {"content": "eyes"}
    with pytest.raises(ValueError):
        gh.add_reaction(REPO, comment.id, "party")
    with pytest.raises(GitHubNotFound):
        gh.add_reaction(REPO, 123456)


def test_statuses_truncate_and_latest_status(fake: FakeGitHub) -> None:
    gh = token_adapter(fake)
    assert gh.latest_status(REPO, SHA, "fluxwarden/prod") is None
    gh.set_status(REPO, SHA, "fluxwarden/prod", "pending", "rendering", target_url="https://ci.example/1")
    gh.set_status(REPO, SHA, "fluxwarden/prod", "failure", "x" * 300)
    gh.set_status(REPO, SHA, "fluxwarden/dev", "success", "ok")
    newest = fake.statuses_for(REPO, SHA)
    assert [s.state for s in newest] == ["success", "failure", "pending"]  # newest first
    assert len(newest[1].description) == 140 and newest[1].description.endswith("…")
    assert newest[2].target_url == "https://ci.example/1"
    assert gh.latest_status(REPO, SHA, "fluxwarden/prod") == "failure"
    assert gh.latest_status(REPO, SHA, "fluxwarden/dev") == "success"
    with pytest.raises(ValueError):
        gh.set_status(REPO, SHA, "fluxwarden/prod", "done", "?")


def test_latest_status_pages_past_other_contexts(fake: FakeGitHub) -> None:
    fake.add_status(REPO, SHA, state="success", context="fluxwarden/prod")
    for i in range(130):
        fake.add_status(REPO, SHA, state="pending", context=f"ci/{i}")
    fake.clear_logs()
    assert token_adapter(fake).latest_status(REPO, SHA, "fluxwarden/prod") == "success"
    assert [r.query.get("page", "1") for r in fake.requests] == ["1", "2"]


# ------------------------------------------------------------------------------ check runs


def annotation(i: int) -> dict:
    return {"path": f"clusters/prod/app{i}.yaml", "start_line": i + 1, "end_line": i + 1, "annotation_level": "warning", "message": f"finding {i}"}


def test_check_run_batches_annotations_50_per_request(fake: FakeGitHub, rsa_key: tuple[str, str]) -> None:
    gh = app_adapter(fake, rsa_key)
    run_id = gh.upsert_check_run(
        REPO, SHA, "fluxwarden/prod", status="completed", conclusion="failure", title="3 errors",
        summary="s" * 70000, text="details", annotations=[annotation(i) for i in range(120)],
    )
    [run] = fake.check_runs_for(REPO, SHA)
    assert run.id == run_id and run.status == "completed" and run.conclusion == "failure"
    assert len(run.annotations) == 120 and run.annotations[119]["message"] == "finding 119"
    assert len(run.summary) == 65535 and run.text == "details" and run.app_id == APP_ID
    posts = fake.find_effects("POST", r"/check-runs$")
    patches = fake.find_effects("PATCH", rf"/check-runs/{run_id}$")
    assert len(posts) == 1 and len(patches) == 2
    assert [len(e.json["output"]["annotations"]) for e in posts + patches] == [50, 50, 20]
    assert all("status" not in e.json for e in patches)  # later batches only add output


def test_check_run_upsert_reuses_an_open_run_and_supersedes_a_completed_one(fake: FakeGitHub, rsa_key: tuple[str, str]) -> None:
    gh = app_adapter(fake, rsa_key)
    common = {"title": "Fluxwarden", "summary": "…"}
    started = gh.upsert_check_run(REPO, SHA, "fluxwarden/prod", status="in_progress", conclusion=None, **common)
    done = gh.upsert_check_run(REPO, SHA, "fluxwarden/prod", status="completed", conclusion="success", annotations=[annotation(1)], **common)
    assert done == started
    rerun = gh.upsert_check_run(REPO, SHA, "fluxwarden/prod", status="in_progress", conclusion=None, **common)
    assert rerun != started
    runs = fake.check_runs_for(REPO, SHA)
    assert [(r.id, r.status, len(r.annotations)) for r in runs] == [(started, "completed", 1), (rerun, "in_progress", 0)]
    other = gh.upsert_check_run(REPO, SHA, "fluxwarden/dev", status="queued", conclusion=None, **common)
    assert other not in (started, rerun)


def test_check_runs_need_an_app(fake: FakeGitHub) -> None:
    gh = token_adapter(fake)
    with pytest.raises(GitHubError):
        gh.upsert_check_run(REPO, SHA, "x", status="queued", conclusion=None, title="t", summary="s")
    assert fake.requests == []
    # and the fake refuses a token too, as GitHub does
    resp = requests.post(f"{fake.base_url}/repos/{REPO}/check-runs", json={"name": "x", "head_sha": SHA}, headers={"Authorization": f"token {TOKEN}"}, timeout=5)
    assert resp.status_code == 403


def test_check_run_arguments_are_validated(fake: FakeGitHub, rsa_key: tuple[str, str]) -> None:
    gh = app_adapter(fake, rsa_key)
    with pytest.raises(ValueError):
        gh.upsert_check_run(REPO, SHA, "x", status="completed", conclusion=None, title="t", summary="s")
    with pytest.raises(ValueError):
        gh.upsert_check_run(REPO, SHA, "x", status="queued", conclusion=None, title="t", summary="s", annotations=[{"path": "a"}])


# ------------------------------------------------------------------------------ retries, rate limits, timeouts


def test_502_is_retried_then_succeeds(fake: FakeGitHub) -> None:
    fake.add_pull(REPO, head_sha=SHA)
    fake.inject("GET", r"/pulls/1$", status=502, times=2)
    assert token_adapter(fake).pull_request(REPO, 1).number == 1
    assert [(r.status, r.fault) for r in fake.find_requests("GET", r"/pulls/1$")] == [(502, "status"), (502, "status"), (200, None)]


def test_5xx_retries_are_bounded(fake: FakeGitHub) -> None:
    fake.inject("GET", r"/pulls/1$", status=503, times=10)
    with pytest.raises(GitHubError) as err:
        token_adapter(fake, retries=2).pull_request(REPO, 1)
    assert err.value.status == 503 and "HTTP 503" in str(err.value)
    assert len(fake.find_requests("GET", r"/pulls/1$")) == 3


def test_writes_are_retried_on_5xx(fake: FakeGitHub) -> None:
    fake.inject("POST", r"/statuses/", status=500)
    token_adapter(fake).set_status(REPO, SHA, "fluxwarden/prod", "success", "ok")
    assert [r.status for r in fake.find_requests("POST")] == [500, 201]
    assert len(fake.find_effects("POST")) == 1 and len(fake.statuses_for(REPO, SHA)) == 1


def test_primary_rate_limit_waits_until_reset(fake: FakeGitHub) -> None:
    fake.add_pull(REPO, head_sha=SHA)
    fake.inject("GET", r"/pulls/1$", rate_limit="primary", reset_in=1)
    gh = token_adapter(fake)
    started = time.monotonic()
    assert gh.pull_request(REPO, 1).number == 1
    elapsed = time.monotonic() - started
    assert 0.9 <= elapsed < 3.5  # the reset is a whole second, at most 2 s away
    got = fake.find_requests("GET", r"/pulls/1$")
    assert [(r.status, r.fault) for r in got] == [(403, "rate_limit"), (200, None)]  # no early retry
    assert gh.rate_limit_remaining is not None and gh.rate_limit_remaining > 0


def test_primary_rate_limit_beyond_max_wait_fails_fast(fake: FakeGitHub) -> None:
    fake.inject("GET", r"/pulls/1$", rate_limit="primary", reset_in=120)
    gh = token_adapter(fake, max_rate_limit_wait=2)
    started = time.monotonic()
    with pytest.raises(GitHubError, match="rate limited until 20"):
        gh.pull_request(REPO, 1)
    assert time.monotonic() - started < 1
    assert gh.rate_limit_remaining == 0
    assert len(fake.requests) == 1


def test_secondary_rate_limit_honours_retry_after(fake: FakeGitHub) -> None:
    fake.add_pull(REPO, head_sha=SHA)
    fake.inject("GET", r"/pulls/1$", rate_limit="secondary", status=429, retry_after=1)
    started = time.monotonic()
    assert token_adapter(fake).pull_request(REPO, 1).number == 1
    assert 0.9 <= time.monotonic() - started < 3
    assert [r.status for r in fake.find_requests("GET", r"/pulls/1$")] == [429, 200]


def test_timeout_is_retried_then_succeeds(fake: FakeGitHub) -> None:
    fake.add_pull(REPO, head_sha=SHA)
    fault = fake.inject("GET", r"/pulls/1$", delay=1.6)
    assert token_adapter(fake, timeout=1).pull_request(REPO, 1).number == 1
    assert fault.hits == 1


def test_timeouts_exhaust_retries_into_a_github_error(fake: FakeGitHub) -> None:
    fault = fake.inject("GET", r"/pulls/1$", delay=1.6, times=5)
    started = time.monotonic()
    with pytest.raises(GitHubError, match="timed out after 2 attempt"):
        token_adapter(fake, timeout=0.5, retries=1).pull_request(REPO, 1)  # rounded up to PyGithub's whole second
    assert fault.hits == 2 and time.monotonic() - started < 3.5


def test_connection_refused_is_retried_then_a_github_error() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    gh = GitHubAdapter(GitHubAuth(token=TOKEN, api_url=f"http://127.0.0.1:{port}/api/v3"), retries=2, backoff=0.01)
    with pytest.raises(GitHubError, match="connection failed after 3 attempt") as err:
        gh.pull_request(REPO, 1)
    assert TOKEN not in str(err.value)


def test_write_spacing_is_configurable(fake: FakeGitHub) -> None:
    gh = token_adapter(fake, min_write_interval=0.3)
    started = time.monotonic()
    gh.set_status(REPO, SHA, "a", "success", "ok")
    gh.set_status(REPO, SHA, "b", "success", "ok")
    assert time.monotonic() - started >= 0.3


# ------------------------------------------------------------------------------ the fake itself (raw HTTP)


def api(fake: FakeGitHub, method: str, path: str, **kw: object) -> requests.Response:
    return requests.request(method, fake.base_url + path, headers={"Authorization": f"token {TOKEN}"}, timeout=5, **kw)


def test_fake_issues_labels_and_pulls_for_later_features(fake: FakeGitHub) -> None:
    fake.repos[REPO].branches.update({"main": "0" * 40, "fluxwarden/bump": "d" * 40})
    made = api(fake, "POST", f"/repos/{REPO}/issues", json={"title": "Drift in prod", "body": "b", "labels": ["fluxwarden", "drift"]})
    assert made.status_code == 201 and made.json()["user"]["login"] == BOT
    number = made.json()["number"]
    fake.add_issue(REPO, title="unrelated", author="alice")
    listed = api(fake, "GET", f"/repos/{REPO}/issues", params={"state": "open", "labels": "fluxwarden", "creator": BOT})
    assert [i["number"] for i in listed.json()] == [number]
    assert api(fake, "POST", f"/repos/{REPO}/issues/{number}/labels", json={"labels": ["p1"]}).status_code == 200
    assert api(fake, "DELETE", f"/repos/{REPO}/issues/{number}/labels/drift").status_code == 200
    closed = api(fake, "PATCH", f"/repos/{REPO}/issues/{number}", json={"state": "closed"})
    assert closed.json()["state"] == "closed" and [lb["name"] for lb in closed.json()["labels"]] == ["fluxwarden", "p1"]
    assert api(fake, "GET", f"/repos/{REPO}/issues", params={"labels": "fluxwarden"}).json() == []

    pr = api(fake, "POST", f"/repos/{REPO}/pulls", json={"title": "Bump", "head": "fluxwarden/bump", "base": "main", "draft": True})
    assert pr.status_code == 201 and pr.json()["head"]["sha"] == "d" * 40 and pr.json()["draft"] is True
    assert api(fake, "POST", f"/repos/{REPO}/pulls", json={"title": "x", "head": "nope", "base": "main"}).status_code == 422
    n = pr.json()["number"]
    edited = api(fake, "PATCH", f"/repos/{REPO}/pulls/{n}", json={"title": "Bump v2", "state": "closed"})
    assert (edited.json()["title"], edited.json()["state"]) == ("Bump v2", "closed")
    assert api(fake, "GET", f"/repos/{REPO}/issues/{n}").json()["pull_request"]["url"].endswith(f"/pulls/{n}")
    assert [e.method for e in fake.effects] == ["POST", "POST", "DELETE", "PATCH", "POST", "PATCH"]


def test_fake_combined_status_and_rate_limit(fake: FakeGitHub) -> None:
    fake.add_status(REPO, SHA, state="failure", context="a")
    fake.add_status(REPO, SHA, state="success", context="a")
    fake.add_status(REPO, SHA, state="pending", context="b")
    combined = api(fake, "GET", f"/repos/{REPO}/commits/{SHA}/status").json()
    assert combined["state"] == "pending" and {s["context"]: s["state"] for s in combined["statuses"]} == {"a": "success", "b": "pending"}
    assert [s["state"] for s in api(fake, "GET", f"/repos/{REPO}/commits/{SHA}/statuses").json()] == ["pending", "success", "failure"]
    assert api(fake, "GET", "/rate_limit").json()["resources"]["core"]["limit"] == 5000
    assert api(fake, "GET", "/user").json()["login"] == BOT


# ------------------------------------------------------------------------------ the fake on the test's own loop


async def test_fake_on_the_running_loop_with_to_thread() -> None:
    async with FakeGitHub() as fake:
        fake.add_user(BOT, token=TOKEN)
        fake.add_repo(REPO)
        fake.add_pull(REPO, head_sha=SHA)
        gh = token_adapter(fake)
        info, ids = await asyncio.gather(
            asyncio.to_thread(gh.pull_request, REPO, 1),
            asyncio.to_thread(gh.upsert_comments, REPO, 1, MARKER, [marked("hi")]),
        )
        assert info.head_sha == SHA and len(ids) == 1
        assert fake.base_url.startswith("http://127.0.0.1:") and fake.base_url.endswith("/api/v3")
