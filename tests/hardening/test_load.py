"""Load: 500 signed deliveries in ~10 s against the real aiohttp server, from a separate generator process.

Most deliveries are acknowledged and then ignored or refused quickly (comments without a command, fork PRs,
closed PRs, pings, unknown events, redeliveries); a few are real pushes to three PRs, sent in bursts so
that the run queue supersedes and coalesces them. All must be acknowledged, none lost (the server's own
counters add up to what was sent), and each PR must end with one comment and a final status on its newest
push. Figures (ack latency p50/p99, deliveries/s, peak RSS, webhook-to-status latency) are printed.
"""

from __future__ import annotations

import asyncio
import copy
import json
import random
import resource
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from aiohttp.test_utils import TestClient, TestServer

from bot.adapters.github import GitHubAdapter, GitHubAuth
from bot.service.runs import RunQueue
from bot.service.app import build_service
from bot.service.settings import ServiceConfig
from bot.engine.chatops.settings import ClusterPolicy, RepoPolicy
from tests.fakes.github import FakeGitHub
from tests.hardening.harness import (
    BOT,
    BOT_TOKEN,
    REPO,
    SECRET,
    Harness,
    Origin,
    comment_payload,
    load_payload,
    metric_value,
    open_pull,
    percentile,
    pr_payload,
    record_figure,
    states,
)
from tests.service.test_app import Origin as ExampleOrigin
from tests.service.test_app import payload

DELIVERIES = 500
RATE = 50.0  # per second: 500 in 10 s
PRS = (1, 2, 3)
BURSTS = 2  # per PR; each burst is three pushes 40 ms apart, then a ready_for_review of the last one


