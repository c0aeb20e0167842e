"""GitHub webhook deliveries: signature check, body decoding and typed events (sans-I/O)."""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from dataclasses import dataclass
from typing import Any, Mapping, cast
from urllib.parse import parse_qs

from bot.engine.core.errors import FluxwardenError

# GitHub does not deliver a payload over 25 MB; we refuse anything larger (25 MiB, the generous reading).
# https://docs.github.com/en/webhooks/webhook-events-and-payloads#payload-cap
MAX_BODY_BYTES = 25 * 1024 * 1024

SIGNATURE_PREFIX = "sha256="
_SIGNATURE_RE = re.compile(r"sha256=[0-9a-fA-F]{64}")
# GitHub sends commit SHAs as 40 lower-case hex digits; the null SHA (all zeros) marks a created or deleted ref.
_SHA_RE = re.compile(r"[0-9a-f]{40}")
NULL_SHA = "0" * 40

# A push lists at most this many commits; a longer push must be read from the Commits API.
# https://docs.github.com/en/webhooks/webhook-events-and-payloads#push
MAX_PUSH_COMMITS = 2048

# issue_comment also has `deleted`; a deleted comment carries no command to run.
# https://docs.github.com/en/webhooks/webhook-events-and-payloads#issue_comment
COMMENT_ACTIONS = frozenset({"created", "edited"})


class PayloadError(FluxwardenError):
    """A malformed webhook body or payload; the server answers 400 with this message."""


class PayloadTooLarge(PayloadError):
    """A body over GitHub's 25 MB payload cap; the server may answer 413."""


@dataclass(frozen=True)
class Repository:
    """The repository a delivery is about."""

    full_name: str
    clone_url: str
    default_branch: str
    private: bool


@dataclass(frozen=True)
class PullRequestRef:
    """The parts of a pull request a precheck needs."""

    number: int
    head_sha: str
    head_ref: str
    head_repo: str | None  # None when the fork was deleted
    head_clone_url: str | None
    base_ref: str
    base_sha: str
    fork: bool
    draft: bool
    state: str
    author: str


@dataclass(frozen=True)
class PullRequestEvent:
    """A `pull_request` delivery (every action; the handler decides which ones matter)."""

    delivery: str
    action: str
    repo: Repository
    pull: PullRequestRef
    sender: str
    installation_id: int | None
    # `edited` with `changes.base`: the PR was retargeted; the base branch it had before. Every status on
    # the head judged the old base, so it must not stand for the new one.
    # https://docs.github.com/en/webhooks/webhook-events-and-payloads#pull_request (edited: changes.base.ref.from)
    base_changed_from: str | None = None


@dataclass(frozen=True)
class CommentEvent:
    """An `issue_comment` delivery (created or edited) on an issue or a pull request."""

    delivery: str
    action: str
    repo: Repository
    number: int
    is_pull_request: bool
    comment_id: int
    body: str
    author: str
    author_type: str  # "User", "Bot", ...
    installation_id: int | None


@dataclass(frozen=True)
class PushEvent:
    """A `push` delivery."""

    delivery: str
    repo: Repository
    ref: str
    before: str
    after: str
    installation_id: int | None
    commits: tuple[str, ...]


@dataclass(frozen=True)
class PingEvent:
    """The `ping` GitHub sends when a webhook is created."""

    delivery: str
    hook_id: int | None
    zen: str


Event = PullRequestEvent | CommentEvent | PushEvent | PingEvent


def verify_signature(secret: bytes, body: bytes, header: str | None) -> bool:
    """Whether `X-Hub-Signature-256` is the HMAC-SHA256 of the body under the secret (constant time)."""
    # https://docs.github.com/en/webhooks/using-webhooks/validating-webhook-deliveries
    # An empty secret is a misconfiguration: fail closed rather than accept an HMAC anyone can compute.
    if not secret or header is None or not _SIGNATURE_RE.fullmatch(header):
        return False
    expected = hmac.new(secret, body, hashlib.sha256).digest()
    return hmac.compare_digest(expected, bytes.fromhex(header[len(SIGNATURE_PREFIX) :]))


