"""Prometheus metrics of one server (its own registry, so several apps can live in one process)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

LATENCY_BUCKETS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)


class Metrics:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.requests = Counter(
            "parpo_requests", "HTTP requests by route, status and policy version",
            ["route", "status", "version"], registry=r,
        )  # fmt: skip
        self.latency = Histogram(
            "parpo_request_seconds", "end-to-end request latency", ["route"],
            buckets=LATENCY_BUCKETS, registry=r,
        )  # fmt: skip
        self.model_latency = Histogram(
            "parpo_model_seconds", "one model call (a micro-batch: every plan step and the propensity samples)",
            buckets=LATENCY_BUCKETS, registry=r,
        )  # fmt: skip
        self.batch_size = Histogram(
            "parpo_batch_size", "requests per model call", buckets=BATCH_BUCKETS, registry=r
        )
        self.queue_wait = Histogram(
            "parpo_queue_wait_seconds", "time a request waited for its model call",
            buckets=LATENCY_BUCKETS, registry=r,
        )  # fmt: skip
        self.in_flight = Gauge("parpo_in_flight", "requests being handled", registry=r)
        self.reloads = Counter("parpo_reloads", "model loads by outcome", ["outcome"], registry=r)
        self.model_failures = Counter("parpo_model_failures", "model calls that failed (503)", registry=r)
        self.fallbacks = Counter("parpo_fallbacks", "popularity fallbacks by reason", ["reason"], registry=r)
        self.served_items = Counter(
            "parpo_served_items", "served items by popularity decile of the catalogue (0: least popular)",
            ["decile"], registry=r,
        )  # fmt: skip
        self.events = Counter("parpo_events", "stored events by kind and flag", ["event", "flag"], registry=r)
        self.log_write_failures = Counter(
            "parpo_log_write_failures", "records not stored because their log could not be written",
            ["log"], registry=r,
        )  # fmt: skip

    def render(self) -> bytes:
        return generate_latest(self.registry)
