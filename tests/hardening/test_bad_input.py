"""Bad deliveries against the running service: each refused with a clear status and message, nothing run, still healthy."""

from __future__ import annotations

import asyncio
import json
import time
import zlib
from typing import Any

import pytest

from tests.hardening.harness import BOT, REPO, Harness, comment_payload, open_pull, pr_payload, record_figure, sign

LIMIT = 256 * 1024  # max_body_bytes for these tests (the recorded payloads are ~25 KB)


def headers(body: bytes, event: str = "pull_request", *, content_type: str = "application/json", signature: str | None = "sign") -> dict[str, str]:
    out = {"X-GitHub-Event": event, "X-GitHub-Delivery": f"bad-{time.monotonic_ns()}", "Content-Type": content_type}
    if signature == "sign":
        out["X-Hub-Signature-256"] = sign(body)
    elif signature is not None:
        out["X-Hub-Signature-256"] = signature
    return out


def opened(h: Harness) -> dict[str, Any]:
    return pr_payload(1, h.origin.main, h.origin.main)


async def assert_nothing_happened(h: Harness) -> None:
    await h.settle()
    assert h.fake.find_effects() == [], "a refused delivery must not reach GitHub"
    assert await h.healthy()


async def test_forged_and_missing_signatures_are_401(start) -> None:
    async with start(max_body_bytes=LIMIT) as h:
        body = json.dumps(opened(h)).encode()
        cases = {
            "missing": headers(body, signature=None),
            "wrong secret": headers(body, signature=sign(body, b"guess")),
            "other body": headers(body, signature=sign(body + b" ")),
            "sha1 scheme": headers(body, signature="sha1=" + "0" * 40),
            "not hex": headers(body, signature="sha256=" + "z" * 64),
            "truncated": headers(body, signature=sign(body)[:-2]),
            "empty": headers(body, signature=""),
        }
        for name, hdrs in cases.items():
            response = await h.post(body, hdrs)
            assert response.status == 401, name
            assert await response.json() == {"error": "invalid signature"}, name
        # A valid signature over a tampered body: the body is what is verified, not the header alone.
        tampered = body.replace(b'"opened"', b'"closed"')
        assert (await h.post(tampered, headers(body))).status == 401
        assert await h.metric("fluxwarden_webhook_deliveries_total", outcome="bad-signature") == len(cases) + 1
        await assert_nothing_happened(h)


