"""Batcher metrics, read from the state at scrape time so the hot path pays nothing."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from rlstack.batcher.service import BatcherService

P = "rlstack_batcher_"


class BatcherCollector(Collector):
    def __init__(self, service: BatcherService) -> None:
        self.service = service

    def collect(self) -> Iterator[Metric]:
        state = self.service.state
        c = state.counters
        yield GaugeMetricFamily(P + "queue_groups", "Groups waiting to be batched", value=state.available_groups)
        yield GaugeMetricFamily(P + "queue_sequences", "Sequences waiting to be batched", value=state.queued_sequences)
        yield GaugeMetricFamily(P + "queue_capacity_sequences", "Queue bound in sequences", value=self.service.settings.max_queue_sequences)
        yield GaugeMetricFamily(P + "current_step", "Batches handed out so far (the trainer step)", value=state.step)
        yield GaugeMetricFamily(P + "envs_connected", "Registered, connected env servers", value=sum(e.connected for e in state.envs))
        live = self.service.leases.live_ids()
        yield GaugeMetricFamily(P + "envs_live", "Connected envs whose lease is current (they share the weight)",
                                value=sum(e.connected and e.env_id in live for e in state.envs))
        yield CounterMetricFamily(P + "env_leases_expired", "Env leases that ran out (an env silent past its lease)",
                                  value=self.service.leases.expired_total)
        waiting = self.service.trainer_wait.seconds()
        yield GaugeMetricFamily(P + "trainer_waiting_seconds", "How long the trainer's batch polls have come back empty (0: not waiting)",
                                value=waiting or 0.0)
        yield GaugeMetricFamily(P + "stalled", "1 while the trainer starves and no env produces for it", value=int(self.service.stall.stalled))
        yield CounterMetricFamily(P + "stalls", "Stalls: the trainer waited stall_after_seconds with no env producing", value=self.service.stall.episodes)
        yield GaugeMetricFamily(P + "wal_bytes", "Size of the write-ahead log", value=self.service.wal.size)
        yield CounterMetricFamily(P + "groups_accepted", "Groups accepted", value=c.groups_accepted)
        yield CounterMetricFamily(P + "sequences_accepted", "Sequences accepted", value=c.sequences_accepted)
        yield CounterMetricFamily(P + "batches_served", "Batches handed to the trainer", value=c.batches_served)
        rejected = CounterMetricFamily(P + "requests_rejected", "Scored-data requests refused, by reason", labels=["reason"])
        for reason, count in sorted(self.service.rejected.items()):
            rejected.add_metric([reason], count)
        yield rejected
        dropped = CounterMetricFamily(P + "groups_dropped", "Queued groups dropped, by reason", labels=["reason"])
        for reason, count in sorted(c.dropped.items()):
            dropped.add_metric([reason], count)
        yield dropped


def wal_sync_histogram(registry: CollectorRegistry) -> Histogram:
    return Histogram(
        P + "wal_write_seconds",
        "Time to write (and fsync) one group-commit batch of log records",
        registry=registry,
        buckets=(0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1),
    )
