"""The worker pool: results and exceptions cross the process boundary; time, memory and lifetime bounds hold."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Iterator

import pytest

from bot.adapters.workers import (
    WorkerMemoryExceeded,
    WorkerPool,
    WorkerPoolClosed,
    WorkerTaskError,
    WorkerTimeout,
)
from bot.engine.core.errors import InfraError
from tests.adapters import worker_tasks as tasks

MiB = 2**20
ROOT = Path(__file__).resolve().parents[2]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    status = Path(f"/proc/{pid}/status")
    try:
        return "State:\tZ" not in status.read_text()  # a zombie is dead, awaiting its reaper
    except OSError:
        return False


def _wait_dead(pids: list[int], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.02)
    return not any(_alive(pid) for pid in pids)


@pytest.fixture
def pool() -> Iterator[WorkerPool]:
    with WorkerPool(2, task_timeout=20, max_task_rss=512 * MiB, recycle_after=100, recycle_rss=512 * MiB) as made:
        yield made


def test_lazy_start_and_a_result_round_trips(pool: WorkerPool) -> None:
    assert pool.pids() == [] and pool.total_rss() == 0
    value = {"a": [1, 2.5, "x"], "b": b"bytes", "c": (None, True)}
    echoed, pid = pool.call(tasks.echo, value)
    assert echoed == value and pid != os.getpid()
    assert pool.pids() == [pid] and pool.total_rss() > 5 * MiB
    assert pool.call(tasks.echo, 1)[1] == pid  # the worker is reused


def test_a_task_exception_is_re_raised_with_its_type(pool: WorkerPool) -> None:
    with pytest.raises(KeyError, match="missing") as raised:
        pool.call(tasks.raise_lookup, "missing")
    assert any("raise_lookup" in note for note in raised.value.__notes__)  # the worker's traceback
    with pytest.raises(WorkerTaskError, match="NeedsTwoArguments: a/b"):
        pool.call(tasks.raise_unrebuildable)
    with pytest.raises(WorkerTaskError, match="unpicklable result"):
        pool.call(tasks.return_unpicklable)
    assert pool.call(tasks.echo, "still")[0] == "still"
    assert len(pool.pids()) == 1  # a task's own failure does not cost its worker


def test_a_task_past_its_timeout_is_killed_and_the_pool_goes_on(pool: WorkerPool) -> None:
    first = pool.call(tasks.sleep_then_pid, 0)
    started = time.monotonic()
    with pytest.raises(WorkerTimeout, match="0.5 s timeout") as raised:
        pool.call(tasks.sleep_then_pid, 30, timeout=0.5)
    assert isinstance(raised.value, InfraError)
    assert time.monotonic() - started < 3
    assert _wait_dead([first], 5) and pool.pids() == []
    assert pool.call(tasks.sleep_then_pid, 0) != first


def test_a_task_over_its_memory_bound_is_killed() -> None:
    with WorkerPool(1, task_timeout=30, max_task_rss=256 * MiB, recycle_after=100, recycle_rss=2**30) as pool:
        victim = pool.call(tasks.echo, 0)[1]
        started = time.monotonic()
        with pytest.raises(WorkerMemoryExceeded, match="over its 256 MiB bound"):
            pool.call(tasks.allocate, 2**30, 30)
        assert time.monotonic() - started < 15  # the RSS watchdog, not the 30 s timeout
        assert _wait_dead([victim], 5)
        assert pool.call(tasks.allocate, 64 * MiB, 0, max_rss=512 * MiB) == 2  # a per-call bound; the pool goes on


def test_workers_are_recycled_after_n_tasks_and_over_idle_rss() -> None:
    with WorkerPool(1, task_timeout=20, max_task_rss=2**30, recycle_after=2, recycle_rss=2**30) as pool:
        pids = [pool.call(tasks.echo, n)[1] for n in range(5)]
        assert pids[0] == pids[1] != pids[2] == pids[3] != pids[4]
        assert _wait_dead(pids[:4], 5)
    with WorkerPool(1, task_timeout=20, max_task_rss=2**30, recycle_after=100, recycle_rss=128 * MiB) as pool:
        fat = pool.call(tasks.keep, 200 * MiB)
        assert pool.call(tasks.echo, 0)[1] != fat


def test_concurrent_calls_from_threads_share_the_bounded_workers(pool: WorkerPool) -> None:
    started = time.monotonic()
    with ThreadPoolExecutor(6) as threads:
        results = list(threads.map(lambda n: pool.call(tasks.echo, n), range(40)))
        slept = list(threads.map(lambda _: pool.call(tasks.sleep_then_pid, 0.3), range(6)))
    assert [value for value, _ in results] == list(range(40))
    assert len({pid for _, pid in results} | set(slept)) <= 2
    assert time.monotonic() - started >= 0.9  # six 0.3 s tasks on two workers take three rounds


def test_close_kills_every_worker_and_refuses_new_calls() -> None:
    pool = WorkerPool(2, task_timeout=20, max_task_rss=2**30, recycle_after=100, recycle_rss=2**30)
    with ThreadPoolExecutor(2) as threads:
        list(threads.map(lambda _: pool.call(tasks.sleep_then_pid, 0.3), range(2)))
    pids = pool.pids()
    assert len(pids) == 2
    errors: list[BaseException] = []

    def busy() -> None:
        try:
            pool.call(tasks.sleep_then_pid, 30)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    thread = threading.Thread(target=busy)
    thread.start()
    deadline = time.monotonic() + 5
    while not any(w.busy for w in pool._live) and time.monotonic() < deadline:
        time.sleep(0.01)
    pool.close()
    thread.join(5)
    assert not thread.is_alive() and isinstance(errors[0], WorkerPoolClosed)
    assert _wait_dead(pids, 5), "a worker outlived close()"
    assert pool.pids() == []
    with pytest.raises(WorkerPoolClosed):
        pool.call(tasks.echo, 1)


def test_a_sigkilled_parent_leaves_no_orphan_worker(tmp_path: Path) -> None:
    """kill -9 of the process owning the pool: the kernel kills its workers too (PR_SET_PDEATHSIG)."""
    script = (
        "import os, sys, time\n"
        "from concurrent.futures import ThreadPoolExecutor\n"
        "from bot.adapters.workers import WorkerPool\n"
        "from tests.adapters import worker_tasks\n"
        "pool = WorkerPool(1, task_timeout=60, max_task_rss=2**30, recycle_after=100, recycle_rss=2**30)\n"
        # Started from a short-lived thread: the worker must outlive that thread, and die with the process.
        "with ThreadPoolExecutor(1) as threads:\n"
        "    pid = threads.submit(pool.call, worker_tasks.echo, 0).result()[1]\n"
        "print(pid, flush=True)\n"
        "pool.call(worker_tasks.sleep_then_pid, 60)\n"
    )
    owner = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT, stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        line = owner.stdout.readline() if owner.stdout else ""
        worker = int(line)
        time.sleep(0.2)  # the worker has outlived the thread that asked for it
        assert _alive(worker)
        owner.send_signal(signal.SIGKILL)
        owner.wait(10)
        assert _wait_dead([worker], 10), "a worker outlived the process that owned its pool"
    finally:
        owner.kill()
        owner.wait()
        if owner.stdout:
            owner.stdout.close()


@pytest.mark.parametrize("how", ["path", "module"])
def test_a_worker_does_not_run_the_parents_main_module(tmp_path: Path, how: str) -> None:
    """A spawned worker starts without importing the program that owns the pool (`fluxwarden`: the whole CLI),
    whether that program is a script or `python -m`; the program's own `__main__` is left as it was."""
    ran = tmp_path / "ran"
    (tmp_path / "owner_main.py").write_text(
        "import os, sys\n"
        f"with open({str(ran)!r}, 'a') as log: log.write(f'{{os.getpid()}}\\n')\n"
        "if __name__ == '__main__':\n"
        "    from bot.adapters.workers import WorkerPool\n"
        "    from tests.adapters import worker_tasks\n"
        "    main = sys.modules['__main__']\n"
        "    before = (main.__spec__, main.__dict__.get('__file__'))\n"
        "    with WorkerPool(1, task_timeout=60, max_task_rss=2**30, recycle_after=100, recycle_rss=2**30) as pool:\n"
        "        value, pid = pool.call(worker_tasks.echo, 'ok')\n"
        "    assert (main.__spec__, main.__dict__.get('__file__')) == before\n"
        "    print(value, pid)\n",
        encoding="utf-8",
    )
    argv = [sys.executable, str(tmp_path / "owner_main.py")] if how == "path" else [sys.executable, "-m", "owner_main"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(tmp_path)])}
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    value, worker = done.stdout.split()
    assert value == "ok" and int(worker) > 0
    assert len(ran.read_text().split()) == 1  # the owner ran it; its worker did not


def test_a_worker_that_died_while_idle_is_replaced_not_reported(pool: WorkerPool) -> None:
    first = pool.call(tasks.echo, 0)[1]
    os.kill(first, signal.SIGKILL)  # as the OOM killer would
    assert _wait_dead([first], 5)
    value, second = pool.call(tasks.echo, "next")
    assert value == "next" and second != first


def test_trim_stops_idle_workers_beyond_the_most_recent() -> None:
    with WorkerPool(3, task_timeout=30, max_task_rss=2**30, recycle_after=100, recycle_rss=2**30) as three:
        with ThreadPoolExecutor(3) as threads:  # three tasks at once: three workers
            pids = set(threads.map(lambda _: three.call(tasks.sleep_then_pid, 0.5), range(3)))
        assert len(pids) == 3 == len(three.pids())
        assert three.trim(1) == 2
        [kept] = three.pids()
        assert _wait_dead(sorted(pids - {kept}), 5)
        assert three.call(tasks.echo, 0)[1] == kept  # the kept one serves the next task
        assert three.trim(1) == 0
