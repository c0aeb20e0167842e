"""Webhook deliveries: signatures, body decoding, every captured payload, malformed payloads."""

from __future__ import annotations

import copy
import hashlib
import hmac
import json
from pathlib import Path
from typing import Any, Callable
from urllib.parse import quote_plus

import pytest

from bot.engine.core.errors import FluxwardenError, UserError
from bot.engine.chatops.webhook import (
    MAX_BODY_BYTES,
    NULL_SHA,
    CommentEvent,
    PayloadError,
    PayloadTooLarge,
    PingEvent,
    PullRequestEvent,
    PullRequestRef,
    PushEvent,
    Repository,
    parse_body,
    parse_event,
    verify_signature,
)

PAYLOADS = Path(__file__).parents[1] / "payloads"

# The test vector of https://docs.github.com/en/webhooks/using-webhooks/validating-webhook-deliveries
DOC_SECRET = b"It's a Secret to Everybody"
DOC_BODY = b"Hello, World!"
DOC_HEX = "757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"

BASE = "5da16f820a6ee7d49ad271272b50d3596b02f8c2"
H1, H2 = "db671e587b163d6ee3e877c20d5ecfb1ba4506ca", "f064afd1e56c458b4d98ef509c71dcdd625d416b"
F1, F2 = "e9441167c244f834a1e35e9792cb092e63e59259", "18751d207a485ce94410503fd584ffc70f8c26bd"
P1, P2 = "0b0fbfc2f19caf64b1186f7315d66b0376dbb498", "e4e15fb24bbede011e7c4ad3e3cc9d5054c1e668"
HOME = Repository("home-ops/cluster", "https://github.com/home-ops/cluster.git", "main", False)
DELIVERY = "72d3162e-cc78-11e3-81ab-4c9367dc0958"


def load(name: str) -> Any:
    return json.loads((PAYLOADS / name).read_text())


def signed(secret: bytes, body: bytes) -> str:
    return "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()


# --- signatures -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "secret,body,header,ok",
    [
        (DOC_SECRET, DOC_BODY, "sha256=" + DOC_HEX, True),
        (DOC_SECRET, DOC_BODY, "sha256=" + DOC_HEX.upper(), True),
        (b"s3cret", b'{"zen":"x"}', signed(b"s3cret", b'{"zen":"x"}'), True),
        (DOC_SECRET, DOC_BODY + b" ", "sha256=" + DOC_HEX, False),
        (b"another secret", DOC_BODY, "sha256=" + DOC_HEX, False),
        (DOC_SECRET, DOC_BODY, None, False),
        (DOC_SECRET, DOC_BODY, "", False),
        (DOC_SECRET, DOC_BODY, DOC_HEX, False),
        (DOC_SECRET, DOC_BODY, "sha1=" + hmac.new(DOC_SECRET, DOC_BODY, hashlib.sha1).hexdigest(), False),
        (DOC_SECRET, DOC_BODY, "SHA256=" + DOC_HEX, False),
        (DOC_SECRET, DOC_BODY, "sha256=" + DOC_HEX[:-2], False),
        (DOC_SECRET, DOC_BODY, "sha256=" + DOC_HEX + "00", False),
        (DOC_SECRET, DOC_BODY, "sha256=" + DOC_HEX + "\n", False),
        (DOC_SECRET, DOC_BODY, "sha256=" + "z" * 64, False),
        (DOC_SECRET, DOC_BODY, "sha256=" + "é" * 64, False),
        (DOC_SECRET, DOC_BODY, "sha256=" + "٣" * 64, False),
        (b"", DOC_BODY, signed(b"", DOC_BODY), False),
    ],
    ids=[
        "github-doc-vector",
        "upper-case-hex",
        "json-body",
        "body-tampered",
        "other-secret",
        "missing",
        "empty",
        "no-prefix",
        "sha1-prefix",
        "prefix-case",
        "truncated",
        "too-long",
        "trailing-newline",
        "not-hex",
        "non-ascii",
        "unicode-digits",
        "empty-secret-fails-closed",
    ],
)
def test_verify_signature(secret: bytes, body: bytes, header: str | None, ok: bool) -> None:
    assert verify_signature(secret, body, header) is ok


