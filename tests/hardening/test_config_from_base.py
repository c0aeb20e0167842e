"""A PR must not decide what "prod" is: the bot judges every PR under the base branch's `.fluxwarden.yaml`."""

from __future__ import annotations

from tests.fluxrepo import dump, ks, kustomization
from tests.hardening.harness import Origin, open_pull, pr_payload


async def test_a_pr_that_repoints_prod_is_judged_under_the_base_config(start, origin: Origin, fake) -> None:
    # The attack: point `prod` at a clean directory, and put a dependency cycle where prod really is.
    files = {
        ".fluxwarden.yaml": "clusters:\n  prod: {path: clusters/dev}\n",
        "clusters/dev/kustomization.yaml": kustomization("apps.yaml"),
        "clusters/dev/apps.yaml": dump(ks("apps", "./apps")),
        "clusters/prod/kustomization.yaml": kustomization("apps.yaml", "a.yaml", "b.yaml"),
        "clusters/prod/a.yaml": dump(ks("a", "./apps", depends_on=["b"])),
        "clusters/prod/b.yaml": dump(ks("b", "./apps", depends_on=["a"])),
    }
    head = origin.pull(1, files)
    open_pull(fake, origin, 1, head)
    async with start() as h:
        await h.deliver("pull_request", pr_payload(1, head, origin.main))
        await h.settle(timeout=120)
        assert h.states(head) == ["pending", "failure"]
        [comment] = h.comments(1)
        assert "`dependency-cycle`" in comment.body
        assert "`config-changed`" in comment.body and "takes effect after merge" in comment.body
