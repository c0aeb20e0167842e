"""The render budget: kustomize builds and Helm workers admitted by measured RSS, a build over the whole budget refused."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections import deque
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Iterator

import pytest

from bot.adapters.kustomize import KustomizeBinary, allow_builds, run_build, stop_builds
from bot.adapters.memory import LIMIT_PREFIX, RENDERS, RenderBudget, rss_of, tree_rss
from bot.adapters.workers import WorkerPool
from bot.engine.core.errors import BuildStopped
from tests.adapters import worker_tasks

MiB = 2**20
OUTPUT = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: fake\n"


@pytest.fixture
def budget() -> Iterator[RenderBudget]:
    """The process-wide budget, restored after the test (a fresh set of learned peaks too)."""
    limit, peaks = RENDERS.limit, dict(RENDERS._peaks)
    RENDERS._peaks.clear()
    RENDERS.waited = 0
    yield RENDERS
    RENDERS.set_limit(limit)
    RENDERS._peaks.clear()
    RENDERS._peaks.update(peaks)


def hungry(tmp_path: Path, mib: int, hold: float) -> tuple[KustomizeBinary, Path]:
    """A fake kustomize (a shell exec'ing Python) that logs `start pid t` / `stop pid t`, holds `mib` MiB touched for `hold` s."""
    log = tmp_path / "builds.log"
    program = (
        "import os, sys, time\n"
        f"log = open({str(log)!r}, 'a')\n"
        "log.write(f'start {os.getpid()} {time.monotonic()}\\n'); log.flush()\n"
        f"held = b'\\x01' * ({mib} * 2**20)\n"
        f"time.sleep({hold})\n"
        "log.write(f'stop {os.getpid()} {time.monotonic()}\\n'); log.flush()\n"
        f"sys.stdout.write({OUTPUT!r})\n"
    )
    script = tmp_path / "kustomize"
    script.write_text(f"#!/bin/sh\nexec {sys.executable} -I -S -c \"$(/bin/cat {tmp_path / 'fake.py'})\"\n")
    (tmp_path / "fake.py").write_text(program)
    script.chmod(0o755)
    return KustomizeBinary(str(script), embedded=False), log


def events(log: Path) -> list[tuple[float, str, int]]:
    out = []
    for line in log.read_text().splitlines():
        what, pid, at = line.split()
        out.append((float(at), what, int(pid)))
    return sorted(out)


def most_at_once(log: Path) -> int:
    running, most = 0, 0
    for _, what, _ in events(log):
        running += 1 if what == "start" else -1
        most = max(most, running)
    return most


class Sampler:
    """Samples the summed RSS of every fake build the log names, every 20 ms, from another thread."""

    def __init__(self, log: Path) -> None:
        self.log, self.peak, self.samples = log, 0, 0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._done.is_set():
            pids = {pid for _, _, pid in events(self.log)} if self.log.exists() else set()
            self.peak = max(self.peak, sum(rss_of(pid) or 0 for pid in pids))
            self.samples += 1
            time.sleep(0.02)

    def __enter__(self) -> "Sampler":
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._done.set()
        self._thread.join()


def build(binary: KustomizeBinary, tmp_path: Path, n: int) -> str:
    directory = tmp_path / f"b{n}"
    directory.mkdir(exist_ok=True)
    return run_build(binary, directory, sandbox_home=tmp_path / "home", timeout=60)


def test_builds_wait_for_memory_never_more_than_the_budget_holds(tmp_path: Path, budget: RenderBudget) -> None:
    """Budget 700 MB, four parallel builds of 300 MB each: at most two run at once, the sampled total stays under 700 MB."""
    budget.set_limit(700 * MiB)
    binary, log = hungry(tmp_path, 300, hold=1.0)
    with Sampler(log) as sampler, ThreadPoolExecutor(4) as pool:
        outputs = list(pool.map(lambda n: build(binary, tmp_path, n), range(4)))
    assert outputs == [OUTPUT] * 4
    assert len([e for e in events(log) if e[1] == "start"]) == 4
    assert most_at_once(log) == 2
    assert sampler.samples > 20
    assert 300 * MiB < sampler.peak < 700 * MiB, f"sampled {sampler.peak / MiB:.0f} MiB"
    assert budget.waited >= 2


def test_one_build_always_runs_even_when_its_reservation_fills_the_budget(tmp_path: Path, budget: RenderBudget) -> None:
    """A budget that holds one build: they run one after another, none is refused (no deadlock)."""
    budget.set_limit(120 * MiB)
    binary, log = hungry(tmp_path, 60, hold=0.3)
    with ThreadPoolExecutor(3) as pool:
        outputs = list(pool.map(lambda n: build(binary, tmp_path, n), range(3)))
    assert outputs == [OUTPUT] * 3
    assert most_at_once(log) == 1


def test_a_build_larger_than_the_whole_budget_is_refused_naming_the_limit(tmp_path: Path, budget: RenderBudget) -> None:
    budget.set_limit(200 * MiB)
    binary, log = hungry(tmp_path, 300, hold=5.0)
    started = time.monotonic()
    with pytest.raises(BuildStopped) as caught:
        build(binary, tmp_path, 0)
    assert time.monotonic() - started < 4, "killed when it passed the budget, not at its end"
    message = str(caught.value)
    assert message.startswith(LIMIT_PREFIX) and "200 MiB" in message and "limits.render_memory" in message
    assert not any(what == "stop" for _, what, _ in events(log))


def test_shutdown_refuses_a_build_waiting_for_memory(tmp_path: Path, budget: RenderBudget) -> None:
    """stop_builds: the running build is killed and the one waiting for memory never starts."""
    budget.set_limit(120 * MiB)
    binary, log = hungry(tmp_path, 60, hold=10.0)
    try:
        with ThreadPoolExecutor(2) as pool:
            first = pool.submit(build, binary, tmp_path, 0)
            deadline = time.monotonic() + 10
            while not (log.exists() and events(log)) and time.monotonic() < deadline:
                time.sleep(0.02)
            second = pool.submit(build, binary, tmp_path, 1)
            time.sleep(0.3)  # it waits for memory
            stop_builds()
            for future in (first, second):
                with pytest.raises(BuildStopped, match="shutting down"):
                    future.result(timeout=10)
    finally:
        allow_builds()
    assert [what for _, what, _ in events(log)] == ["start"]


def test_helm_workers_are_admitted_by_the_budget_too(budget: RenderBudget) -> None:
    """Two workers, a budget that holds one task of the size seen before: the tasks run one after the other."""
    budget.set_limit(320 * MiB)
    budget._peaks["worker"] = deque([250 * MiB])  # a render of that size was seen
    with WorkerPool(2, task_timeout=30, max_task_rss=1 << 30, recycle_after=10, recycle_rss=1 << 30) as pool:
        spans: list[tuple[float, float]] = []

        def task() -> None:
            began = time.monotonic()
            pool.call(worker_tasks.allocate, 200 * MiB, 0.5)
            spans.append((began, time.monotonic()))

        with ThreadPoolExecutor(2) as threads:
            list(threads.map(lambda _: task(), range(2)))
        first, second = sorted(end for _, end in spans)
        assert second - first >= 0.45, "the second task ran only once the first had ended"
        assert budget.waited >= 1


def test_a_process_tree_counts_the_children_its_other_threads_started(tmp_path: Path) -> None:
    # A Go kustomize forks from whichever thread runs the goroutine: each thread's children count.
    ready = tmp_path / "child.pid"
    program = (
        "import subprocess, sys, threading, time\n"
        "def spawn():\n"
        "    child = subprocess.Popen([sys.executable, '-I', '-S', '-c', "
        "\"import time; held = b'\\\\x01' * (48 * 2**20); open(sys.argv[1], 'w').write('ok'); time.sleep(60)\", sys.argv[1]])\n"
        "    child.wait()\n"
        "threading.Thread(target=spawn, daemon=True).start()\n"
        "time.sleep(60)\n"
    )
    parent = subprocess.Popen([sys.executable, "-I", "-S", "-c", program.replace("sys.argv[1]", repr(str(ready)))], start_new_session=True)
    try:
        deadline = time.monotonic() + 20
        while not ready.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert ready.exists(), "the child never started"
        own = rss_of(parent.pid)
        total = tree_rss(parent.pid)
        assert own is not None and total is not None
        assert total - own >= 48 * MiB, (own, total)
    finally:
        os.killpg(parent.pid, signal.SIGKILL)  # the child is in its group
        parent.wait()