def parse_body(body: bytes, content_type: str | None) -> Any:
    """Decode a delivery body sent as `application/json` or `application/x-www-form-urlencoded`."""
    if len(body) > MAX_BODY_BYTES:
        raise PayloadTooLarge(f"payload too large: {len(body)} bytes (GitHub caps deliveries at 25 MB)")
    media_type = (content_type or "").split(";", 1)[0].strip().lower()
    if media_type == "application/json":
        text = _utf8(body)
    elif media_type == "application/x-www-form-urlencoded":
        # The form content type (the default for a new repository webhook) sends the JSON as the form field
        # `payload`. https://docs.github.com/en/webhooks/using-webhooks/creating-webhooks
        try:
            fields = parse_qs(_utf8(body), keep_blank_values=True, errors="strict", max_num_fields=100)
        except UnicodeDecodeError:
            raise PayloadError("payload is not valid UTF-8") from None
        except ValueError:
            raise PayloadError("form body has too many fields") from None
        values = fields.get("payload", [])
        if len(values) != 1:
            raise PayloadError("form body needs exactly one `payload` field")
        text = values[0]
    else:
        shown = media_type or "none"
        raise PayloadError(f"unsupported Content-Type {shown!r}: expected application/json or application/x-www-form-urlencoded")
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except RecursionError:
        raise PayloadError("payload is nested too deeply") from None
    except ValueError as exc:  # JSONDecodeError, NaN/Infinity, integers over the int-to-str digit limit
        raise PayloadError(f"payload is not valid JSON: {exc}") from None


def parse_event(event: str, delivery: str, payload: Any) -> Event | None:
    """Turn a delivery into a typed event; None for events and actions Fluxwarden ignores."""
    if event not in _PARSERS:
        return None
    if not isinstance(payload, dict):
        raise PayloadError("payload must be a JSON object")
    return _PARSERS[event](delivery, payload)


def _utf8(body: bytes) -> str:
    # Payloads are UTF-8: https://docs.github.com/en/webhooks/using-webhooks/validating-webhook-deliveries
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError:
        raise PayloadError("payload is not valid UTF-8") from None


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _pull_request(delivery: str, payload: Mapping[str, Any]) -> PullRequestEvent:
    pr = _obj(payload, "pull_request")
    head = _obj(pr, "head", "pull_request.head")
    base = _obj(pr, "base", "pull_request.base")
    base_repo = _obj(base, "repo", "pull_request.base.repo")
    # `head.repo` is null when the fork the PR came from has been deleted.
    # https://docs.github.com/en/webhooks/webhook-events-and-payloads#pull_request
    head_repo = _opt_obj(head, "repo", "pull_request.head.repo")
    head_name = _str(head_repo, "full_name", "pull_request.head.repo.full_name") if head_repo is not None else None
    head_clone = _str(head_repo, "clone_url", "pull_request.head.repo.clone_url") if head_repo is not None else None
    base_name = _str(base_repo, "full_name", "pull_request.base.repo.full_name")
    pull = PullRequestRef(
        number=_int(pr, "number", "pull_request.number"),
        head_sha=_sha(head, "sha", "pull_request.head.sha"),
        head_ref=_str(head, "ref", "pull_request.head.ref"),
        head_repo=head_name,
        head_clone_url=head_clone,
        base_ref=_str(base, "ref", "pull_request.base.ref"),
        base_sha=_sha(base, "sha", "pull_request.base.sha"),
        fork=head_name is None or head_name != base_name,
        draft=_bool(pr, "draft", "pull_request.draft"),
        state=_str(pr, "state", "pull_request.state"),
        author=_str(_obj(pr, "user", "pull_request.user"), "login", "pull_request.user.login"),
    )
    action = _str(payload, "action")
    return PullRequestEvent(
        delivery=delivery,
        action=action,
        repo=_repository(payload),
        pull=pull,
        sender=_sender(payload),
        installation_id=_installation(payload),
        base_changed_from=_base_changed_from(payload) if action == "edited" else None,
    )


def _base_changed_from(payload: Mapping[str, Any]) -> str | None:
    """The old base branch of an `edited` delivery that retargeted the PR; None for a title or body edit."""
    changes = _opt_obj(payload, "changes")
    base = _opt_obj(changes, "base", "changes.base") if changes is not None else None
    ref = _opt_obj(base, "ref", "changes.base.ref") if base is not None else None
    if ref is None:
        return None
    return _str(ref, "from", "changes.base.ref.from")


def _issue_comment(delivery: str, payload: Mapping[str, Any]) -> CommentEvent | None:
    action = _str(payload, "action")
    if action not in COMMENT_ACTIONS:
        return None
    issue = _obj(payload, "issue")
    comment = _obj(payload, "comment")
    user = _obj(comment, "user", "comment.user")
    # Pull requests are issues too; only a PR's issue carries a `pull_request` object.
    # https://docs.github.com/en/rest/issues/issues#list-repository-issues
    marker = _opt_obj(issue, "pull_request", "issue.pull_request")
    return CommentEvent(
        delivery=delivery,
        action=action,
        repo=_repository(payload),
        number=_int(issue, "number", "issue.number"),
        is_pull_request=marker is not None,
        comment_id=_int(comment, "id", "comment.id"),
        body=_str(comment, "body", "comment.body"),
        author=_str(user, "login", "comment.user.login"),
        author_type=_str(user, "type", "comment.user.type"),
        installation_id=_installation(payload),
    )


