"""Soak `fluxwarden serve` on loopback for a while and print what it held: acks, memory, lost deliveries, stale statuses.

    python -m bench.soak [--minutes 30] [--rate 2] [--seed 1] [--csv rss.csv] [--keep DIR]

One real `fluxwarden serve` process (configured as deploy/ configures the pod: a config file, *_FILE secrets)
against the fake GitHub (tests/fakes/github.py, served from a thread of this process) and a bare git origin in a
temp dir (tests/hardening/harness.py builds both, as the hardening suite does). For `--minutes` it sends:

- signed deliveries at `--rate` per second (pings, `pull_request` opened/synchronize with a fresh commit, `/precheck
  prod` comments) over a pool of PRs;
- a hostile PR every minute, in turn: YAML nested 400 deep, an alias bomb, a symlink out of the repository, a
  17 MiB file, a HelmRelease whose chart (in git) loops;
- at a quarter of the time, the retarget attack of tests/hardening/test_retarget.py: a PR green against branch
  `evil` is retargeted to main (`edited` with `changes.base`), and prod must never be `success` after it;
- at half the time, SIGTERM (seconds to exit) and a restart on the same port; deliveries pause while it is down.

Every second it samples the process tree's RSS from /proc (bot, kustomize, Helm workers, git; the CSV). At the end
it sends nothing more and lets the service drain (`fluxwarden_work_in_progress` 0 and every PR's head final), then
reads the fake before the final SIGTERM: statuses left pending, stale (a base the PR no longer has) or missing, and
whether the symlinked canary ever reached GitHub; and the bot process's own RSS at its idle start, its max, and
after the drain (within 50 MB of idle). Loopback only; the load is bounded by `--rate`.
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import json
import os
import random
import shutil
import signal
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Awaitable, Callable

import yaml

# The test fakes and the hardening harness: the soak drives the real service the way that suite does.
from tests.fakes.github import FakeGitHub
from tests.fluxrepo import dump, obj
from tests.hardening.harness import (
    BOT_TOKEN,
    CLUSTER,
    REPO,
    SECRET,
    Origin,
    comment_payload,
    evil_branch,
    fake_traffic,
    load_payload,
    make_fake,
    open_pull,
    percentile,
    pr_payload,
    sign,
)

ROOT = Path(__file__).resolve().parents[1]
STATUS = f"fluxwarden/{CLUSTER}"
REGULAR = range(1, 9)  # the pool of ordinary PRs
RETARGET_PR = 90
HOSTILE_FIRST = 100
KUSTOMIZATION = "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n"
CANARY = f"soak-canary-{uuid.uuid4().hex}"


def _kustomization(*resources: str) -> str:
    return KUSTOMIZATION + "".join(f"  - {r}\n" for r in resources)


# -- hostile PRs --------------------------------------------------------------------------------------------


def _deep_yaml() -> tuple[dict[str, str | bytes], dict[str, str]]:
    body = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: deep, namespace: default}\nextra: " + "[" * 400 + "]" * 400 + "\n"
    return {"apps/kustomization.yaml": _kustomization("app.yaml", "deep.yaml"), "apps/deep.yaml": body}, {}


def _alias_bomb() -> tuple[dict[str, str | bytes], dict[str, str]]:
    body = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: bomb\n  namespace: default\ndata:\n  a: &a [lol,lol,lol,lol,lol,lol,lol,lol,lol]\n" + "".join(
        f"  {chr(98 + i)}: &{chr(98 + i)} [{','.join(['*' + chr(97 + i)] * 9)}]\n" for i in range(8)
    )
    return {"apps/kustomization.yaml": _kustomization("app.yaml", "bomb.yaml"), "apps/bomb.yaml": body}, {}


def _symlink_out(outside: Path) -> tuple[dict[str, str | bytes], dict[str, str]]:
    return {"apps/kustomization.yaml": _kustomization("app.yaml", "stolen.yaml")}, {"apps/stolen.yaml": str(outside / "secret.yaml")}


def _huge_file() -> tuple[dict[str, str | bytes], dict[str, str]]:
    body = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: huge}\ndata:\n  x: " + "x" * (17 * 1024 * 1024) + "\n"  # over the 16 MiB limit
    return {"apps/kustomization.yaml": _kustomization("app.yaml", "huge.yaml"), "apps/huge.yaml": body}, {}


def _looping_chart() -> tuple[dict[str, str | bytes], dict[str, str]]:
    release = obj("helm.toolkit.fluxcd.io/v2", "HelmRelease", "loop", "default", spec={
        "interval": "10m",
        "chart": {"spec": {"chart": "./charts/loop", "sourceRef": {"kind": "GitRepository", "name": "flux-system", "namespace": "flux-system"}}},
    })
    return {
        "apps/kustomization.yaml": _kustomization("app.yaml", "release.yaml"),
        "apps/release.yaml": dump(release),
        "charts/loop/Chart.yaml": "apiVersion: v2\nname: loop\nversion: 0.1.0\ntype: application\n",
        "charts/loop/values.yaml": "{}\n",
        # Nested: 10^10 iterations, no memory to speak of; only the Helm worker's timeout ends it.
        "charts/loop/templates/x.yaml": "{{ range until 100000 }}{{ range until 100000 }}{{ end }}{{ end }}\n",
    }, {}


HOSTILE: tuple[tuple[str, Callable[[Path], tuple[dict[str, str | bytes], dict[str, str]]]], ...] = (
    ("deep-yaml", lambda _: _deep_yaml()),
    ("alias-bomb", lambda _: _alias_bomb()),
    ("symlink-out", _symlink_out),
    ("huge-file", lambda _: _huge_file()),
    ("looping-chart", lambda _: _looping_chart()),
)


# -- loopback HTTP (the bench may not import aiohttp: a minimal HTTP/1.1 client on asyncio streams) -----------


async def http(port: int, method: str, path: str, body: bytes = b"", headers: dict[str, str] | None = None, timeout: float = 15) -> tuple[int, float]:
    """One request to 127.0.0.1:`port`; the status (0 when the connection failed) and seconds until the status line."""
    status, latency, _ = await http_read(port, method, path, body, headers, timeout)
    return status, latency


async def http_read(
    port: int, method: str, path: str, body: bytes = b"", headers: dict[str, str] | None = None, timeout: float = 15
) -> tuple[int, float, bytes]:
    """`http`, and the response as read (headers and body; empty when the connection failed)."""
    started = time.monotonic()
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), timeout)
    except (OSError, asyncio.TimeoutError):
        return 0, time.monotonic() - started, b""
    try:
        lines = [f"{method} {path} HTTP/1.1", f"Host: 127.0.0.1:{port}", f"Content-Length: {len(body)}", "Connection: close"]
        lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
        await writer.drain()
        status_line = await asyncio.wait_for(reader.readline(), timeout)
        latency = time.monotonic() - started
        rest = await asyncio.wait_for(reader.read(), timeout)
        parts = status_line.split()
        return (int(parts[1]) if len(parts) >= 2 and parts[1].isdigit() else 0), latency, rest
    except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError):
        return 0, time.monotonic() - started, b""
    finally:
        writer.close()


# -- the process tree's memory -------------------------------------------------------------------------------

KINDS = ("bot", "kustomize", "helm", "git", "other")


def _ppid(pid: str) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat[stat.rindex(")") + 2:].split()[1])


def _kind(pid: int, root: int) -> str:
    if pid == root:
        return "bot"
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return "other"
    first = os.path.basename(argv[0].decode(errors="replace"))
    text = b" ".join(argv).decode(errors="replace")
    if "kustomize" in first or "kubectl" in first or " kustomize " in f" {text} ":
        return "kustomize"
    if "multiprocessing" in text:
        return "helm"  # the spawned worker processes (bot/adapters/workers.py) and their resource tracker
    if first.startswith("git"):
        return "git"
    return "other"


def tree_rss(root: int) -> dict[str, int]:
    """RSS in bytes of `root` and all its descendants, by kind, plus the number of processes."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            parent = _ppid(entry)
            if parent is not None:
                children.setdefault(parent, []).append(int(entry))
    out = dict.fromkeys(KINDS, 0) | {"procs": 0}
    todo = [root]
    while todo:
        pid = todo.pop()
        todo.extend(children.get(pid, ()))
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        rss = next((int(line.split()[1]) * 1024 for line in status.splitlines() if line.startswith("VmRSS:")), 0)
        out[_kind(pid, root)] += rss
        out["procs"] += 1
    return out