async def raw_request(port: int, head: bytes, body_parts: list[bytes], *, pause: float = 0.0) -> tuple[int, bytes, int]:
    """Send a request over a plain socket; return (status, response, body bytes sent before the answer)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    sent = 0
    try:
        writer.write(head)
        await writer.drain()
        for part in body_parts:
            try:
                response = await asyncio.wait_for(reader.read(65536), timeout=pause) if pause else b""
            except asyncio.TimeoutError:
                response = b""
            if response:
                return int(response.split(b" ", 2)[1]), response, sent
            writer.write(part)
            try:
                await writer.drain()
            except ConnectionError:
                break
            sent += len(part)
        response = await asyncio.wait_for(reader.read(65536), timeout=10)
        return int(response.split(b" ", 2)[1]), response, sent
    finally:
        writer.close()
        try:
            await writer.wait_closed()
        except ConnectionError:
            pass


async def test_oversized_payload_is_413_without_reading_it(start) -> None:
    async with start(max_body_bytes=LIMIT) as h:
        port = h.client.server.port
        # Declared too large: answered from the headers, before a single body byte is sent.
        claimed = 100 * 1024 * 1024
        head = (
            f"POST /webhook HTTP/1.1\r\nHost: 127.0.0.1\r\nX-GitHub-Event: pull_request\r\nX-GitHub-Delivery: big\r\n"
            f"Content-Type: application/json\r\nX-Hub-Signature-256: sha256={'0' * 64}\r\nContent-Length: {claimed}\r\n\r\n"
        ).encode()
        started = time.monotonic()
        status, response, sent = await raw_request(port, head, [b"x" * 65536] * 8, pause=2.0)
        assert status == 413 and b"payload too large" in response
        assert sent == 0, "the body must not be read"
        record_figure("oversized_declared_answer_ms", (time.monotonic() - started) * 1000, "ms")
        # Chunked, no length: read up to the limit, then refused; the rest is never read.
        chunk = b"y" * 65536
        chunked = b"".join(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n" for _ in range(256)) + b"0\r\n\r\n"  # 16 MiB
        head = head.replace(f"Content-Length: {claimed}".encode(), b"Transfer-Encoding: chunked")
        parts = [chunked[i : i + 65536] for i in range(0, len(chunked), 65536)]
        status, response, sent = await raw_request(port, head, parts, pause=0.05)
        assert status == 413
        assert sent < len(chunked) // 2, f"read {sent} of {len(chunked)} bytes before refusing"
        assert await h.metric("fluxwarden_webhook_deliveries_total", event="pull_request", outcome="too-large") == 2
        await assert_nothing_happened(h)


MALFORMED = [
    pytest.param(b"{not json", "application/json", "payload is not valid JSON", id="json-syntax"),
    pytest.param(b"[1, 2, 3]", "application/json", "payload must be a JSON object", id="json-not-object"),
    pytest.param(b'{"action": NaN}', "application/json", "NaN is not JSON", id="json-nan"),
    pytest.param(b"[" * 100_000 + b"]" * 100_000, "application/json", "nested too deeply", id="json-deep"),
    pytest.param(b'{"action": "opened", "na\xff\xfeme": 1}', "application/json", "not valid UTF-8", id="invalid-utf8-json"),
    pytest.param(b"\xc3\x28\xa0\xa1", "application/json", "not valid UTF-8", id="invalid-utf8-bytes"),
    pytest.param(b"payload=%7Bbroken", "application/x-www-form-urlencoded", "payload is not valid JSON", id="form-bad-json"),
    pytest.param(b"other=1", "application/x-www-form-urlencoded", "exactly one `payload` field", id="form-no-payload"),
    pytest.param(b"payload=%7B%7D&payload=%7B%7D", "application/x-www-form-urlencoded", "exactly one `payload` field", id="form-two-payloads"),
    pytest.param(b"payload=%FF%FE", "application/x-www-form-urlencoded", "not valid UTF-8", id="form-invalid-utf8"),
    pytest.param(b"&".join([b"a=1"] * 200), "application/x-www-form-urlencoded", "too many fields", id="form-field-flood"),
    pytest.param(b"<xml/>", "application/xml", "unsupported Content-Type", id="xml"),
    pytest.param(b"{}", "", "unsupported Content-Type", id="no-content-type"),
    pytest.param(b'{"action": "opened"}', "application/json", "`pull_request` is missing", id="missing-field"),
    pytest.param(
        json.dumps({"action": "opened", "pull_request": 7}).encode(), "application/json", "`pull_request` must be an object, got an integer", id="wrong-type"
    ),
]


@pytest.mark.parametrize("body,content_type,message", MALFORMED)
async def test_malformed_bodies_are_400(start, body: bytes, content_type: str, message: str) -> None:
    async with start(max_body_bytes=LIMIT) as h:
        response = await h.post(body, headers(body, content_type=content_type))
        assert response.status == 400
        error = (await response.json())["error"]
        assert message in error
        assert len(error) < 300  # one clear line, never the body echoed back
        assert await h.metric("fluxwarden_webhook_deliveries_total", outcome="malformed") == 1
        await assert_nothing_happened(h)


async def test_lone_surrogates_and_control_characters_in_a_comment(start, origin, fake) -> None:
    """Valid JSON whose strings decode to text GitHub never sends (a lone surrogate, NUL, RTL override): no crash."""
    open_pull(fake, origin, 1, origin.main)
    async with start(max_body_bytes=LIMIT) as h:
        made = fake.add_comment(REPO, 1, "x", user="bob")
        body = json.dumps(comment_payload(1, made.id, "/precheck prod\ud800\x00\u202e")).encode()  # ensure_ascii: \\ud800
        response = await h.post(body, headers(body, "issue_comment"))
        assert response.status == 202
        await h.settle()
        replies = [c for c in fake.issue_comments(REPO, 1) if c.user == BOT]
        assert len(replies) == 1 and "not a cluster name" in replies[0].body
        assert h.states(origin.main) == []  # nothing ran for a cluster that does not exist
        assert await h.healthy()


async def test_other_methods_events_and_paths(start) -> None:
    async with start(max_body_bytes=LIMIT) as h:
        assert (await h.client.get("/webhook")).status == 405
        assert (await h.client.post("/webhook/../healthz", data=b"{}")).status in (404, 405)
        assert (await h.client.get("/nope")).status == 404
        body = b"{}"
        assert (await h.post(body, headers(body, "deployment_status"))).status == 204
        assert (await h.post(body, headers(body, ""))).status == 204
        ping = json.dumps({"zen": "Keep it logically awesome.", "hook_id": 1}).encode()
        assert (await h.post(ping, headers(ping, "ping"))).status == 200
        await assert_nothing_happened(h)


def gzip_bomb(inflated: int = 1 << 30) -> bytes:
    """A gzip body of `inflated` zero bytes (1 GiB inflates from ~1 MiB), compressed without holding it in memory."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)  # wbits 31: the gzip container
    block = bytes(1 << 20)
    return b"".join(packer.compress(block) for _ in range(inflated // len(block))) + packer.flush()


async def test_compressed_bodies_are_415_without_reading_them(start) -> None:
    """GitHub sends webhook bodies uncompressed: any Content-Encoding but identity is refused from the headers.

    Before: aiohttp inflated a gzip body on the event loop as it arrived, before the signature was checked —
    12 unsigned 1 MB bombs (1 GiB each inflated) stalled /healthz for seconds and took hundreds of MB.
    """
    async with start(max_body_bytes=4 * 1024 * 1024) as h:
        port = h.client.server.port
        bomb = gzip_bomb()
        assert len(bomb) < 2 * 1024 * 1024
        head = (
            f"POST /webhook HTTP/1.1\r\nHost: 127.0.0.1\r\nX-GitHub-Event: pull_request\r\nX-GitHub-Delivery: gz\r\n"
            f"Content-Type: application/json\r\nContent-Encoding: gzip\r\nContent-Length: {len(bomb)}\r\n\r\n"
        ).encode()
        status, response, sent = await raw_request(port, head, [bomb[i : i + 65536] for i in range(0, len(bomb), 65536)], pause=2.0)
        assert status == 415 and b"Content-Encoding" in response
        assert sent == 0, "the body must not be read"
        # Sent in full at once, signed or not, every coding: refused, and the event loop never inflates a byte.
        started = time.monotonic()
        codings = ["gzip", "deflate", "br", "x-gzip", "gzip, identity", "GZIP"] * 2
        results = await asyncio.gather(*(
            h.post(bomb, {**headers(bomb, signature="sign" if i % 2 else None), "Content-Encoding": coding})
            for i, coding in enumerate(codings)
        ))
        health = time.monotonic()
        assert (await h.client.get("/healthz")).status == 200
        health = time.monotonic() - health
        elapsed = time.monotonic() - started
        assert [r.status for r in results] == [415] * len(codings)
        assert health < 0.5 and elapsed < 5, (health, elapsed)
        record_figure("gzip_bombs_12_answered_s", elapsed, "s")
        assert await h.metric("fluxwarden_webhook_deliveries_total", event="pull_request", outcome="encoded") == len(codings) + 1
        # identity is no encoding at all: accepted like a plain body.
        body = json.dumps({"zen": "Keep it logically awesome.", "hook_id": 1}).encode()
        assert (await h.post(body, {**headers(body, "ping"), "Content-Encoding": "identity"})).status == 200
        await assert_nothing_happened(h)


@pytest.mark.parametrize("names", [
    pytest.param([f"!{i}" for i in range(10_000)], id="10000-invalid-names"),
    pytest.param([f"c{i}" for i in range(10_000)], id="10000-unknown-clusters"),
])
async def test_precheck_naming_10000_bad_clusters_still_gets_a_reply(start, origin, fake, names: list[str]) -> None:
    """`/precheck` with 10,000 names that are no cluster: a short reply (the first names, then a count).

    Before: the reply listed every name (over GitHub's 65,536 characters), the adapter refused to post it, and
    the commenter heard nothing.
    """
    open_pull(fake, origin, 1, origin.main)
    text = "/precheck " + " ".join(names)
    assert len(text) <= 65536  # a comment GitHub accepts
    async with start(max_body_bytes=LIMIT) as h:
        made = fake.add_comment(REPO, 1, text, user="bob")
        assert (await h.deliver("issue_comment", comment_payload(1, made.id, text))).status == 202
        await h.settle()
        (reply,) = [c for c in fake.issue_comments(REPO, 1) if c.user == BOT]
        assert len(reply.body) <= 65536
        assert "and 9,990 more" in reply.body
        assert h.states(origin.main) == []  # nothing ran
        assert await h.healthy()
