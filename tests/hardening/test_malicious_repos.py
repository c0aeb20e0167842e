"""Malicious repositories in PRs: each PR gets a failing status with a clear finding; nothing outside the repo leaks.

A canary file is planted outside the repository (next to the origin, readable by the service). Every PR
tries to get it (or the machine) into a render; the canary must never appear in anything the service sent
to GitHub, nor in its logs, and the service must stay healthy.
"""

from __future__ import annotations

import logging
import subprocess
import tempfile
import uuid
from pathlib import Path

import pytest
import yaml

from tests.fluxrepo import dump, obj
from tests.hardening.harness import Origin, fake_traffic, open_pull, pr_payload

CANARY = f"canary-{uuid.uuid4().hex}"
HUGE = 17 * 1024 * 1024  # over the 16 MiB per-file limit (bot.yamlio.MAX_FILE_BYTES)
BOMB = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: bomb\n  namespace: default\ndata:\n  a: &a [lol,lol,lol,lol,lol,lol,lol,lol,lol]\n" + "".join(
    f"  {chr(98 + i)}: &{chr(98 + i)} [{','.join(['*' + chr(97 + i)] * 9)}]\n" for i in range(8)
)
EXEC_FUNCTION = """\
apiVersion: example.com/v1
kind: Evil
metadata:
  name: evil
  annotations:
    config.kubernetes.io/function: |
      exec:
        path: ./evil.sh
"""


def kustomization(*resources: str, extra: str = "") -> str:
    return "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n" + "".join(f"  - {r}\n" for r in resources) + extra


def plant(tmp: Path) -> Path:
    """The canary outside the repo: a manifest, and a kustomization directory around it."""
    outside = tmp / "outside"
    outside.mkdir()
    (outside / "secret.yaml").write_text(dump(obj("v1", "ConfigMap", "stolen", "default", data={"token": CANARY})))
    (outside / "kustomization.yaml").write_text(kustomization("secret.yaml"))
    (outside / "evil.sh").write_text(f"#!/bin/sh\necho {CANARY} > {outside}/ran\n")
    (outside / "evil.sh").chmod(0o755)
    return outside


def cases(outside: Path) -> dict[str, tuple[dict, dict, str, str]]:
    """name -> (files, symlinks, check, words the finding must say)."""
    climb = "../" * 40 + str(outside).lstrip("/")
    return {
        "symlink-out": ({"apps/kustomization.yaml": kustomization("app.yaml", "stolen.yaml")}, {"apps/stolen.yaml": str(outside / "secret.yaml")}, "unsafe-path", "symlink"),
        "symlink-dir-out": ({"apps/kustomization.yaml": kustomization("app.yaml", "stolen")}, {"apps/stolen": str(outside)}, "unsafe-path", "symlink"),
        "alias-bomb": ({"apps/kustomization.yaml": kustomization("app.yaml", "bomb.yaml"), "apps/bomb.yaml": BOMB}, {}, "unsafe-path", "alias"),
        "huge-file": (
            {"apps/kustomization.yaml": kustomization("app.yaml", "huge.yaml"), "apps/huge.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: huge}\ndata:\n  x: " + "x" * HUGE + "\n"},
            {}, "unsafe-path", "limit",
        ),
        "exec-plugin": (
            {"apps/kustomization.yaml": kustomization("app.yaml", extra="transformers: [fn.yaml]\n"), "apps/fn.yaml": EXEC_FUNCTION.replace("./evil.sh", str(outside / "evil.sh"))},
            {}, "unsafe-path", "plugin",
        ),
        "remote-base": ({"apps/kustomization.yaml": kustomization("app.yaml", "github.com/evil/repo//base?ref=v1")}, {}, "remote-resource-not-fetched", "added by this change"),
        "remote-url": ({"apps/kustomization.yaml": kustomization("app.yaml", "https://127.0.0.1:9/x.yaml")}, {}, "remote-resource-not-fetched", "added by this change"),
        "dotdot-resource": ({"apps/kustomization.yaml": kustomization("app.yaml", climb)}, {}, "unsafe-path", "out of the repo"),
        "dotdot-generator": (
            {"apps/kustomization.yaml": kustomization("app.yaml", extra=f"configMapGenerator:\n  - name: g\n    files: [k={climb}/secret.yaml]\n")},
            {}, "unsafe-path", "out of the repo",
        ),
        "dotdot-flux-path": ({"clusters/prod/apps.yaml": _flux_path("./" + "../" * 40 + str(outside).lstrip("/"))}, {}, "unsafe-path", "climbs out of the source"),
        "invalid-utf8": ({"apps/app.yaml": b"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app\n  namespace: default\ndata:\n  x: \xff\xfe\n"}, {}, "render-failed", "UTF-8"),
    }


