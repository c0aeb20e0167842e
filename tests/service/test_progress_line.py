"""The CLI's progress line (bot/service/progress_line.py) on a real pseudo-terminal, and its silence elsewhere."""

from __future__ import annotations

import io
import os
import pty
import threading
from pathlib import Path

from bot.pipeline.progress import Progress
from bot.service.progress_line import progress_line


def _terminal() -> tuple[int, io.TextIOWrapper]:
    master, slave = pty.openpty()
    return master, io.TextIOWrapper(os.fdopen(slave, "wb", buffering=0), encoding="utf-8", write_through=True)


def _read_all(master: int) -> str:
    os.set_blocking(master, False)
    chunks = []
    while True:
        try:
            chunk = os.read(master, 65536)
        except (BlockingIOError, OSError):
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks).decode()


def test_a_long_run_shows_its_counts_in_place_then_clears_them() -> None:
    master, stream = _terminal()
    progress = Progress()
    for _ in range(5):
        progress.tier_known()
    progress.tier_done()
    progress.charts_known(2)
    shown = threading.Event()
    with progress_line(progress, stream, delay=0.05, interval=0.02):
        progress.tier_done()
        progress.chart_done()
        shown.wait(0.3)  # a few refreshes
    out = _read_all(master)
    stream.close()
    assert "rendering: 2/5 tiers, 1/2 charts" in out
    assert out.endswith("\r\x1b[K") and "\n" not in out  # updated in place, and nothing left behind


def test_a_quick_run_prints_nothing() -> None:
    master, stream = _terminal()
    with progress_line(Progress(), stream, delay=5):
        pass
    assert _read_all(master) == ""
    stream.close()


def test_not_a_terminal_gets_no_progress(tmp_path: Path) -> None:
    with open(tmp_path / "log", "w", encoding="utf-8") as stream:
        with progress_line(Progress(), stream, delay=0, interval=0.01):
            threading.Event().wait(0.05)
    assert (tmp_path / "log").read_text() == ""


def test_the_counts_of_a_real_render(tmp_path: Path) -> None:
    """The renderer bumps the counters: every tier it schedules is known, every one it finishes is done."""
    from bot.pipeline.check import check_repositories
    from bot.pipeline.session import CheckOptions
    from tests.fluxrepo import dump, flux_repo, ks, kustomization, obj, write_tree

    tiers = {n: ks(n, f"./{n}") for n in ("a", "b", "c")}
    extra = {f"{n}/kustomization.yaml": kustomization("cm.yaml") for n in tiers}
    extra.update({f"{n}/cm.yaml": dump(obj("v1", "ConfigMap", n, "default")) for n in tiers})
    progress = Progress()
    check_repositories(write_tree(tmp_path, flux_repo(tiers, extra)), ["dev"], CheckOptions(progress=progress))
    view = progress.view()
    assert view.tiers_known == view.tiers_done == 4  # the entry and its three tiers
    assert view.line() == "rendering: 4/4 tiers"
