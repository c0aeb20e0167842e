"""Prometheus metrics of the service (one registry per app, so tests can run several)."""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


@dataclass(frozen=True)
class Metrics:
    """The service's metrics."""

    registry: CollectorRegistry
    deliveries: Counter
    runs: Counter
    run_seconds: Histogram
    queue_depth: Gauge
    in_progress: Gauge
    github_errors: Counter
    rate_limit_remaining: Gauge

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


def new_metrics() -> Metrics:
    """A fresh registry with every metric registered."""
    registry = CollectorRegistry()
    return Metrics(
        registry=registry,
        deliveries=Counter("fluxwarden_webhook_deliveries", "Webhook deliveries by event and outcome", ["event", "outcome"], registry=registry),
        runs=Counter("fluxwarden_runs", "Precheck runs by cluster and verdict", ["cluster", "verdict"], registry=registry),
        run_seconds=Histogram(
            "fluxwarden_run_duration_seconds", "Precheck run duration", ["cluster"], registry=registry,
            buckets=(1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800),
        ),
        queue_depth=Gauge("fluxwarden_queue_depth", "Runs waiting for a worker", registry=registry),
        in_progress=Gauge(
            "fluxwarden_work_in_progress", "Deliveries being handled, runs queued or running, final states being written again (0: idle)",
            registry=registry,
        ),
        github_errors=Counter("fluxwarden_github_api_errors", "GitHub API calls that failed after retries", ["operation"], registry=registry),
        rate_limit_remaining=Gauge("fluxwarden_github_rate_limit_remaining", "Last seen X-RateLimit-Remaining", registry=registry),
    )