def test_signature_covers_the_raw_bytes_of_a_payload_file() -> None:
    raw = (PAYLOADS / "push.main.json").read_bytes()
    header = signed(b"webhook-secret", raw)
    assert verify_signature(b"webhook-secret", raw, header)
    assert not verify_signature(b"webhook-secret", json.dumps(json.loads(raw)).encode(), header)


# --- every payload file ---------------------------------------------------------------------------


def _pr(action: str, *, fork: bool, sha: str, state: str = "open", sender: str | None = None) -> PullRequestEvent:
    author = "mallory" if fork else "alice"
    pull = PullRequestRef(
        number=7,
        head_sha=sha,
        head_ref="patch-1" if fork else "feat/cdi-tier-order",
        head_repo="mallory/cluster" if fork else "home-ops/cluster",
        head_clone_url="https://github.com/mallory/cluster.git" if fork else "https://github.com/home-ops/cluster.git",
        base_ref="main",
        base_sha=BASE,
        fork=fork,
        draft=False,
        state=state,
        author=author,
    )
    return PullRequestEvent(DELIVERY, action, HOME, pull, sender or author, 42)


def _comment(action: str, number: int, is_pr: bool, cid: int, body: str, author: str = "bob", kind: str = "User") -> CommentEvent:
    return CommentEvent(DELIVERY, action, HOME, number, is_pr, cid, body, author, kind, 42)


LEAD = "Looks right to me, but let's see what prod thinks first.\r\n\r\n"
EXPECTED: dict[str, Any] = {
    "pull_request.opened.json": _pr("opened", fork=False, sha=H1),
    "pull_request.synchronize.json": _pr("synchronize", fork=False, sha=H2),
    "pull_request.ready_for_review.json": _pr("ready_for_review", fork=False, sha=H2),
    "pull_request.closed.json": _pr("closed", fork=False, sha=H2, state="closed", sender="bob"),
    "pull_request.reopened.json": _pr("reopened", fork=False, sha=H2, sender="bob"),
    "pull_request.opened.fork.json": _pr("opened", fork=True, sha=F1),
    "pull_request.synchronize.fork.json": _pr("synchronize", fork=True, sha=F2),
    "pull_request.ready_for_review.fork.json": _pr("ready_for_review", fork=True, sha=F2),
    "pull_request.closed.fork.json": _pr("closed", fork=True, sha=F2, state="closed", sender="bob"),
    "pull_request.reopened.fork.json": _pr("reopened", fork=True, sha=F2, sender="bob"),
    "issue_comment.created.pr.json": _comment("created", 7, True, 2938475601, LEAD + "/precheck prod\r\n"),
    "issue_comment.edited.pr.json": _comment("edited", 7, True, 2938475601, LEAD + "/precheck prod dev\r\n"),
    "issue_comment.deleted.pr.json": None,
    "issue_comment.created.issue.json": _comment("created", 5, False, 2938475777, "/fluxwarden fix-tier-order"),
    "issue_comment.created.bot.json": _comment(
        "created",
        7,
        True,
        2938475999,
        "<!-- fluxwarden:precheck:prod -->\n### ⏳ Fluxwarden precheck: `prod`\n\nRunning on `f064afd`…\n\n/precheck prod",
        author="fluxwarden[bot]",
        kind="Bot",
    ),
    "push.main.json": PushEvent(DELIVERY, HOME, "refs/heads/main", BASE, P2, 42, (P1, P2)),
    "ping.json": PingEvent(DELIVERY, 481516234, "Design for failure."),
}


def test_every_payload_file_has_an_expectation() -> None:
    assert sorted(p.name for p in PAYLOADS.glob("*.json")) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED), ids=lambda n: n.removesuffix(".json"))