def _flux_path(path: str) -> str:
    from tests.fluxrepo import ks

    return dump(ks("apps", path))


async def test_malicious_prs_fail_clearly_and_leak_nothing(start, origin: Origin, fake, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    outside = plant(tmp_path)
    numbered = {}
    for number, (name, (files, links, check, words)) in enumerate(cases(outside).items(), start=1):
        head = origin.pull(number, files, links)
        open_pull(fake, origin, number, head)
        numbered[number] = (name, head, check, words)
    async with start(workers=2) as h:
        for number, (_, head, _, _) in numbered.items():
            assert (await h.deliver("pull_request", pr_payload(number, head, origin.main))).status == 202
        await h.settle(timeout=120)
        problems = []
        for number, (name, head, check, words) in numbered.items():
            states = h.states(head)
            comments = h.comments(number)
            # Remote content is valid Flux (kustomize-controller fetches it; we never do): a warning the PR added,
            # never fetched (no request reaches 127.0.0.1:9), as a chart the change touches and cannot render.
            expected = ["pending", "success"] if check == "remote-resource-not-fetched" else ["pending", "failure"]
            if states != expected:
                problems.append(f"{name}: statuses {states}")
            if len(comments) != 1:
                problems.append(f"{name}: {len(comments)} comments")
                continue
            body = comments[0].body
            if f"`{check}`" not in body or words not in body:
                problems.append(f"{name}: finding not clear: {body[:1500]}")
        assert not problems, "\n".join(problems)
        traffic = fake_traffic(fake)
        assert CANARY not in traffic, "content from outside the repository reached GitHub"
        # Host paths of the service's own (mirrors, snapshots, kustomize sandboxes) never show; a PR may quote its own.
        for own in (str(tmp_path / "cache"), f"{tempfile.gettempdir()}/fluxwarden-", "overlays-"):
            assert own not in traffic, f"a host path ({own}) reached GitHub"
        assert CANARY not in caplog.text
        assert not (outside / "ran").exists(), "an exec function ran"
        assert await h.healthy()
        # The service still does its job afterwards: a clean PR gets a success.
        clean = origin.pull(99, {"apps/app.yaml": dump(obj("v1", "ConfigMap", "app", "default", data={"greeting": "hi"}))})
        open_pull(fake, origin, 99, clean)
        await h.deliver("pull_request", pr_payload(99, clean, origin.main))
        await h.settle()
        assert h.states(clean) == ["pending", "success"]


async def test_a_1000_deep_tree_is_a_finding_not_an_internal_error(start, origin: Origin, fake) -> None:
    """A PR adding a 1,000-deep directory under a tier Flux generates a kustomization for (every directory walked).

    Before: the snapshot's recursive walk hit Python's recursion limit, and the PR got `error` "internal error
    (RecursionError)". Now the walk is iterative and a directory past the depth bound is an `unsafe-path` finding.
    """
    deep = "apps/" + "d/" * 1000 + "deep.yaml"
    try:
        head = origin.pull(1, {deep: dump(obj("v1", "ConfigMap", "deep", "default"))}, remove=("apps/kustomization.yaml",))
    finally:  # pytest's (recursive) clean-up of tmp_path could not remove a tree left behind
        subprocess.run(["rm", "-rf", str(origin.work / "apps" / "d")], check=True)
    open_pull(fake, origin, 1, head)
    async with start() as h:
        await h.deliver("pull_request", pr_payload(1, head, origin.main))
        await h.settle(timeout=120)
        assert h.states(head) == ["pending", "failure"]
        (comment,) = h.comments(1)
        assert "`unsafe-path`" in comment.body and "nested more than 100 directories deep" in comment.body
        assert "internal error" not in comment.body
        assert await h.healthy()


@pytest.mark.parametrize("depth", [340, 2_000])
async def test_deeply_nested_yaml_is_a_render_limit_finding(start, origin: Origin, fake, depth: int) -> None:
    """Issue 23: a document nesting 340 levels or more.

    Before: RecursionError in bot/engine/render/yamlio.py, the PR got `error` "internal error (RecursionError)". Now
    the nesting bound (100) is a `render-limit` finding on the tier and the file, and the status `failure`.
    """
    body = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: deep, namespace: default}\nextra: " + "[" * depth + "]" * depth + "\n"
    head = origin.pull(1, {"apps/app.yaml": body})
    open_pull(fake, origin, 1, head)
    async with start() as h:
        await h.deliver("pull_request", pr_payload(1, head, origin.main))
        await h.settle(timeout=120)
        assert h.states(head) == ["pending", "failure"]
        (comment,) = h.comments(1)
        assert "`render-limit`" in comment.body and "apps/app.yaml nests " in comment.body and "(limit: 100)" in comment.body
        assert "internal error" not in comment.body and "RecursionError" not in comment.body
        assert await h.healthy()


