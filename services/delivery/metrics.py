"""Prometheus metrics of one Delivery app (its own registry, so several apps can live
in one process, e.g. in tests)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge


class DeliveryMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.frames_sent = Counter("imprint_delivery_frames_sent", "SSE frames written to clients", ["event"],
                                   registry=r)
        self.conflicts = Counter("imprint_delivery_conflicts", "protocol conflicts detected (P17)", registry=r)
        self.connections = Gauge("imprint_delivery_connections", "open SSE connections", registry=r)
        self.connections_opened = Counter("imprint_delivery_connections_opened", "SSE connections opened",
                                          registry=r)
        self.interruptions = Counter("imprint_delivery_interruptions", "streams interrupted before the terminal",
                                     registry=r)
        self.completions = Counter("imprint_delivery_completions", "streams finished after the terminal frame",
                                   registry=r)
        self.slow_clients = Counter("imprint_delivery_slow_clients_dropped", "clients dropped for not reading",
                                    registry=r)
        self.receipts = Counter("imprint_delivery_client_receipts", "client receipts accepted", ["type"],
                                registry=r)
        self.requests = Counter("imprint_delivery_http_requests", "HTTP requests by route template and status",
                                ["method", "route", "status"], registry=r)
        self.resets = Counter("imprint_delivery_stream_resets", "streams that started over with a reset frame "
                              "(D8: a Last-Event-ID the run cannot continue from)", ["stream"], registry=r)
        self.tickets = Counter("imprint_delivery_stream_tickets", "stream tickets minted", registry=r)
        self.publish_failures = Counter("imprint_delivery_publish_failures", "observations that could not be "
                                        "published", ["type"], registry=r)
