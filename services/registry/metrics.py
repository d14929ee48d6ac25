"""Registry metrics, computed from the table at scrape time."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from rlstack.registry.service import RegistryService

P = "rlstack_registry_"


class RegistryCollector(Collector):
    def __init__(self, service: RegistryService) -> None:
        self.service = service

    def collect(self) -> Iterator[Metric]:
        table = self.service.table
        endpoints = table.all()
        yield GaugeMetricFamily(P + "endpoints", "Registered endpoints", value=len(endpoints))
        yield GaugeMetricFamily(P + "endpoints_ready", "Endpoints whose model is loaded", value=sum(e.ready for e in endpoints))
        yield GaugeMetricFamily(P + "endpoints_quarantined", "Endpoints out of routing: they served weights other than those sent",
                                value=sum(e.quarantine is not None for e in endpoints))
        yield GaugeMetricFamily(P + "revision", "Table revision (bumps on every change)", value=table.revision)
        versions = GaugeMetricFamily(P + "weight_version", "Lowest and highest weight version across endpoints", labels=["bound"])
        if endpoints:
            versions.add_metric(["min"], min(e.weight_version for e in endpoints))
            versions.add_metric(["max"], max(e.weight_version for e in endpoints))
        yield versions
        yield CounterMetricFamily(P + "expired", "Endpoints removed for missing heartbeats", value=table.expired_total)
        yield CounterMetricFamily(P + "stalled_seconds", "Seconds the registry itself was stalled, given back to every lease",
                                  value=table.stalled_seconds_total)
        yield CounterMetricFamily(P + "removed_by_pod", "Endpoints removed because their pod was deleted or ended",
                                  value=self.service.removed_by_pod_total)
        yield CounterMetricFamily(P + "quarantines", "Times the trainer quarantined an endpoint", value=self.service.quarantined_total)
        yield CounterMetricFamily(P + "probe_failures", "Probes that found an endpoint not ready", value=self.service.prober.failures_total)
