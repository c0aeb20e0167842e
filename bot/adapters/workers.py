"""A bounded pool of spawned worker processes for heavy, untrusted work: time, memory and lifetime bounds per task."""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import pickle
import signal
import sys
import threading
import time
import traceback
from collections.abc import Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from queue import SimpleQueue
from typing import Any, Callable

from bot.adapters.memory import RENDERS, RenderBudget, RendersStopped, rss_of
from bot.engine.core.errors import InfraError

# Spawn only: a forked child of a process that loaded the Go runtime (the Helm SDK) inherits its threads'
# locks in whatever state they were, and hangs or crashes; a spawned one starts a fresh interpreter.
_CONTEXT = multiprocessing.get_context("spawn")
POLL_SECONDS = 0.05  # how often a task's RSS and deadline are checked
DEFAULT_MAX_RESULT = 256 * 1024**2  # a result larger than this, pickled, is refused (the bot's own RSS)
_PR_SET_PDEATHSIG = 1


class WorkerError(InfraError):
    """A worker stopped before its task finished (a limit, a crash, a closed pool): nothing said about the result."""


class WorkerTimeout(WorkerError):
    """The task ran past its timeout; its worker was killed."""


class WorkerMemoryExceeded(WorkerError):
    """The worker's resident memory passed the task's bound; its worker was killed."""


class WorkerCrashed(WorkerError):
    """The worker died on its own (a signal, the OOM killer, a native crash) or its pipe broke."""


class WorkerPoolClosed(WorkerError):
    """The pool was closed before or while the task ran."""


class WorkerTaskError(WorkerError):
    """The task raised an exception that cannot cross the process boundary; its type and message are kept."""


def _die_with_parent(parent_pid: int) -> None:
    """Have the kernel SIGKILL this worker when the pool's keeper thread (and so the parent) goes."""
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        except (OSError, AttributeError):
            pass  # no prctl: close() and the EOF on our pipe still end us
    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        os._exit(1)


_MAIN_LOCK = threading.Lock()


@contextmanager
def _main_not_inherited() -> Iterator[None]:
    """Start a spawned child without re-running our `__main__` in it.

    multiprocessing's spawn has the child import the parent's main module (spawn.get_preparation_data reads
    `__main__.__spec__`, else its `__file__`): for `fluxwarden` that is the whole CLI, about 0.2 s of imports
    before a worker can take its first task, competing with the parent for the CPU. A task here is always a
    function of an importable module (bot.adapters.*), so the child needs none of it: the main module looks
    anonymous while the child's preparation data is taken.
    """
    main = sys.modules.get("__main__")
    if main is None:
        yield
        return
    with _MAIN_LOCK:
        saved: dict[str, Any] = {name: main.__dict__[name] for name in ("__spec__", "__file__") if name in main.__dict__}
        main.__dict__["__spec__"] = None
        main.__dict__.pop("__file__", None)
        try:
            yield
        finally:
            main.__dict__.update(saved)
            if "__spec__" not in saved:
                main.__dict__.pop("__spec__", None)


def _worker_main(conn: Connection, parent_pid: int) -> None:
    """A worker's loop: receive a pickled (func, args), answer a pickled outcome, until EOF."""
    _die_with_parent(parent_pid)
    # Ctrl-C reaches the whole process group; the pool, not the worker, decides when a worker ends.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # No per-worker environment here: a Go runtime loaded into a worker reads the environment the process was
    # exec'd with (runtime goenvs reads past argv), not os.environ as changed since (measured with GOMAXPROCS).
    while True:
        try:
            payload = conn.recv_bytes()
        except (EOFError, OSError):
            return
        conn.send_bytes(_run_task(payload))