def test_payload_file_parses(name: str) -> None:
    event = name.split(".", 1)[0]
    assert parse_event(event, DELIVERY, load(name)) == EXPECTED[name]


@pytest.mark.parametrize("name", ["pull_request.synchronize.json", "issue_comment.created.pr.json", "ping.json"])
def test_form_encoded_delivery_parses_like_json(name: str) -> None:
    raw = (PAYLOADS / name).read_bytes()
    form = b"payload=" + quote_plus(raw.decode()).encode()
    event = name.split(".", 1)[0]
    assert parse_event(event, DELIVERY, parse_body(form, "application/x-www-form-urlencoded")) == EXPECTED[name]


def test_same_repo_and_fork_facts() -> None:
    same = parse_event("pull_request", DELIVERY, load("pull_request.opened.json"))
    fork = parse_event("pull_request", DELIVERY, load("pull_request.opened.fork.json"))
    assert isinstance(same, PullRequestEvent) and isinstance(fork, PullRequestEvent)
    assert not same.pull.fork and fork.pull.fork
    assert fork.repo == same.repo == HOME  # the event is about the base repository either way


def test_deleted_fork_has_no_head_repo() -> None:
    # GitHub sends `head.repo: null` once the fork a PR came from is deleted.
    payload = load("pull_request.closed.fork.json")
    payload["pull_request"]["head"]["repo"] = None
    event = parse_event("pull_request", DELIVERY, payload)
    assert isinstance(event, PullRequestEvent)
    assert (event.pull.fork, event.pull.head_repo, event.pull.head_clone_url) == (True, None, None)


def test_same_named_branch_on_a_fork_is_still_a_fork() -> None:
    payload = load("pull_request.opened.fork.json")
    payload["pull_request"]["head"]["ref"] = "main"
    event = parse_event("pull_request", DELIVERY, payload)
    assert isinstance(event, PullRequestEvent) and event.pull.fork


def test_draft_pull_request() -> None:
    payload = load("pull_request.opened.json")
    payload["pull_request"]["draft"] = True
    event = parse_event("pull_request", DELIVERY, payload)
    assert isinstance(event, PullRequestEvent) and event.pull.draft


def test_repository_webhook_without_installation() -> None:
    payload = load("issue_comment.created.pr.json")
    del payload["installation"]
    event = parse_event("issue_comment", DELIVERY, payload)
    assert isinstance(event, CommentEvent) and event.installation_id is None


def test_null_pull_request_marker_is_a_plain_issue() -> None:
    payload = load("issue_comment.created.pr.json")
    payload["issue"]["pull_request"] = None
    event = parse_event("issue_comment", DELIVERY, payload)
    assert isinstance(event, CommentEvent) and not event.is_pull_request


def test_branch_deletion_push_has_null_after_and_no_commits() -> None:
    payload = load("push.main.json")
    payload.update(ref="refs/heads/feat/cdi-tier-order", after=NULL_SHA, deleted=True, commits=[], head_commit=None)
    event = parse_event("push", DELIVERY, payload)
    assert isinstance(event, PushEvent) and (event.after, event.commits) == (NULL_SHA, ())


def test_ping_without_hook_id() -> None:
    assert parse_event("ping", "d", {"zen": "Keep it logically awesome."}) == PingEvent("d", None, "Keep it logically awesome.")


# --- ignored deliveries ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "event,payload",
    [
        ("check_run", {"action": "completed"}),
        ("pull_request_review", load("pull_request.opened.json")),
        ("installation", {"action": "created"}),
        ("PUSH", load("push.main.json")),
        ("", {}),
        ("workflow_run", "not even an object"),
        ("issue_comment", load("issue_comment.deleted.pr.json")),
        ("issue_comment", {"action": "deleted"}),
    ],
    ids=["check_run", "pr-review", "installation", "event-name-case", "empty-name", "unknown-with-junk", "comment-deleted", "comment-deleted-bare"],
)
def test_ignored_deliveries(event: str, payload: Any) -> None:
    assert parse_event(event, DELIVERY, payload) is None


