"""The webhook's Prometheus metrics, in a registry of its own (one per server: tests run several).

- shmguard_webhook_reviews_total{action}: AdmissionReviews answered;
- shmguard_webhook_decisions_total{action,decision}: patched, fits, no-job, skipped, ignored, allowed, denied,
  warned, error (see shmguard.webhook.review);
- shmguard_webhook_review_duration_seconds{action}: from the headers read to the answer ready to send;
- shmguard_webhook_bad_requests_total{code}: HTTP requests that were not an AdmissionReview (400, 404, 411, 413, 415…);
- shmguard_webhook_tls_reloads_total{result}: certificate reloads (ok, failed);
- shmguard_webhook_connections: open connections.

With `--processes N` the processes share a PROMETHEUS_MULTIPROC_DIR and each answer
of /metrics adds them all up (prometheus_client's multiprocess mode).
"""

from __future__ import annotations

# Review latencies are sub-millisecond to tens of ms; the apiserver's timeout is seconds.
BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class Metrics:
    """The counters, histogram and gauge of one server, and their text exposition."""

    def __init__(self, multiprocess_dir: str | None = None) -> None:
        """multiprocess_dir: the PROMETHEUS_MULTIPROC_DIR the server's processes share (set before prometheus_client
        is first imported), so that /metrics, answered by any of them, counts them all."""
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.multiprocess_dir = multiprocess_dir
        self.registry = CollectorRegistry(auto_describe=True)
        self.reviews = Counter("shmguard_webhook_reviews", "AdmissionReviews answered", ["action"], registry=self.registry)
        self.decisions = Counter("shmguard_webhook_decisions", "Decisions by action and kind", ["action", "decision"],
                                 registry=self.registry)
        self.latency = Histogram("shmguard_webhook_review_duration_seconds", "Time to answer one AdmissionReview",
                                 ["action"], buckets=BUCKETS, registry=self.registry)
        self.bad_requests = Counter("shmguard_webhook_bad_requests", "HTTP requests that were not an AdmissionReview",
                                    ["code"], registry=self.registry)
        self.tls_reloads = Counter("shmguard_webhook_tls_reloads", "Certificate reloads", ["result"], registry=self.registry)
        self._children: dict[tuple[str, str], tuple] = {}
        self.connections = Gauge("shmguard_webhook_connections", "Open connections", registry=self.registry,
                                 multiprocess_mode="livesum")

    def observe(self, action: str, decision: str, seconds: float) -> None:
        children = self._children.get((action, decision))
        if children is None:  # labels() looks the child up under a lock each time: once per pair is enough
            children = self._children[(action, decision)] = (
                self.reviews.labels(action), self.decisions.labels(action, decision), self.latency.labels(action))
        children[0].inc()
        children[1].inc()
        children[2].observe(seconds)

    def exposition(self) -> tuple[bytes, str]:
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        if self.multiprocess_dir is None:
            return generate_latest(self.registry), CONTENT_TYPE_LATEST
        from prometheus_client import CollectorRegistry
        from prometheus_client.multiprocess import MultiProcessCollector

        registry = CollectorRegistry()
        MultiProcessCollector(registry, path=self.multiprocess_dir)
        return generate_latest(registry), CONTENT_TYPE_LATEST
