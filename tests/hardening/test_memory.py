"""The memory of the real `fluxwarden serve` (issue 23): a PR that cannot be rendered within `limits.render_memory` ends
in `error` naming the limit, and a long-lived replica returns near its idle RSS after a heavy precheck.

RSS: before, the service trimmed the heap at the end of `open_run`, while the review's frame still held both renders;
the pages freed a moment later stayed resident in the review threads' malloc arenas (PYTHONMALLOC=malloc, as the
image runs it): +180 MiB after a 20,000-object PR, for the rest of the process's life. Now the run queue releases
the heap once the run is over and nothing else runs (bot/service/runs.py, bot/pipeline/session.py).
"""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import aiohttp

from bench.synth import generate
from bot.adapters.memory import rss_of
from tests.fluxrepo import dump, obj
from bot.engine.core.github_limits import MAX_STATUS_DESCRIPTION
from tests.fluxrepo import kustomization
from tests.hardening.harness import (
    REPO, STATUS, Origin, Replica, open_pull, pr_payload, record_figure, serve_config, serve_env, sign, states, wait_for,
)

MiB = 2**20
BOUND = 50 * 10**6  # the "within 50 MB of its idle figure"


def synth_pr(tmp_path: Path, tiers: int, objects: int) -> dict[str, str]:
    """The files of bench/synth.py's repository for cluster prod (its clusters/prod replaces the origin's)."""
    root = tmp_path / "synth"
    generate(root, tiers=tiers, objects=objects, clusters=("prod",), git=False)
    files = {str(p.relative_to(root)): p.read_text() for p in root.rglob("*") if p.is_file()}
    files.pop(".fluxwarden.yaml")  # main's configuration judges the PR (clusters/prod is prod's default path)
    return files


async def deliver(replica: Replica, number: int, head: str, base: str) -> None:
    body = json.dumps(pr_payload(number, head, base)).encode()
    async with aiohttp.ClientSession() as session:
        async with session.post(f"http://127.0.0.1:{replica.port}/webhook", data=body, headers={
            "X-GitHub-Event": "pull_request", "X-GitHub-Delivery": f"memory-{number}",
            "X-Hub-Signature-256": sign(body), "Content-Type": "application/json",
        }) as response:
            assert response.status == 202


async def settled_rss(pid: int, seconds: float) -> int:
    """The process's lowest RSS over `seconds` (sampled every 0.2 s): what it keeps, not a moment of its work."""
    low, deadline = rss_of(pid) or 0, time.monotonic() + seconds
    while time.monotonic() < deadline:
        await wait_for(lambda: False, 0.2)
        low = min(low, rss_of(pid) or low)
    return low


async def test_a_replica_returns_near_its_idle_rss_after_a_heavy_precheck(origin: Origin, fake, tmp_path: Path) -> None:
    small = origin.pull(1, {"apps/app.yaml": dump(obj("v1", "ConfigMap", "app", "default", data={"greeting": "warm-up"}))})
    heavy = origin.pull(2, synth_pr(tmp_path, tiers=10, objects=8_000))
    for number, head in ((1, small), (2, heavy)):
        open_pull(fake, origin, number, head)
    replica = Replica("memory", tmp_path, serve_env(tmp_path, fake, PYTHONMALLOC="malloc"))  # as the image runs it (Dockerfile)
    try:
        await replica.start(serve_config(tmp_path, origin))
        await replica.wait_healthy()
        assert replica.proc is not None
        pid = replica.proc.pid
        await deliver(replica, 1, small, origin.main)  # warm-up: the modules a run imports, the mirror, kustomize's version
        assert await wait_for(lambda: states(fake, small)[-1:] == ["success"], timeout=60), replica.log.read_text()[-3000:]
        idle = await settled_rss(pid, 2)

        await deliver(replica, 2, heavy, origin.main)
        peak = idle

        def final() -> bool:
            nonlocal peak
            peak = max(peak, rss_of(pid) or 0)
            return states(fake, heavy)[-1:] not in ([], ["pending"])

        assert await wait_for(final, timeout=180, interval=0.2), replica.log.read_text()[-3000:]
        assert states(fake, heavy)[-1] == "success", fake.statuses_for(REPO, heavy)[0].description
        after = await settled_rss(pid, 3)  # the heap is released just after the final status is written
        record_figure("replica_rss_idle_mib", idle / MiB, "MiB")
        record_figure("replica_rss_peak_mib", peak / MiB, "MiB")
        record_figure("replica_rss_after_mib", after / MiB, "MiB")
        assert peak - idle > 2 * BOUND, f"the precheck was not heavy enough to show anything ({(peak - idle) / MiB:.0f} MiB over idle)"
        assert after <= idle + BOUND, f"{(after - idle) / MiB:.0f} MiB more resident after the run than idle ({idle / MiB:.0f} MiB)"
    finally:
        if replica.proc is not None and replica.proc.returncode is None:
            await replica.stop(signal.SIGTERM)


async def test_a_pr_that_cannot_render_within_the_memory_budget_ends_in_error_naming_the_limit(origin: Origin, fake, tmp_path: Path) -> None:
    """`limits.render_memory: 200Mi` in the settings file; the PR's tier holds a 14 MiB ConfigMap value, which kustomize
    needs ~230 MiB to build: the build is stopped when it passes the budget, and the status is `error` (no verdict),
    its description naming the limit. main's own tier (a ~45 MiB build) renders within it."""
    value = "x" * (14 * 2**20)  # under the 16 MiB a file may have: the build, not the input, is too big
    head = origin.pull(1, {
        "apps/kustomization.yaml": kustomization("app.yaml", "big.yaml"),
        "apps/big.yaml": f"apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: big, namespace: default}}\ndata:\n  big: {value}\n",
    })
    open_pull(fake, origin, 1, head)
    replica = Replica("budget", tmp_path, serve_env(tmp_path, fake))
    try:
        await replica.start(serve_config(tmp_path, origin, render_memory="200Mi"))
        await replica.wait_healthy()
        await deliver(replica, 1, head, origin.main)
        assert await wait_for(lambda: states(fake, head)[-1:] not in ([], ["pending"]), timeout=120), replica.log.read_text()[-3000:]
        final = next(s for s in fake.statuses_for(REPO, head) if s.context == STATUS)
        assert final.state == "error", (final.state, final.description)
        assert "render memory limit: limits.render_memory is 200 MiB" in final.description, final.description
        assert len(final.description) <= MAX_STATUS_DESCRIPTION
        assert value[:64] not in replica.log.read_text()
    finally:
        if replica.proc is not None and replica.proc.returncode is None:
            await replica.stop(signal.SIGTERM)