HOSTILE = "x\n\n<!-- fluxwarden:precheck:prod -->\n### ✅ fake\n</details>\n@octocat ``a|b`` | `c`"


async def test_hostile_names_cannot_rewrite_the_comment(start, origin: Origin, fake) -> None:
    """Names and a file name carrying blank lines, a fake marker and ✅ heading, `</details>`, a mention, backticks, pipes.

    Before: the name broke out of its code span; the comment showed a fake ✅ heading, closed the bot's
    `<details>` early and pinged @octocat. Now each name is an `invalid-name` finding, and every place that
    shows one escapes it for its context.
    """
    from tests.fluxrepo import ks
    from tests.engine.test_markdown import assert_contained

    evil_file = "apps/evil\n\n<!-- fluxwarden:precheck:prod -->\n### ✅ fake @octocat `x` |.yaml"
    head = origin.pull(1, {
        "apps/kustomization.yaml": yaml.safe_dump({"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization", "resources": ["app.yaml", evil_file.removeprefix("apps/")]}),
        evil_file: dump(obj("v1", "ConfigMap", HOSTILE, "default", data={"k": HOSTILE})),
        "clusters/prod/evil.yaml": dump(ks(HOSTILE, "./evil")),
        "clusters/prod/kustomization.yaml": kustomization("apps.yaml", "evil.yaml"),
        "evil/kustomization.yaml": kustomization("cm.yaml"),
        "evil/cm.yaml": dump(obj("v1", "ConfigMap", "fine", "default")),
    })
    open_pull(fake, origin, 1, head)
    async with start() as h:
        await h.deliver("pull_request", pr_payload(1, head, origin.main))
        await h.settle(timeout=120)
        assert h.states(head) == ["pending", "failure"]
        (comment,) = h.comments(1)
        assert comment.body.startswith("<!-- fluxwarden:precheck:prod -->\n")
        assert comment.body.count("`invalid-name`") >= 2  # the ConfigMap and the Kustomization
        assert_contained(comment.body, markers=1)
        # Every version of the comment the bot wrote (the "running" one too) kept its structure.
        for request in fake.find_requests(path=r"/issues/(1/)?comments"):
            if request.method in ("POST", "PATCH"):
                assert_contained(request.json["body"], markers=1)
        assert await h.healthy()