def peak_rss_reset() -> bool:
    """Reset this process's peak RSS (VmHWM) so the next reading covers only what follows (Linux)."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def peak_rss_bytes() -> int:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def plan(origin: Origin, heads: dict[int, list[str]]) -> tuple[list[dict[str, Any]], Counter]:
    """The 500 deliveries in send order, and what the server should count for them (event, outcome)."""
    rng = random.Random(8)
    filler_templates = {
        "comment": load_payload("issue_comment.created.pr"),
        "issue-comment": load_payload("issue_comment.created.issue"),
        "fork": load_payload("pull_request.synchronize.fork"),
        "closed": load_payload("pull_request.closed"),
    }
    real: dict[int, tuple[str, dict]] = {}
    for p_index, number in enumerate(PRS):
        for burst in range(BURSTS):
            at = 40 + burst * 220 + p_index * 50  # well inside the 10 s window, PRs interleaved
            for k in range(3):
                sha = heads[number][burst * 3 + k]
                real[at + 2 * k] = ("pull_request", pr_payload(number, sha, origin.main, "synchronize"))
            real[at + 7] = ("pull_request", pr_payload(number, heads[number][burst * 3 + 2], origin.main, "ready_for_review"))
    deliveries: list[dict[str, Any]] = []
    expected: Counter = Counter()
    seen_ids: list[str] = []
    for i in range(DELIVERIES):
        ident = f"load-{i:04d}"
        if i in real:
            event, data = real[i]
            outcome = "accepted"
        else:
            roll = rng.random()
            if roll < 0.40:
                event, data = "issue_comment", copy.deepcopy(filler_templates["comment"])
                data["issue"]["number"] = rng.choice(PRS)
                data["comment"].update({"id": 900_000 + i, "body": rng.choice(["LGTM 👍", "nice", "can we merge?", "```yaml\nkey: v\n```"])})
                outcome = "accepted"
            elif roll < 0.60:
                event, data = "pull_request", copy.deepcopy(filler_templates["fork"])
                outcome = "accepted"
            elif roll < 0.70:
                event, data = "pull_request", copy.deepcopy(filler_templates["closed"])
                outcome = "accepted"
            elif roll < 0.80:
                event, data, outcome = "ping", {"zen": "Design for failure.", "hook_id": 1}, "ping"
            elif roll < 0.90:
                event, data, outcome = rng.choice(["check_run", "status", "workflow_run"]), {"action": "completed"}, "ignored"
            elif roll < 0.95 or not seen_ids:
                event, data = "issue_comment", copy.deepcopy(filler_templates["issue-comment"])
                data["comment"].update({"id": 900_000 + i, "body": "thanks!"})  # on an issue, not a PR
                outcome = "accepted"
            else:  # GitHub's redelivery: same delivery id, same body
                previous = rng.choice(seen_ids)
                again = next(d for d in deliveries if d["id"] == previous)
                deliveries.append(dict(again))
                expected[(again["event"], "duplicate")] += 1
                continue
        deliveries.append({"event": event, "id": ident, "body": json.dumps(data)})
        expected[(event, outcome)] += 1
        if outcome == "accepted":
            seen_ids.append(ident)
    return deliveries, expected


async def run_generator(spec: dict[str, Any], tmp: Path) -> dict[str, Any]:
    path = tmp / "load-spec.json"
    path.write_text(json.dumps(spec))
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tests.hardening.loadgen", str(path),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, cwd=str(Path(__file__).resolve().parents[2]),
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout=90)
    except asyncio.TimeoutError:
        proc.kill()
        await proc.wait()
        raise
    assert proc.returncode == 0, err.decode()[-2000:]
    return json.loads(out)


async def test_500_deliveries_in_10_seconds(start, origin: Origin, fake, tmp_path: Path) -> None:
    heads = {number: origin.pushes(number, BURSTS * 3) for number in PRS}
    for number in PRS:
        open_pull(fake, origin, number, heads[number][-1])
    deliveries, expected = plan(origin, heads)
    assert len(deliveries) == DELIVERIES
    # Every run reads the PR's comments before it posts: held 0.3 s there, a run is still going when
    # the next push of its burst lands 40 ms later, however fast the engine renders (supersede is
    # then certain, not a race with the renderer's speed).
    held = fake.inject("GET", r"/issues/\d+/comments", delay=0.3, times=10_000)
    async with start(workers=2, queue=100) as h:
        submitted: Counter = Counter()
        queue: RunQueue = h.service.queue
        real_submit = queue.submit

        def counting_submit(key, sha, job):  # a spy: counts what the queue decided, changes nothing
            outcome = real_submit(key, sha, job)
            submitted[outcome.value] += 1
            return outcome

        queue.submit = counting_submit  # type: ignore[method-assign]
        reset = peak_rss_reset()
        spec = {"url": str(h.client.make_url("/webhook")), "secret": SECRET.decode(), "rate": RATE, "concurrency": 64, "deadline": 60, "deliveries": deliveries}
        result = await run_generator(spec, tmp_path)
        await h.settle(timeout=90)
        rss = peak_rss_bytes()
        results = result["results"]
        statuses = Counter(r.get("status") for r in results)
        assert result["sent"] == DELIVERIES
        assert set(statuses) <= {200, 202, 204}, statuses  # every delivery acknowledged
        latencies = [r["latency"] for r in results]
        exposition = await (await h.client.get("/metrics")).text()
        counted = Counter()
        for event, outcome in expected:
            counted[(event, outcome)] = int(metric_value(exposition, "fluxwarden_webhook_deliveries_total", event=event, outcome=outcome))
        assert counted == expected, "the server's counters must account for every delivery"
        assert sum(expected.values()) == DELIVERIES
        # Superseded runs were cancelled, same-SHA ones coalesced; each PR ends on its newest push, once.
        assert set(submitted) <= {"started", "superseded", "coalesced"}, submitted
        assert held.hits > 0
        assert submitted["superseded"] >= len(PRS) and submitted["coalesced"] >= 1, submitted
        runs = sum(metric_value(exposition, "fluxwarden_runs_total", cluster="prod", verdict=v) for v in ("success", "failure", "error"))
        real_deliveries = len(PRS) * BURSTS * 4
        assert runs < real_deliveries
        for number in PRS:
            assert states(fake, heads[number][-1])[-1] == "success", (number, states(fake, heads[number][-1]))
            comments = [c for c in fake.issue_comments(REPO, number) if c.user == BOT]
            assert len(comments) == 1, [c.body[:60] for c in comments]
            assert heads[number][-1][:12] in comments[0].body
        assert await h.healthy()
        record_figure("load_deliveries", DELIVERIES, "deliveries")
        record_figure("load_send_seconds", result["elapsed"], "s")
        record_figure("load_deliveries_per_second", DELIVERIES / result["elapsed"], "1/s")
        record_figure("load_ack_p50_ms", percentile(latencies, 50) * 1000, "ms")
        record_figure("load_ack_p99_ms", percentile(latencies, 99) * 1000, "ms")
        record_figure("load_ack_max_ms", max(latencies) * 1000, "ms")
        record_figure("load_runs_completed", runs, "runs")
        record_figure("load_real_deliveries", real_deliveries, "deliveries")
        for outcome in ("started", "superseded", "coalesced"):
            record_figure(f"load_submitted_{outcome}", submitted[outcome], "runs")
        record_figure("load_peak_rss_mib" if reset else "load_peak_rss_mib_lifetime", rss / 2**20, "MiB")
        assert percentile(latencies, 50) < 0.25 and percentile(latencies, 99) < 2.0


async def test_burst_capacity(start, origin: Origin, fake, tmp_path: Path) -> None:
    """As fast as 32 connections go: how many (quickly ignored) deliveries per second the server acknowledges."""
    template = json.dumps(load_payload("issue_comment.created.pr"))
    deliveries = [{"event": "issue_comment", "id": f"burst-{i}", "body": template.replace('"id": ', f'"x{i}": 0, "id": ', 1)} for i in range(DELIVERIES)]
    async with start() as h:
        spec = {"url": str(h.client.make_url("/webhook")), "secret": SECRET.decode(), "rate": 0, "concurrency": 32, "deadline": 60, "deliveries": deliveries}
        result = await run_generator(spec, tmp_path)
        await h.settle()
        assert {r["status"] for r in result["results"]} == {202}
        assert await h.metric("fluxwarden_webhook_deliveries_total", event="issue_comment", outcome="accepted") == DELIVERIES
        latencies = [r["latency"] for r in result["results"]]
        record_figure("burst_deliveries_per_second", DELIVERIES / result["elapsed"], "1/s")
        record_figure("burst_ack_p50_ms", percentile(latencies, 50) * 1000, "ms")
        record_figure("burst_ack_p99_ms", percentile(latencies, 99) * 1000, "ms")


async def test_webhook_to_status_latency_example_repo(tmp_path: Path) -> None:
    """The bundled example (examples/home-ops, two clusters): PR opened → final status, cold and warm cache."""
    origin = ExampleOrigin(tmp_path)
    async with FakeGitHub() as fake:
        fake.add_user(BOT, token=BOT_TOKEN, type="Bot")
        fake.add_repo(REPO, clone_url=str(origin.bare)).next_number = 7
        fake.add_pull(REPO, head_sha=origin.head, base_sha=origin.main, head_ref="feat/cdi-tier-order", author="alice")
        fake.set_permission(REPO, "bob", "write")
        config = ServiceConfig(
            webhook_secret=SECRET,
            github=GitHubAuth(token=BOT_TOKEN, api_url=fake.base_url),
            repos=(RepoPolicy(REPO, clusters=(ClusterPolicy("dev"), ClusterPolicy("prod")), clone_url=str(origin.bare)),),
            cache_dir=tmp_path / "cache",
        )
        service = build_service(config, github=GitHubAdapter(config.github, min_write_interval=0, bot_login=BOT))
        async with TestClient(TestServer(service.app())) as client:
            h = Harness(client, fake, service, origin)  # type: ignore[arg-type]

            def final(cluster: str, n: int) -> bool:
                got = states(fake, origin.head, f"fluxwarden/{cluster}")
                return len(got) >= n and got[-1] != "pending"

            for label, trigger, n in (
                ("cold", lambda: h.deliver("pull_request", payload("pull_request.opened", head=origin.head, base=origin.main)), 2),
                ("warm", lambda: h.deliver("issue_comment", comment_payload(7, fake.add_comment(REPO, 7, "/precheck", user="bob").id, "/precheck")), 4),
            ):
                started = time.monotonic()
                assert (await trigger()).status == 202
                done: dict[str, float] = {}
                while len(done) < 2 and time.monotonic() - started < 120:
                    for cluster in ("dev", "prod"):
                        if cluster not in done and final(cluster, n):
                            done[cluster] = time.monotonic() - started
                    await asyncio.sleep(0.01)
                assert set(done) == {"dev", "prod"}
                for cluster in ("dev", "prod"):
                    assert states(fake, origin.head, f"fluxwarden/{cluster}")[-1] == "success"
                    record_figure(f"example_webhook_to_status_{label}_{cluster}_s", done[cluster], "s")