# -- the soak ------------------------------------------------------------------------------------------------


@dataclass
class Delivery:
    """One webhook delivery sent, and how it was answered."""

    at: float
    event: str
    status: int
    latency: float


@dataclass
class Soak:
    """Everything the tasks of one soak share."""

    work: Path
    origin: Origin
    fake: FakeGitHub
    port: int
    minutes: float
    rate: float
    rng: random.Random
    outside: Path
    started: float = field(default_factory=time.monotonic)
    proc: asyncio.subprocess.Process | None = None
    generation: int = 0
    up: asyncio.Event = field(default_factory=asyncio.Event)
    deliveries: list[Delivery] = field(default_factory=list)
    rss: list[dict[str, float]] = field(default_factory=list)
    pulls: dict[int, str] = field(default_factory=dict)  # PR number -> what it is (regular, a hostile kind, retarget)
    hostile: list[tuple[int, str, str]] = field(default_factory=list)  # (PR, kind, head)
    notes: list[str] = field(default_factory=list)
    figures: dict[str, Any] = field(default_factory=dict)
    git: ThreadPoolExecutor = field(default_factory=lambda: ThreadPoolExecutor(1, thread_name_prefix="soak-git"))
    bot_idle: dict[int, float] = field(default_factory=dict)  # process generation -> the bot's own RSS (MiB) once healthy, before work

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    async def in_git(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Git work on the origin, one at a time and off the loop (the ack latencies are timed on it)."""
        return await asyncio.get_running_loop().run_in_executor(self.git, lambda: fn(*args))

    async def deliver(self, event: str, data: Any) -> int:
        """Send one signed delivery (waits while the service is down for the restart)."""
        await self.up.wait()
        body = json.dumps(data).encode()
        status, latency = await http(self.port, "POST", "/webhook", body, {
            "X-GitHub-Event": event,
            "X-GitHub-Delivery": str(uuid.uuid4()),
            "X-Hub-Signature-256": sign(body),
            "Content-Type": "application/json",
            "User-Agent": "GitHub-Hookshot/soak",
        })
        self.deliveries.append(Delivery(self.elapsed(), event, status, latency))
        return status

    # -- the service process

    async def start(self, config: Path, env: dict[str, str]) -> None:
        self.generation += 1
        log = (self.work / f"serve-{self.generation}.log").open("wb")
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "bot.service.cli", "serve", "--config", str(config),
            env=env, cwd=str(ROOT), stdin=asyncio.subprocess.DEVNULL, stdout=log, stderr=log,
        )
        log.close()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.returncode is not None:
                raise SystemExit(f"serve exited with {self.proc.returncode}: see {self.work}/serve-{self.generation}.log")
            if (await http(self.port, "GET", "/healthz", timeout=2))[0] == 200:
                await asyncio.sleep(1)  # the start-up's own work (readiness, re-running what was left pending) begins
                self.bot_idle[self.generation] = (await asyncio.to_thread(tree_rss, self.proc.pid))["bot"] / 2**20
                self.up.set()
                return
            await asyncio.sleep(0.2)
        raise SystemExit(f"serve did not become healthy in 60 s: see {self.work}/serve-{self.generation}.log")

    async def stop(self, sig: int = signal.SIGTERM, timeout: float = 60) -> tuple[int, float]:
        """Signal the service; its exit code and the seconds it took to exit."""
        assert self.proc is not None
        self.up.clear()
        sent = time.monotonic()
        if self.proc.returncode is None:
            self.proc.send_signal(sig)
        try:
            code = await asyncio.wait_for(self.proc.wait(), timeout)
        except asyncio.TimeoutError:
            self.proc.kill()
            code = await self.proc.wait()
            self.notes.append(f"serve ignored signal {sig} for {timeout:.0f} s and was killed")
        return code, time.monotonic() - sent

    # -- the tasks

    async def sample(self, csv_path: Path, until: asyncio.Event) -> None:
        with csv_path.open("w", newline="") as fh:
            out = csv.writer(fh)
            out.writerow(["seconds", "generation", *(f"{k}_mib" for k in KINDS), "total_mib", "procs"])
            while not until.is_set():
                sample = await asyncio.to_thread(tree_rss, self.proc.pid) if self.proc is not None and self.proc.returncode is None else None
                if sample and sample["bot"]:  # 0: the process exited between the check and the read
                    total = sum(sample[k] for k in KINDS)
                    row = {"seconds": round(self.elapsed(), 1), "generation": self.generation, **{k: sample[k] / 2**20 for k in KINDS}, "total": total / 2**20, "procs": sample["procs"]}
                    self.rss.append(row)
                    out.writerow([row["seconds"], self.generation, *(f"{row[k]:.1f}" for k in KINDS), f"{row['total']:.1f}", row["procs"]])
                    fh.flush()
                try:
                    await asyncio.wait_for(until.wait(), 1.0)
                except asyncio.TimeoutError:
                    pass

    async def load(self, until: float) -> None:
        """Mixed deliveries at `rate` per second: pings, PR pushes, `/precheck` comments."""
        opened: set[int] = set()
        pushes = 0
        next_at = time.monotonic()
        while self.elapsed() < until:
            next_at += 1 / self.rate
            pick = self.rng.random()
            number = self.rng.choice(REGULAR)
            if pick < 0.6:
                task: Awaitable[int] = self.deliver("ping", load_payload("ping"))
            elif pick < 0.85 or number not in opened:
                pushes += 1
                greeting = f"push {pushes} of PR {number}"
                head = await self.in_git(self.origin.pull, number, {"apps/app.yaml": dump(obj("v1", "ConfigMap", "app", "default", data={"greeting": greeting}))})
                action = "synchronize" if number in opened else "opened"
                if number not in opened:
                    await self.in_git(open_pull, self.fake, self.origin, number, head)
                    self.pulls[number] = "regular"
                    opened.add(number)
                else:
                    with self.fake.lock:
                        self.fake.pull(REPO, number).head_sha = head
                task = self.deliver("pull_request", pr_payload(number, head, self.origin.main, action))
            else:
                comment = self.fake.add_comment(REPO, number, f"/precheck {CLUSTER}", user="bob")  # as GitHub has it before it delivers
                task = self.deliver("issue_comment", comment_payload(number, comment.id, comment.body))
            asyncio.get_running_loop().create_task(task)
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))

    async def hostile_prs(self, until: float) -> None:
        """A hostile PR every minute, the kinds in turn."""
        number = HOSTILE_FIRST
        while self.elapsed() + 60 < until:
            await asyncio.sleep(60)
            kind, make = HOSTILE[(number - HOSTILE_FIRST) % len(HOSTILE)]
            files, links = make(self.outside)
            head = await self.in_git(self.origin.pull, number, files, links)
            await self.in_git(open_pull, self.fake, self.origin, number, head)
            self.pulls[number] = kind
            self.hostile.append((number, kind, head))
            await self.deliver("pull_request", pr_payload(number, head, self.origin.main))
            number += 1

    async def retarget(self, at: float) -> None:
        """tests/hardening/test_retarget.py's attack: green against `evil`, retargeted to main; never green after."""
        await asyncio.sleep(max(0.0, at - self.elapsed()))
        evil, head, pull = await self.in_git(self._evil_branch)
        self.pulls[pull.number] = "retarget"
        opened = pr_payload(pull.number, head, evil)
        opened["pull_request"]["base"]["ref"] = "evil"
        await self.deliver("pull_request", opened)
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and self.newest(head) in (None, "pending"):
            await asyncio.sleep(1)
        self.figures["retarget_before"] = f"{self.newest(head)} vs evil"
        with self.fake.lock:
            pull.base_ref, pull.base_sha = "main", self.origin.main
            self.figures["retarget_statuses_before"] = len(self.fake.statuses_for(REPO, head))
        edited = pr_payload(pull.number, head, self.origin.main)
        edited["action"] = "edited"
        edited["changes"] = {"base": {"ref": {"from": "evil"}, "sha": {"from": evil}}}
        self.figures["retarget_head"] = head
        await self.deliver("pull_request", edited)

    def _evil_branch(self) -> tuple[str, str, Any]:
        evil, head = evil_branch(self.origin, RETARGET_PR)
        self.fake.repos[REPO.lower()].next_number = RETARGET_PR
        pull = self.fake.add_pull(REPO, head_sha=head, base_ref="evil", base_sha=evil, head_ref="pr-evil", author="alice")
        return evil, head, pull

    async def restart(self, at: float, config: Path, env: dict[str, str]) -> None:
        await asyncio.sleep(max(0.0, at - self.elapsed()))
        code, seconds = await self.stop(signal.SIGTERM)
        self.figures["sigterm_exit"] = (code, seconds)
        down = time.monotonic()
        await self.start(config, env)
        self.figures["restart_down_seconds"] = time.monotonic() - down

    # -- reading the fake

    def newest(self, sha: str) -> str | None:
        with self.fake.lock:
            mine = [s for s in self.fake.statuses_for(REPO, sha) if s.context == STATUS]
        return mine[0].state if mine else None

    def final_statuses(self) -> dict[int, tuple[str, str | None, str]]:
        """PR -> (its current head, the newest prod status on it, its description)."""
        out: dict[int, tuple[str, str | None, str]] = {}
        with self.fake.lock:
            for number in self.pulls:
                pull = self.fake.pull(REPO, number)
                mine = [s for s in self.fake.statuses_for(REPO, pull.head_sha) if s.context == STATUS]
                out[number] = (pull.head_sha, mine[0].state if mine else None, mine[0].description or "" if mine else "")
        return out

    async def in_progress(self) -> float | None:
        """The service's `fluxwarden_work_in_progress` (deliveries handled, runs queued or running); None when unread."""
        status, _, response = await http_read(self.port, "GET", "/metrics", timeout=5)
        if status != 200:
            return None
        for line in response.decode(errors="replace").splitlines():
            if line.startswith("fluxwarden_work_in_progress "):
                return float(line.split()[1])
        return None

    async def drain(self, timeout: float) -> tuple[float, bool]:
        """With no more deliveries sent: wait until the service is idle (no delivery handled, no run queued or running)
        and every PR's head has a final prod status, twice in a row a second apart (or `timeout`); the seconds it
        took and whether it drained. Judging before that, or SIGTERM, leaves a run that was still going pending."""
        started, calm = time.monotonic(), 0
        while time.monotonic() - started < timeout:
            final = all(state not in (None, "pending") for _, state, _ in self.final_statuses().values())
            calm = calm + 1 if final and await self.in_progress() == 0 else 0
            if calm >= 2:
                return time.monotonic() - started, True
            await asyncio.sleep(1)
        return time.monotonic() - started, False


def service_files(work: Path, origin: Origin, fake: FakeGitHub, port: int) -> tuple[Path, dict[str, str]]:
    """The config file and environment of `fluxwarden serve`, as deploy/ gives them (and tests/hardening/test_restart.py)."""
    (work / "webhook-secret").write_bytes(SECRET + b"\n")
    (work / "github-token").write_text(BOT_TOKEN + "\n")
    (work / "tmp").mkdir(exist_ok=True)
    config = work / "fluxwarden.yaml"
    config.write_text(yaml.safe_dump({
        "repos": [{"name": REPO, "clone_url": str(origin.bare), "clusters": {CLUSTER: {"automatic": True}}}],
        "limits": {"workers": 2, "queue": 100, "run_timeout": 300, "kustomize_timeout": 90},
        "cache_dir": str(work / "cache"),
    }))
    env = {
        "PATH": os.environ.get("PATH", os.defpath),
        "HOME": str(work),
        "LANG": "C.UTF-8",
        "PYTHONMALLOC": "malloc",  # as the image runs it (Dockerfile): memory a run freed goes back to the OS
        "TMPDIR": str(work / "tmp"),
        "FLUXWARDEN_WEBHOOK_SECRET_FILE": str(work / "webhook-secret"),
        "FLUXWARDEN_GITHUB_TOKEN_FILE": str(work / "github-token"),
        "FLUXWARDEN_GITHUB_API_URL": fake.base_url,
        "FLUXWARDEN_HOST": "127.0.0.1",
        "FLUXWARDEN_PORT": str(port),
    }
    return config, env


async def _free_port() -> int:
    """A free loopback port (asyncio's server picks it; `socket` is the charts adapter's alone)."""
    server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = int(server.sockets[0].getsockname()[1])
    server.close()
    await server.wait_closed()
    return port


async def soak(work: Path, minutes: float, rate: float, seed: int, csv_path: Path, quota: int) -> Soak:
    origin = Origin(work)
    outside = work / "outside"
    outside.mkdir()
    (outside / "secret.yaml").write_text(dump(obj("v1", "ConfigMap", "stolen", "default", data={"token": CANARY})))
    fake = make_fake(origin)
    fake.rate_limit = quota  # GitHub gives a token 5,000 requests an hour (an App installation up to 12,500)
    with fake.start_in_thread():
        port = await _free_port()
        config, env = service_files(work, origin, fake, port)
        state = Soak(work, origin, fake, port, minutes, rate, random.Random(seed), outside)
        done = asyncio.Event()
        sampler = asyncio.get_running_loop().create_task(state.sample(csv_path, done))
        try:
            await state.start(config, env)
            until = minutes * 60
            await asyncio.gather(
                state.load(until), state.hostile_prs(until), state.retarget(until / 4), state.restart(until / 2, config, env),
            )
            state.figures["settle_seconds"], drained = await state.drain(timeout=300)
            if not drained:
                state.notes.append("the service did not drain within 300 s of the last delivery")
            state.figures["statuses"] = state.final_statuses()  # before SIGTERM: a run it interrupts would read pending
            await asyncio.sleep(3)  # the heap is released just after the last run (bot/service/runs.py)
            assert state.proc is not None
            state.figures["bot_end"] = (await asyncio.to_thread(tree_rss, state.proc.pid))["bot"] / 2**20
            state.figures["final_exit"] = await state.stop(signal.SIGTERM)
        finally:
            if state.proc is not None and state.proc.returncode is None:
                state.proc.kill()
                await state.proc.wait()
            done.set()
            await sampler
        state.figures["canary_leaked"] = CANARY in fake_traffic(fake)
        with fake.lock:
            state.figures["github_requests"] = len(fake.requests)
            state.figures["github_rate_limited"] = sum(1 for r in fake.requests if r.status in (403, 429))
        state.figures["quota"] = quota
        head = state.figures.get("retarget_head")
        if head:
            with fake.lock:
                after = [s for s in reversed(fake.statuses_for(REPO, head)) if s.context == STATUS][state.figures["retarget_statuses_before"]:]
            state.figures["retarget_after"] = [s.state for s in after]
    state.git.shutdown()
    return state


def summary(state: Soak) -> tuple[list[tuple[str, str]], list[str]]:
    """The table's rows and the problems found (empty: the soak held)."""
    rows: list[tuple[str, str]] = []
    problems: list[str] = list(state.notes)
    sent = len(state.deliveries)
    answered = [d for d in state.deliveries if 200 <= d.status < 300]
    lost = sent - len(answered)
    latencies = [d.latency * 1000 for d in answered]
    by_event: dict[str, int] = {}
    for d in state.deliveries:
        by_event[d.event] = by_event.get(d.event, 0) + 1
    rows.append(("deliveries sent", f"{sent} ({', '.join(f'{k} {v}' for k, v in sorted(by_event.items()))}) over {state.minutes:g} min"))
    rows.append(("deliveries lost (not 2xx)", f"{lost}" + (f" (statuses: {sorted({d.status for d in state.deliveries if not 200 <= d.status < 300})})" if lost else "")))
    rows.append(("ack latency p50 / p99 / max", f"{percentile(latencies, 50):.1f} / {percentile(latencies, 99):.1f} / {max(latencies, default=float('nan')):.1f} ms"))
    if lost:
        problems.append(f"{lost} deliveries lost")
    rss = state.rss
    if rss:
        peak = max(rss, key=lambda r: r["total"])
        rows.append(("tree RSS peak (total)", f"{peak['total']:.0f} MiB at {peak['seconds']:.0f} s (bot {peak['bot']:.0f}, kustomize {peak['kustomize']:.0f}, helm {peak['helm']:.0f}, git {peak['git']:.0f}, other {peak['other']:.0f})"))
        for kind in KINDS[:3]:
            rows.append((f"  peak {kind}", f"{max(r[kind] for r in rss):.0f} MiB"))
        rows.append(("  processes in the tree, max", f"{max(r['procs'] for r in rss):.0f}"))
        generations = sorted({int(r["generation"]) for r in rss})
        for generation in generations:
            mine = [r["bot"] for r in rss if r["generation"] == generation]
            idle = state.bot_idle.get(generation, float("nan"))
            end = state.figures.get("bot_end", float("nan")) if generation == generations[-1] else mine[-1]
            what = "after the drain" if generation == generations[-1] else "at SIGTERM"
            rows.append((f"bot process {generation} RSS: idle start / max / {what}", f"{idle:.0f} / {max(mine):.0f} / {end:.0f} MiB"))
        last_idle, end = state.bot_idle.get(generations[-1], float("nan")), state.figures.get("bot_end", float("nan"))
        if end - last_idle > 50 * 10**6 / 2**20:
            problems.append(f"the bot kept {end - last_idle:.0f} MiB more after the drain than at its idle start (bound: 50 MB)")
        if peak["total"] > 3 * 1024:
            problems.append(f"the tree peaked at {peak['total']:.0f} MiB, over the pod's 3 GiB")
    code, seconds = state.figures.get("sigterm_exit", (None, float("nan")))
    rows.append(("SIGTERM mid-soak: exit code, seconds", f"{code}, {seconds:.1f} s; back up after {state.figures.get('restart_down_seconds', float('nan')):.1f} s"))
    if code != 0 or not seconds < 30:
        problems.append(f"SIGTERM: exit {code} after {seconds:.1f} s")
    code, seconds = state.figures.get("final_exit", (None, float("nan")))
    rows.append(("SIGTERM at the end: exit code, seconds", f"{code}, {seconds:.1f} s"))
    after = state.figures.get("retarget_after", [])
    rows.append(("retarget: before, then prod states after", f"{state.figures.get('retarget_before')}; then {after}"))
    if "success" in after or not after or after[-1] != "failure":
        problems.append(f"retarget: prod states after retargeting to main {after}")
    statuses: dict[int, tuple[str, str | None, str]] = state.figures.get("statuses", {})
    pending = [n for n, (_, s, _) in statuses.items() if s == "pending"]
    missing = [n for n, (_, s, _) in statuses.items() if s is None]
    stale = [n for n, (_, s, d) in statuses.items() if s is not None and not d.endswith("(vs main)")]
    rows.append(("PRs / drained after the last delivery in", f"{len(statuses)} / {state.figures.get('settle_seconds', float('nan')):.0f} s"))
    rows.append(("statuses left pending / missing / stale", f"{len(pending)} {pending} / {len(missing)} {missing} / {len(stale)} {stale}"))
    if pending or missing or stale:
        problems.append(f"statuses: pending {pending}, missing {missing}, stale {stale}")
    for number, kind, _ in state.hostile:
        _, final, description = statuses.get(number, ("", None, ""))
        rows.append((f"hostile PR {number} ({kind})", f"{final}: {description}"))
        if final not in ("failure", "error"):
            problems.append(f"hostile PR {number} ({kind}) ended {final}")
    requests, limited = state.figures.get("github_requests", 0), state.figures.get("github_rate_limited", 0)
    hours = max(state.rss[-1]["seconds"], 1) / 3600 if state.rss else state.minutes / 60
    rows.append(("GitHub API requests (per hour) / refused 403-429", f"{requests} ({requests / hours:,.0f}/h, quota {state.figures.get('quota', 0):,}/h) / {limited}"))
    if limited:
        problems.append(f"{limited} GitHub requests refused (the {state.figures.get('quota', 0):,}/h quota ran out)")
    rows.append(("canary bytes written to GitHub", "yes" if state.figures.get("canary_leaked") else "0"))
    if state.figures.get("canary_leaked"):
        problems.append("the symlinked canary reached GitHub")
    return rows, problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--rate", type=float, default=2.0, help="deliveries per second (at most 5)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--csv", type=Path, default=Path(tempfile.gettempdir()) / "fluxwarden-soak-rss.csv", help="where the RSS samples go, one row a second")
    parser.add_argument("--github-quota", type=int, default=5000, help="the fake GitHub's requests per hour per token (GitHub's own: 5,000)")
    parser.add_argument("--keep", type=Path, default=None, help="work in DIR and leave it there (serve logs, origin, cache)")
    args = parser.parse_args(argv)
    if not 0 < args.rate <= 5:
        parser.error("--rate must be in (0, 5]: the soak is a steady load, not a flood")
    if args.minutes < 2:
        parser.error("--minutes must be at least 2 (a hostile PR a minute, a restart in the middle)")
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="fluxwarden-soak-"))
    work.mkdir(parents=True, exist_ok=True)
    started = time.time()
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # as Ctrl-C: the soak's `finally` stops its serve process
    try:
        state = asyncio.run(soak(work, args.minutes, args.rate, args.seed, args.csv, args.github_quota))
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    rows, problems = summary(state)
    width = max(len(label) for label, _ in rows)
    print(f"soak: {args.minutes:g} min at {args.rate:g} deliveries/s, {time.time() - started:.0f} s wall, load average {os.getloadavg()[0]:.1f}; RSS samples in {args.csv}")
    for label, value in rows:
        print(f"  {label:<{width}}  {value}")
    print("problems: " + ("none" if not problems else "; ".join(problems)))
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
