"""Prometheus metrics of one scoring server.

Each server gets its own registry, so two servers in one process (tests, benchmarks) never mix
their counts, and `/metrics` shows only what this server did.
"""

from __future__ import annotations

from collections.abc import Sequence

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from ..protocol import Item
from .batcher import SyncScoringEngine

LATENCY_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)


class ServerMetrics:
    """Requests, errors by kind, engine batch sizes, queue depth and latency of one server."""

    content_type = CONTENT_TYPE_LATEST

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "prm_requests", "HTTP requests answered, by endpoint and status code", ["endpoint", "code"], registry=self.registry
        )
        self.errors = Counter("prm_errors", "Requests answered with an error, by kind", ["kind"], registry=self.registry)
        self.latency = Histogram(
            "prm_score_latency_seconds", "Wall time of /v1/score requests (parse, queue, score)",
            buckets=LATENCY_BUCKETS_S, registry=self.registry,
        )
        self.batch_items = Histogram(
            "prm_batch_items", "Trajectories per engine call (dynamic batching gathers them)",
            buckets=BATCH_BUCKETS, registry=self.registry,
        )
        self.batch_steps = Histogram(
            "prm_batch_steps", "Steps per engine call", buckets=BATCH_BUCKETS, registry=self.registry
        )
        self.queue_depth = Gauge(
            "prm_queue_depth", "Trajectories accepted and not yet answered (waiting or being scored)", registry=self.registry
        )
        self.steps_scored = Counter("prm_steps_scored", "Steps scored", registry=self.registry)
        self.ready = Gauge("prm_model_ready", "1 once the model is loaded", registry=self.registry)

    def render(self) -> bytes:
        return generate_latest(self.registry)


class MeteredEngine:
    """The engine as the batcher sees it, recording the size of every call it makes."""

    def __init__(self, engine: SyncScoringEngine, metrics: ServerMetrics) -> None:
        self.engine = engine
        self.metrics = metrics

    def score(self, items: Sequence[Item]) -> list[list[float]]:
        self.metrics.batch_items.observe(len(items))
        self.metrics.batch_steps.observe(sum(len(steps) for _, steps in items))
        return self.engine.score(items)
