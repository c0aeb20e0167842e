"""A bounded webhook load generator, run as its own process so it does not share a core with the server.

    python -m tests.hardening.loadgen SPEC.json  > RESULT.json

SPEC: {"url": "http://127.0.0.1:PORT/webhook", "secret": "...", "rate": 50 (per second; 0 = as fast as the
connection limit allows), "concurrency": 32, "deadline": 60, "deliveries": [{"event", "id", "body"}, ...]}.
Only loopback URLs are accepted. Each delivery is signed and sent once, at its slot; the result lists each
delivery's HTTP status and acknowledge latency (request sent → response read), and the wall time.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import sys
import time
from urllib.parse import urlsplit

import aiohttp

LOOPBACK = ("127.0.0.1", "localhost", "::1")


async def run(spec: dict) -> dict:
    url = spec["url"]
    if urlsplit(url).hostname not in LOOPBACK:
        raise SystemExit(f"refusing a non-loopback target: {url}")
    secret = spec["secret"].encode()
    rate = float(spec.get("rate", 0))
    deadline = time.monotonic() + float(spec.get("deadline", 60))
    deliveries = spec["deliveries"]
    results: list[dict] = [{} for _ in deliveries]
    concurrency = int(spec.get("concurrency", 32))
    connector = aiohttp.TCPConnector(limit=concurrency)
    slots = asyncio.Semaphore(concurrency)  # waiting for a free connection is not part of the ack latency
    timeout = aiohttp.ClientTimeout(total=15)

    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:

        async def send(i: int, delivery: dict) -> None:
            body = delivery["body"].encode()
            headers = {
                "X-GitHub-Event": delivery["event"],
                "X-GitHub-Delivery": delivery["id"],
                "X-Hub-Signature-256": "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest(),
                "Content-Type": "application/json",
                "User-Agent": "GitHub-Hookshot/loadgen",
            }
            async with slots:
                started = time.monotonic()
                try:
                    async with session.post(url, data=body, headers=headers) as response:
                        await response.read()
                        results[i] = {"status": response.status, "latency": time.monotonic() - started}
                except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
                    results[i] = {"status": 0, "error": type(exc).__name__, "latency": time.monotonic() - started}

        started = time.monotonic()
        tasks = []
        for i, delivery in enumerate(deliveries):
            if time.monotonic() > deadline:
                break
            if rate:
                await asyncio.sleep(max(0.0, started + i / rate - time.monotonic()))
            tasks.append(asyncio.ensure_future(send(i, delivery)))
        if tasks:
            await asyncio.wait(tasks, timeout=max(1.0, deadline - time.monotonic()))
        elapsed = time.monotonic() - started
    return {"results": results, "elapsed": elapsed, "sent": len(tasks)}


def main(argv: list[str]) -> int:
    with open(argv[1], encoding="utf-8") as fh:
        spec = json.load(fh)
    json.dump(asyncio.run(run(spec)), sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
