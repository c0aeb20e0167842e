"""How far a run is: tiers rendered of those known, charts rendered of those found (read by the CLI's progress line)."""

from __future__ import annotations

import threading
from dataclasses import dataclass


@dataclass(frozen=True)
class ProgressView:
    """One reading of a run's progress."""

    tiers_done: int
    tiers_known: int
    charts_done: int
    charts_known: int

    def line(self) -> str:
        """`rendering: 41/120 tiers, 3/9 charts` (charts only once some are known)."""
        charts = f", {self.charts_done}/{self.charts_known} charts" if self.charts_known else ""
        return f"rendering: {self.tiers_done}/{self.tiers_known} tiers{charts}"


class Progress:
    """Counters the render threads bump and another thread reads (one lock: a few increments per tier)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts = [0, 0, 0, 0]  # tiers done, tiers known, charts done, charts known

    def _add(self, index: int, n: int = 1) -> None:
        with self._lock:
            self._counts[index] += n

    def tier_known(self) -> None:
        self._add(1)

    def tier_done(self) -> None:
        self._add(0)

    def charts_known(self, n: int) -> None:
        self._add(3, n)

    def chart_done(self) -> None:
        self._add(2)

    def view(self) -> ProgressView:
        with self._lock:
            return ProgressView(*self._counts)
