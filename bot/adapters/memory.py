"""The memory of renders, process-wide: kustomize builds and Helm workers are admitted by measured RSS within one budget,
and all of them stop at shutdown.

A render asks `RENDERS.admit(kind)` before it starts a process or hands a worker a task. It is admitted when the
resident memory of what runs now (each running render at least its reservation, plus the idle Helm workers) and its
own reservation fit the budget, or when nothing else runs (one render always may: no deadlock). A reservation is the
largest peak of that kind seen lately: a render that has just started has not grown yet. A render whose own RSS
passes the whole budget is killed (`Grant.over`): it can never be rendered within it.
"""

from __future__ import annotations

import ctypes
import os
import threading
import time
import weakref
from collections import deque
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable, Iterator, Protocol

from bot.engine.core.errors import InfraError

POLL_SECONDS = 0.05  # how often running renders are measured (and waiting ones reconsidered)
DEFAULT_RESERVATION = 256 * 1024**2  # a kind's reservation before any render of it was measured
PEAKS_KEPT = 16  # a kind's reservation is the largest of its last this many peaks
LIMIT_PREFIX = "render memory limit"  # how a refusal's message begins (handlers/precheck.py reads it)
_PAGE = os.sysconf("SC_PAGE_SIZE")


class RendersStopped(InfraError):
    """The process is shutting down: no render starts any more, and the waiting ones give up."""