def test_every_pull_request_action_is_kept() -> None:
    payload = load("pull_request.opened.json")
    payload["action"] = "labeled"
    event = parse_event("pull_request", DELIVERY, payload)
    assert isinstance(event, PullRequestEvent) and event.action == "labeled"


# --- malformed payloads ---------------------------------------------------------------------------


def _set(path: str, value: Any) -> Callable[[Any], None]:
    def mutate(payload: Any) -> None:
        *parents, leaf = path.split(".")
        for key in parents:
            payload = payload[int(key)] if isinstance(payload, list) else payload[key]
        if isinstance(payload, list):
            payload[int(leaf)] = value
        else:
            payload[leaf] = value

    return mutate


def _del(path: str) -> Callable[[Any], None]:
    def mutate(payload: Any) -> None:
        *parents, leaf = path.split(".")
        for key in parents:
            payload = payload[key]
        del payload[leaf]

    return mutate


PR, COMMENT, PUSH, PING = "pull_request.synchronize.json", "issue_comment.created.pr.json", "push.main.json", "ping.json"


@pytest.mark.parametrize(
    "name,mutate,message",
    [
        (PR, _del("pull_request"), "`pull_request` is missing"),
        (PR, _set("pull_request", []), "`pull_request` must be an object, got a list"),
        (PR, _del("pull_request.head.sha"), "`pull_request.head.sha` is missing"),
        (PR, _set("pull_request.head.sha", "xyz" * 13 + "x"), "`pull_request.head.sha` must be a 40-digit lower-case hex commit SHA"),
        (PR, _set("pull_request.head.sha", H2.upper()), "`pull_request.head.sha` must be a 40-digit"),
        (PR, _set("pull_request.head.sha", H2[:39]), "`pull_request.head.sha` must be a 40-digit"),
        (PR, _set("pull_request.head.sha", H2 + "\n"), "`pull_request.head.sha` must be a 40-digit"),
        (PR, _set("pull_request.base.sha", None), "`pull_request.base.sha` must be a string, got null"),
        (PR, _set("pull_request.number", "7"), "`pull_request.number` must be an integer, got a string"),
        (PR, _set("pull_request.number", True), "`pull_request.number` must be an integer, got a boolean"),
        (PR, _set("pull_request.number", 7.0), "`pull_request.number` must be an integer, got a number"),
        (PR, _set("pull_request.draft", "false"), "`pull_request.draft` must be a boolean, got a string"),
        (PR, _set("pull_request.head.ref", 1), "`pull_request.head.ref` must be a string, got an integer"),
        (PR, _set("pull_request.base.repo", None), "`pull_request.base.repo` must be an object, got null"),
        (PR, _set("pull_request.head.repo", "mallory/cluster"), "`pull_request.head.repo` must be an object, got a string"),
        (PR, _del("pull_request.head.repo.clone_url"), "`pull_request.head.repo.clone_url` is missing"),
        (PR, _del("pull_request.user"), "`pull_request.user` is missing"),
        (PR, _set("pull_request.state", None), "`pull_request.state` must be a string, got null"),
        (PR, _del("action"), "`action` is missing"),
        (PR, _set("repository.private", "no"), "`repository.private` must be a boolean, got a string"),
        (PR, _del("repository.default_branch"), "`repository.default_branch` is missing"),
        (PR, _del("repository"), "`repository` is missing"),
        (PR, _set("sender", None), "`sender` must be an object, got null"),
        (PR, _set("installation.id", "42"), "`installation.id` must be an integer, got a string"),
        (PR, _set("installation", 42), "`installation` must be an object, got an integer"),
        (COMMENT, _set("action", None), "`action` must be a string, got null"),
        (COMMENT, _set("comment.body", None), "`comment.body` must be a string, got null"),
        (COMMENT, _set("comment.id", 2938475601.0), "`comment.id` must be an integer, got a number"),
        (COMMENT, _del("comment.user.type"), "`comment.user.type` is missing"),
        (COMMENT, _del("issue.number"), "`issue.number` is missing"),
        (COMMENT, _set("issue.pull_request", True), "`issue.pull_request` must be an object, got a boolean"),
        (COMMENT, _del("comment"), "`comment` is missing"),
        (PUSH, _set("commits", {}), "`commits` must be a list, got an object"),
        (PUSH, _del("commits"), "`commits` is missing"),
        (PUSH, _set("commits.1.id", "HEAD"), "`commits[1].id` must be a 40-digit"),
        (PUSH, _set("commits.0", P1), "`commits[0]` must be an object, got a string"),
        (PUSH, _del("before"), "`before` is missing"),
        (PUSH, _set("after", P2[:7]), "`after` must be a 40-digit"),
        (PUSH, _set("ref", ["refs/heads/main"]), "`ref` must be a string, got a list"),
        (PUSH, _set("repository.clone_url", None), "`repository.clone_url` must be a string, got null"),
        (PING, _del("zen"), "`zen` is missing"),
        (PING, _set("hook_id", "481516234"), "`hook_id` must be an integer, got a string"),
    ],
    ids=[
        "pr-missing",
        "pr-not-object",
        "head-sha-missing",
        "head-sha-not-hex",
        "head-sha-upper-case",
        "head-sha-short",
        "head-sha-newline",
        "base-sha-null",
        "number-string",
        "number-bool",
        "number-float",
        "draft-string",
        "head-ref-int",
        "base-repo-null",
        "head-repo-string",
        "head-clone-url-missing",
        "pr-user-missing",
        "state-null",
        "action-missing",
        "private-string",
        "default-branch-missing",
        "repository-missing",
        "sender-null",
        "installation-id-string",
        "installation-int",
        "comment-action-null",
        "comment-body-null",
        "comment-id-float",
        "comment-user-type-missing",
        "issue-number-missing",
        "pull-request-marker-bool",
        "comment-missing",
        "commits-object",
        "commits-missing",
        "commit-id-not-sha",
        "commit-not-object",
        "before-missing",
        "after-short",
        "ref-list",
        "clone-url-null",
        "zen-missing",
        "hook-id-string",
    ],
)
def test_malformed_payload_names_the_field(name: str, mutate: Callable[[Any], None], message: str) -> None:
    payload = copy.deepcopy(load(name))
    mutate(payload)
    with pytest.raises(PayloadError) as err:
        parse_event(name.split(".", 1)[0], DELIVERY, payload)
    assert message in str(err.value)


