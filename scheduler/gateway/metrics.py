"""The gateway's Prometheus metrics, in seconds. A model label only ever carries a catalog
name (anything else is `_unknown`), so a client cannot grow the series without bound."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

UNKNOWN = "_unknown"
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                   10.0, 30.0, 60.0, 120.0, 300.0, 600.0)  # fmt: skip
WAIT_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0)


class GatewayMetrics:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        p = "llm_gateway_"
        self.requests = Counter(
            p + "requests", "Requests answered, by model and HTTP status", ["model", "code"],
            registry=r,
        )  # fmt: skip
        self.duration = Histogram(
            p + "request_duration_seconds", "From request to the last byte of the answer",
            ["model"], buckets=LATENCY_BUCKETS, registry=r,
        )  # fmt: skip
        self.ttfb = Histogram(
            p + "time_to_first_byte_seconds", "From request to the first byte of the answer",
            ["model"], buckets=LATENCY_BUCKETS, registry=r,
        )  # fmt: skip
        self.held = Gauge(
            p + "held_requests", "Requests held until a replica of their model is usable",
            ["model"], registry=r,
        )  # fmt: skip
        self.inflight = Gauge(
            p + "inflight_requests", "Requests on a replica now", ["model"], registry=r
        )
        self.activations = Counter(
            p + "activations", "Times a model with held requests got a usable replica",
            ["model"], registry=r,
        )  # fmt: skip
        self.activation_wait = Histogram(
            p + "activation_wait_seconds", "How long a held request waited for a replica",
            ["model"], buckets=WAIT_BUCKETS, registry=r,
        )  # fmt: skip
        self.upstream_errors = Counter(
            p + "upstream_errors", "Replica failures: refused, mid_stream, timeout",
            ["model", "kind"], registry=r,
        )  # fmt: skip
        self.bad_input = Counter(
            p + "bad_input", "Requests or KV values refused as malformed, by reason",
            ["reason"], registry=r,
        )  # fmt: skip
        self.consul_errors = Counter(
            p + "consul_errors", "Failed Consul calls, by watch or writer", ["what"], registry=r
        )
        self.demand_writes = Counter(
            p + "demand_writes", "Demand key writes, by outcome", ["outcome"], registry=r
        )