def _push(delivery: str, payload: Mapping[str, Any]) -> PushEvent:
    commits = _get(payload, "commits", "commits")
    if not isinstance(commits, list):
        raise PayloadError(f"`commits` must be a list, got {_kind(commits)}")
    # Truncated at MAX_PUSH_COMMITS: a push of exactly that many may have lost some.
    ids = tuple(_sha(_item(commits, i, "commits"), "id", f"commits[{i}].id") for i in range(len(commits)))
    return PushEvent(
        delivery=delivery,
        repo=_repository(payload),
        ref=_str(payload, "ref"),
        before=_sha(payload, "before"),
        after=_sha(payload, "after"),
        installation_id=_installation(payload),
        commits=ids,
    )


def _ping(delivery: str, payload: Mapping[str, Any]) -> PingEvent:
    # https://docs.github.com/en/webhooks/webhook-events-and-payloads#ping
    return PingEvent(delivery=delivery, hook_id=_opt_int(payload, "hook_id"), zen=_str(payload, "zen"))


_PARSERS = {"pull_request": _pull_request, "issue_comment": _issue_comment, "push": _push, "ping": _ping}


def _repository(payload: Mapping[str, Any]) -> Repository:
    # In `push` payloads `repository.created_at`/`pushed_at` are Unix timestamps and `url` is the HTML URL;
    # we read none of those fields.
    repo = _obj(payload, "repository")
    return Repository(
        full_name=_str(repo, "full_name", "repository.full_name"),
        clone_url=_str(repo, "clone_url", "repository.clone_url"),
        default_branch=_str(repo, "default_branch", "repository.default_branch"),
        private=_bool(repo, "private", "repository.private"),
    )


def _sender(payload: Mapping[str, Any]) -> str:
    return _str(_obj(payload, "sender"), "login", "sender.login")


def _installation(payload: Mapping[str, Any]) -> int | None:
    # Only deliveries to a GitHub App carry `installation`; repository webhooks have none.
    # https://docs.github.com/en/webhooks/webhook-events-and-payloads#installation
    installation = _opt_obj(payload, "installation")
    return None if installation is None else _int(installation, "id", "installation.id")


_KINDS = {bool: "a boolean", int: "an integer", float: "a number", str: "a string", list: "a list", dict: "an object"}


def _kind(value: Any) -> str:
    return "null" if value is None else _KINDS.get(type(value), type(value).__name__)


def _get(obj: Mapping[str, Any], key: str, path: str) -> Any:
    if key not in obj:
        raise PayloadError(f"`{path}` is missing")
    return obj[key]


def _obj(obj: Mapping[str, Any], key: str, path: str | None = None) -> Mapping[str, Any]:
    path = path or key
    value = _get(obj, key, path)
    if not isinstance(value, dict):
        raise PayloadError(f"`{path}` must be an object, got {_kind(value)}")
    return cast(Mapping[str, Any], value)


def _opt_obj(obj: Mapping[str, Any], key: str, path: str | None = None) -> Mapping[str, Any] | None:
    if obj.get(key) is None:
        return None
    return _obj(obj, key, path)


def _item(items: list[Any], index: int, path: str) -> Mapping[str, Any]:
    value = items[index]
    if not isinstance(value, dict):
        raise PayloadError(f"`{path}[{index}]` must be an object, got {_kind(value)}")
    return cast(Mapping[str, Any], value)


def _str(obj: Mapping[str, Any], key: str, path: str | None = None) -> str:
    path = path or key
    value = _get(obj, key, path)
    if not isinstance(value, str):
        raise PayloadError(f"`{path}` must be a string, got {_kind(value)}")
    return value


def _int(obj: Mapping[str, Any], key: str, path: str | None = None) -> int:
    path = path or key
    value = _get(obj, key, path)
    # bool is a subclass of int in Python; JSON `true` is not an id.
    if not isinstance(value, int) or isinstance(value, bool):
        raise PayloadError(f"`{path}` must be an integer, got {_kind(value)}")
    return value


def _opt_int(obj: Mapping[str, Any], key: str, path: str | None = None) -> int | None:
    if obj.get(key) is None:
        return None
    return _int(obj, key, path)


def _bool(obj: Mapping[str, Any], key: str, path: str | None = None) -> bool:
    path = path or key
    value = _get(obj, key, path)
    if not isinstance(value, bool):
        raise PayloadError(f"`{path}` must be a boolean, got {_kind(value)}")
    return value


def _sha(obj: Mapping[str, Any], key: str, path: str | None = None) -> str:
    path = path or key
    value = _str(obj, key, path)
    if not _SHA_RE.fullmatch(value):
        raise PayloadError(f"`{path}` must be a 40-digit lower-case hex commit SHA")
    return value