@pytest.mark.parametrize("payload", [[], "x", None, 42], ids=["list", "string", "null", "number"])
def test_payload_must_be_an_object(payload: Any) -> None:
    with pytest.raises(PayloadError, match="payload must be a JSON object"):
        parse_event("push", DELIVERY, payload)


def test_payload_error_is_not_a_user_error() -> None:
    # A malformed delivery is a 400 for GitHub, not a reply to a person.
    assert issubclass(PayloadError, FluxwardenError) and not issubclass(PayloadError, UserError)
    assert issubclass(PayloadTooLarge, PayloadError)


# --- body decoding --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "body,content_type,expected",
    [
        (b'{"zen": "x"}', "application/json", {"zen": "x"}),
        (b'{"zen": "x"}', "application/json; charset=utf-8", {"zen": "x"}),
        (b'{"zen": "x"}', "Application/JSON", {"zen": "x"}),
        ('{"body": "ünïcödé ✓"}'.encode(), "application/json", {"body": "ünïcödé ✓"}),
        (b"payload=%7B%22zen%22%3A+%22a+b%26c%22%7D", "application/x-www-form-urlencoded", {"zen": "a b&c"}),
        (b"payload=%7B%22b%22%3A%22%C3%BC%22%7D", "application/x-www-form-urlencoded", {"b": "ü"}),
        (b"payload=%7B%7D&other=1", "application/x-www-form-urlencoded", {}),
    ],
    ids=["json", "json-charset", "json-case", "json-unicode", "form", "form-utf8", "form-extra-field"],
)
def test_parse_body(body: bytes, content_type: str, expected: Any) -> None:
    assert parse_body(body, content_type) == expected