def _run_task(payload: bytes) -> bytes:
    """Run one task; its outcome pickled: ("ok", result) or ("raised", exception) or ("lost", type, text)."""
    try:
        func, args = pickle.loads(payload)
        result = func(*args)
    except BaseException as exc:  # noqa: BLE001 - every failure of the task goes back to the caller
        return _pickled_exception(exc)
    try:
        return pickle.dumps(("ok", result), protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as exc:  # noqa: BLE001 - an unpicklable result is the task's fault
        return pickle.dumps(("lost", "unpicklable result", f"{type(result).__name__}: {exc}"))


def _pickled_exception(exc: BaseException) -> bytes:
    remote = "".join(traceback.format_exception(exc))[-4000:]
    try:
        data = pickle.dumps(("raised", exc, remote), protocol=pickle.HIGHEST_PROTOCOL)
        pickle.loads(data)  # a class whose __init__ takes other arguments than args pickles but cannot be rebuilt
        return data
    except Exception:  # noqa: BLE001
        return pickle.dumps(("lost", type(exc).__qualname__, str(exc)[:4000]))


@dataclass(eq=False)
class _Worker:
    """One live worker process and our end of its pipe."""

    process: Any  # multiprocessing SpawnProcess
    conn: Connection
    pid: int
    tasks: int = 0
    busy: bool = False
    dead: bool = field(default=False)

    def rss(self) -> int | None:
        return None if self.dead else rss_of(self.pid)

    def signal_kill(self) -> None:
        """SIGKILL only: the thread watching a busy worker sees its pipe close and releases it."""
        try:
            os.kill(self.pid, signal.SIGKILL)
        except OSError:
            pass

    def kill(self) -> None:
        """SIGKILL, reap and release the process (idempotent)."""
        if self.dead:
            return
        self.dead = True
        try:
            self.process.kill()
        except (OSError, ValueError):
            pass
        self.process.join(5)
        self.conn.close()
        try:
            self.process.close()
        except ValueError:
            pass  # still not reaped after 5 s (uninterruptible sleep): the OS reaps it later


class WorkerPool:
    """Up to `size` spawned workers; `call` runs a module-level function in one, bounded in time and memory.

    Thread-safe; lazy (no process before the first call). Workers are started by one keeper thread that lives
    as long as the pool, because Linux sends PR_SET_PDEATHSIG when the *thread* that started a child ends, and
    callers run on pool threads that come and go.
    """

    def __init__(
        self,
        size: int,
        *,
        task_timeout: float,
        max_task_rss: int,
        recycle_after: int,
        recycle_rss: int,
        max_result: int = DEFAULT_MAX_RESULT,
        budget: RenderBudget | None = RENDERS,
    ) -> None:
        if size < 1 or recycle_after < 1:
            raise ValueError("a worker pool needs size >= 1 and recycle_after >= 1")
        self.size = size
        self.task_timeout = task_timeout
        self.max_task_rss = max_task_rss
        self.recycle_after = recycle_after
        self.recycle_rss = recycle_rss
        self.max_result = max_result
        self._slots = threading.BoundedSemaphore(size)
        self._lock = threading.Lock()
        self._idle: list[_Worker] = []
        self._live: set[_Worker] = set()
        self._closed = False
        self._keeper: threading.Thread | None = None
        self._requests: SimpleQueue[Future[_Worker] | None] = SimpleQueue()
        # Tasks are admitted by the process-wide render budget (bot/adapters/memory.py), which counts our workers,
        # idle ones too, and closes the pool at shutdown. None: only this pool's own bounds.
        self.budget = budget
        if budget is not None:
            budget.register(self)

    # -- the public API ------------------------------------------------------------------------------------

    def call(self, func: Callable[..., Any], *args: Any, timeout: float | None = None, max_rss: int | None = None) -> Any:
        """Run `func(*args)` in a worker and return its result; blocks until a worker is free.

        Raises the task's own exception when it pickles, else WorkerTaskError; WorkerTimeout, WorkerMemoryExceeded,
        WorkerCrashed or WorkerPoolClosed when the worker was lost.
        """
        payload = pickle.dumps((func, args), protocol=pickle.HIGHEST_PROTOCOL)
        deadline_after = self.task_timeout if timeout is None else timeout
        bound = self.max_task_rss if max_rss is None else max_rss
        with self._slots:
            if self.budget is None:
                reply, pid = self._call(payload, deadline_after, bound)
            else:
                try:
                    with self.budget.admit("worker") as grant:
                        # A task's worker may not outgrow the whole budget either (the pool's own watchdog kills it).
                        reply, pid = self._call(payload, deadline_after, min(bound, self.budget.limit), grant)
                except RendersStopped:
                    raise WorkerPoolClosed("the service is shutting down") from None
        return _unwrap(reply, pid)

    def _call(self, payload: bytes, timeout: float, bound: int, grant: Any = None) -> tuple[Any, int]:
        worker = self._checkout()
        if grant is not None:
            # Measured by the budget, killed by our own watchdog (WorkerMemoryExceeded names the bound).
            grant.attach(worker.pid, lambda: None, tree=False)
        try:
            reply = self._exchange(worker, payload, time.monotonic() + timeout, bound, timeout)
        except BaseException:
            self._discard(worker)
            raise
        self._checkin(worker)
        return reply, worker.pid

    def total_rss(self) -> int:
        """Resident memory of every live worker, in bytes (for a memory-budget scheduler)."""
        with self._lock:
            workers = list(self._live)
        return sum(rss or 0 for rss in (w.rss() for w in workers))

    def pids(self) -> list[int]:
        """The process ids of the live workers."""
        with self._lock:
            return sorted(w.pid for w in self._live if not w.dead)

    def trim(self, keep: int) -> int:
        """Stop idle workers beyond the `keep` most recently used (the memory of a phase that needs fewer); how many stopped."""
        with self._lock:
            cut = len(self._idle) - max(0, keep)
            if cut <= 0:
                return 0
            stopped, self._idle = self._idle[:cut], self._idle[cut:]  # the idle list ends with the most recently used
            for worker in stopped:
                self._live.discard(worker)
        for worker in stopped:
            worker.kill()
        return len(stopped)

    def close(self) -> None:
        """Kill every worker (busy ones too: their callers get WorkerPoolClosed) and refuse new calls."""
        with self._lock:
            self._closed = True
            workers = list(self._live)
            self._idle.clear()
        for worker in workers:
            if worker.busy:
                worker.signal_kill()  # its caller's thread reaps it and raises WorkerPoolClosed
            else:
                self._discard(worker)
        if self._keeper is not None:
            self._requests.put(None)
            self._keeper.join(5)

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # -- workers in and out ------------------------------------------------------------------------------------

    def _checkout(self) -> _Worker:
        with self._lock:
            if self._closed:
                raise WorkerPoolClosed("the worker pool is closed")
            while self._idle:
                worker = self._idle.pop()  # the most recently used: its pages are warm
                if worker.process.is_alive():
                    worker.busy = True
                    return worker
                self._live.discard(worker)  # died while idle (the OOM killer): not the next task's failure
                worker.kill()
            if self._keeper is None:
                self._keeper = threading.Thread(target=self._keep, name="worker-keeper", daemon=True)
                self._keeper.start()
        started: Future[_Worker] = Future()
        self._requests.put(started)
        worker = started.result()
        with self._lock:
            if self._closed:
                worker.kill()
                raise WorkerPoolClosed("the worker pool is closed")
            worker.busy = True
            self._live.add(worker)
        return worker

    def _checkin(self, worker: _Worker) -> None:
        worker.tasks += 1
        retire = worker.tasks >= self.recycle_after or (worker.rss() or 0) > self.recycle_rss
        with self._lock:
            worker.busy = False
            if not retire and not self._closed and not worker.dead:
                self._idle.append(worker)
                return
            self._live.discard(worker)
        worker.kill()

    def _discard(self, worker: _Worker) -> None:
        with self._lock:
            self._live.discard(worker)
        worker.kill()

    def _keep(self) -> None:
        """The keeper thread: start workers on request until the pool closes (see the class docstring)."""
        while (request := self._requests.get()) is not None:
            try:
                request.set_result(self._spawn())
            except BaseException as exc:  # noqa: BLE001 - handed to the caller waiting on it
                request.set_exception(exc)

    def _spawn(self) -> _Worker:
        ours, theirs = _CONTEXT.Pipe(duplex=True)
        process = _CONTEXT.Process(target=_worker_main, args=(theirs, os.getpid()), name="fluxwarden-worker", daemon=True)
        with _main_not_inherited():
            process.start()
        theirs.close()
        assert process.pid is not None  # start() gave it one
        return _Worker(process, ours, process.pid)

    # -- one task ------------------------------------------------------------------------------------------

    def _exchange(self, worker: _Worker, payload: bytes, deadline: float, max_rss: int, timeout: float) -> Any:
        """Send the task, watch the worker's deadline and RSS every POLL_SECONDS, and read its reply."""
        try:
            worker.conn.send_bytes(payload)
        except (OSError, ValueError):
            raise self._lost(worker, "its pipe broke before the task was sent") from None
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                worker.kill()
                raise WorkerTimeout(f"the task ran past its {timeout:g} s timeout; its worker was killed")
            try:
                ready = worker.conn.poll(min(POLL_SECONDS, remaining))
            except (OSError, ValueError):
                raise self._lost(worker, "its pipe broke") from None
            if ready:
                break
            rss = worker.rss()
            if rss is not None and rss > max_rss:
                worker.kill()
                raise WorkerMemoryExceeded(f"the task's worker reached {rss // 2**20} MiB, over its {max_rss // 2**20} MiB bound; killed")
        try:
            data = worker.conn.recv_bytes(self.max_result)
        except EOFError:
            raise self._lost(worker, "it died") from None
        except OSError as exc:
            if "bad message length" not in str(exc):
                raise self._lost(worker, "its pipe broke") from None
            worker.kill()
            raise WorkerTaskError(f"the task's result is over {self.max_result:,} bytes") from None
        return pickle.loads(data)

    def _lost(self, worker: _Worker, what: str) -> WorkerError:
        if self._closed:
            return WorkerPoolClosed("the worker pool was closed while the task ran")
        worker.process.join(1)
        code = worker.process.exitcode
        worker.kill()
        how = f"killed by signal {-code}" if code is not None and code < 0 else f"exit code {code}"
        return WorkerCrashed(f"the task's worker was lost: {what} ({how})")


def _unwrap(reply: Any, pid: int) -> Any:
    kind = reply[0]
    if kind == "ok":
        return reply[1]
    if kind == "raised":
        exc: BaseException = reply[1]
        exc.add_note(f"raised in worker process {pid}:\n{reply[2]}")
        raise exc
    raise WorkerTaskError(f"the task raised {reply[1]}: {reply[2]}")