def _proc_read(path: str) -> bytes:
    """A /proc file's content, unbuffered: the watchdog reads a few per running build every poll."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        chunks = []
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def rss_of(pid: int) -> int | None:
    """Resident set size of a process in bytes (Linux /proc/<pid>/statm), None when it is gone."""
    try:
        return int(_proc_read(f"/proc/{pid}/statm").split()[1]) * _PAGE
    except (OSError, IndexError, ValueError):
        return None


def tree_rss(pid: int) -> int | None:
    """Resident memory of a process and its descendants (a wrapper script's children count too); None when it is gone."""
    own = rss_of(pid)
    if own is None:
        return None
    total, seen, todo = own, {pid}, [pid]
    while todo:
        parent = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{parent}/task")
        except OSError:
            continue
        for tid in tasks:
            # Each thread's children through its own /proc/<tid> directory, not the leader's /proc/<pid>/task/<tid>:
            # entries made under the leader's directory are flushed when the leader is reaped, which cost the
            # thread waiting for the build ~3 ms of system time per kustomize run (measured: 94 builds, 0.3 s).
            try:
                kids = [int(k) for k in _proc_read(f"/proc/{tid}/task/{tid}/children").split()]
            except (OSError, ValueError):
                continue
            for kid in kids:
                if kid not in seen:
                    seen.add(kid)
                    todo.append(kid)
                    total += rss_of(kid) or 0
    return total


def total_memory() -> int:
    """This machine's physical memory in bytes (0 when unknown)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return 0


def default_budget() -> int:
    """The CLI's budget: half of the machine's memory, at most 4 GiB, at least 1 GiB (a laptop keeps room for the rest)."""
    return max(1 << 30, min(4 << 30, total_memory() // 2))


class Pool(Protocol):
    """What the budget reads of a worker pool (bot/adapters/workers.WorkerPool)."""

    def pids(self) -> list[int]: ...

    def close(self) -> None: ...


@dataclass(eq=False)
class Grant:
    """One admitted render: its process (once attached), its reservation, and the peak measured so far."""

    kind: str
    reserved: int
    pid: int | None = None
    tree: bool = True  # measure the process's descendants too (kustomize: a wrapper script's children)
    kill: Callable[[], None] | None = None
    peak: int = 0
    over: int | None = None  # the RSS it was killed at for passing the whole budget
    limit: int = 0  # the budget when it was killed
    _rss: int = field(default=0, repr=False)

    def attach(self, pid: int, kill: Callable[[], None], *, tree: bool = True) -> None:
        """The render's process is started: measure it, and kill it this way when it outgrows the budget."""
        self.pid, self.kill, self.tree = pid, kill, tree

    @property
    def charged(self) -> int:
        return max(self._rss, self.reserved)

    def refusal(self) -> str:
        """The message of a render killed for its memory (starts with LIMIT_PREFIX)."""
        # The setting first: a commit status keeps 140 characters of "<cluster>: could not render <tier>: <this>".
        return f"{LIMIT_PREFIX}: limits.render_memory is {self.limit // 2**20} MiB for all renders; this one reached {(self.over or 0) // 2**20} MiB"


class RenderBudget:
    """The process-wide admission of renders (see the module docstring); thread-safe."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._cond = threading.Condition()
        self._running: list[Grant] = []
        self._pools: weakref.WeakSet = weakref.WeakSet()
        self._peaks: dict[str, deque[int]] = {}
        self._stopping = False
        self._monitor: threading.Thread | None = None
        self._held = threading.local()  # grants this thread holds: a nested render is admitted at once
        self.waited = 0  # admissions that had to wait for memory (a metric for tests and logs)

    # -- settings and shutdown ------------------------------------------------------------------------------

    def set_limit(self, limit: int) -> None:
        with self._cond:
            self.limit = limit
            self._cond.notify_all()

    @property
    def stopping(self) -> bool:
        return self._stopping

    def stop(self) -> int:
        """Refuse every render from now on, wake the waiting ones (they raise RendersStopped), close the worker pools,
        kill the running renders; how many were running."""
        with self._cond:
            self._stopping = True
            running = list(self._running)
            pools = list(self._pools)
            self._cond.notify_all()
        for pool in pools:
            pool.close()
        for grant in running:
            if grant.kill is not None:
                grant.kill()
        return len(running)

    def allow(self) -> None:
        """Renders may start again (an in-process successor: tests)."""
        with self._cond:
            self._stopping = False

    def register(self, pool: Pool) -> None:
        """Count a worker pool's workers (idle ones too) against the budget, and close it at `stop`."""
        with self._cond:
            self._pools.add(pool)

    # -- admission -----------------------------------------------------------------------------------------

    def reservation(self, kind: str) -> int:
        peaks = self._peaks.get(kind)
        return min(max(peaks) if peaks else DEFAULT_RESERVATION, self.limit)

    def charged(self) -> int:
        """What runs now, as admission counts it: each running render at least its reservation, plus idle workers."""
        with self._cond:
            return self._charged()

    def _charged(self) -> int:
        attached = {g.pid for g in self._running}
        idle = sum(rss_of(pid) or 0 for pool in list(self._pools) for pid in pool.pids() if pid not in attached)
        return idle + sum(g.charged for g in self._running)

    @contextmanager
    def admit(self, kind: str) -> Iterator[Grant]:
        """Wait until a render of `kind` fits the budget (or nothing else runs); raise RendersStopped when shutting down."""
        held = getattr(self._held, "count", 0)
        with self._cond:
            grant = Grant(kind, self.reservation(kind))
            waited = False
            while True:
                if self._stopping:
                    raise RendersStopped("the service is shutting down: no render starts")
                if held or not self._running or self._charged() + grant.reserved <= self.limit:
                    break
                waited = True
                self._cond.wait(POLL_SECONDS)
            self.waited += waited
            self._running.append(grant)
            self._start_monitor()
        self._held.count = held + 1
        try:
            yield grant
        finally:
            self._held.count = held
            self._measure(grant)
            with self._cond:
                self._running.remove(grant)
                if grant.peak:
                    self._peaks.setdefault(kind, deque(maxlen=PEAKS_KEPT)).append(grant.peak)
                self._cond.notify_all()

    def _measure(self, grant: Grant) -> None:
        if grant.pid is None:
            return
        rss = (tree_rss(grant.pid) if grant.tree else rss_of(grant.pid)) or 0
        grant._rss = rss
        grant.peak = max(grant.peak, rss)
        if rss > self.limit and grant.over is None and grant.kill is not None:
            grant.over, grant.limit = rss, self.limit
            grant.kill()

    def _start_monitor(self) -> None:
        if self._monitor is None or not self._monitor.is_alive():
            self._monitor = threading.Thread(target=self._watch, name="render-memory", daemon=True)
            self._monitor.start()

    def _watch(self) -> None:
        """Measure the running renders every POLL_SECONDS (peaks, the over-budget kill) while any runs."""
        while True:
            with self._cond:
                running = list(self._running)
                if not running:
                    self._monitor = None
                    return
            for grant in running:
                self._measure(grant)
            with self._cond:
                self._cond.notify_all()  # a waiting render reconsiders with fresh figures
            time.sleep(POLL_SECONDS)


RENDERS = RenderBudget(default_budget())


def set_render_memory(limit: int) -> None:
    """The budget of all renders' memory, in bytes (service settings `limits.render_memory`)."""
    RENDERS.set_limit(limit)


def release_free_memory() -> bool:
    """Give the heap's free pages back to the OS after a run (glibc `malloc_trim`); False where there is none."""
    try:
        return bool(ctypes.CDLL(None).malloc_trim(0))
    except (OSError, AttributeError):
        return False


def check_stop() -> None:
    """Raise RendersStopped when the process is shutting down: long loops of Python work (parsing, finishing tiers,
    checks) call it between steps, so a review thread ends within a step instead of finishing its review."""
    if RENDERS.stopping:
        raise RendersStopped("the service is shutting down: the render stops")