@pytest.mark.parametrize(
    "body,content_type,message",
    [
        (b"{", "application/json", "payload is not valid JSON"),
        (b"", "application/json", "payload is not valid JSON"),
        (b'{"a": NaN}', "application/json", "payload is not valid JSON"),
        (b'{"a": 1} {"b": 2}', "application/json", "payload is not valid JSON"),
        (b"[" * 100_000 + b"]" * 100_000, "application/json", "nested too deeply"),
        (b'{"a": 1' + b"0" * 5000 + b"}", "application/json", "payload is not valid JSON"),
        (b'{"a": "\xff"}', "application/json", "not valid UTF-8"),
        (b"payload=%7B%22a%22%3A%22%FF%22%7D", "application/x-www-form-urlencoded", "not valid UTF-8"),
        (b"zen=1", "application/x-www-form-urlencoded", "exactly one `payload` field"),
        (b"payload=%7B%7D&payload=%7B%7D", "application/x-www-form-urlencoded", "exactly one `payload` field"),
        (b"payload=%7B", "application/x-www-form-urlencoded", "payload is not valid JSON"),
        (b"&".join([b"a=1"] * 101), "application/x-www-form-urlencoded", "too many fields"),
        (b'{"zen": "x"}', "text/plain", "unsupported Content-Type 'text/plain'"),
        (b'{"zen": "x"}', None, "unsupported Content-Type 'none'"),
    ],
    ids=[
        "truncated",
        "empty",
        "nan",
        "trailing-data",
        "deep-nesting",
        "huge-integer",
        "bad-utf8",
        "form-bad-utf8",
        "form-no-payload",
        "form-two-payloads",
        "form-bad-json",
        "form-too-many-fields",
        "text-plain",
        "no-content-type",
    ],
)
def test_parse_body_errors(body: bytes, content_type: str | None, message: str) -> None:
    with pytest.raises(PayloadError) as err:
        parse_body(body, content_type)
    assert message in str(err.value)


def test_body_over_githubs_cap_is_refused_before_decoding() -> None:
    with pytest.raises(PayloadTooLarge, match="payload too large: 26214401 bytes"):
        parse_body(b"\xff" * (MAX_BODY_BYTES + 1), "application/json")


def test_body_at_the_cap_is_accepted() -> None:
    body = b'{"a":"' + b"x" * (MAX_BODY_BYTES - 8) + b'"}'
    assert len(body) == MAX_BODY_BYTES
    assert len(parse_body(body, "application/json")["a"]) == MAX_BODY_BYTES - 8


def test_a_retarget_carries_the_old_base_and_a_title_edit_does_not() -> None:
    payload = json.loads((Path(__file__).parent.parent / "payloads" / "pull_request.opened.json").read_text())
    payload["action"] = "edited"
    payload["changes"] = {"base": {"ref": {"from": "release"}, "sha": {"from": "1" * 40}}}
    event = parse_event("pull_request", "d", payload)
    assert isinstance(event, PullRequestEvent) and event.base_changed_from == "release"
    payload["changes"] = {"title": {"from": "old title"}}
    assert parse_event("pull_request", "d", payload).base_changed_from is None
    payload["changes"] = {"base": {"ref": {"from": 7}}}
    with pytest.raises(PayloadError, match="changes.base.ref.from"):
        parse_event("pull_request", "d", payload)
    payload["action"], payload["changes"] = "opened", {"base": {"ref": {"from": "release"}}}
    assert parse_event("pull_request", "d", payload).base_changed_from is None  # only `edited` retargets
