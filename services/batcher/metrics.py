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
        svc = self.service
        yield from self._per_policy()
        state = svc.state  # the envs, as every policy's queue sees them
        yield GaugeMetricFamily(P + "queue_capacity_sequences", "Queue bound in sequences (every policy's together)",
                                value=svc.settings.max_queue_sequences)
        yield GaugeMetricFamily(P + "envs_connected", "Registered, connected env servers", value=sum(e.connected for e in state.envs))
        live = svc.leases.live_ids()
        yield GaugeMetricFamily(P + "envs_live", "Connected envs whose lease is current (they share the weight)",
                                value=sum(e.connected and e.env_id in live for e in state.envs))
        yield CounterMetricFamily(P + "env_leases_expired", "Env leases that ran out (an env silent past its lease)",
                                  value=svc.leases.expired_total)
        yield GaugeMetricFamily(P + "wal_bytes", "Size of the write-ahead log", value=svc.wal.size)
        rejected = CounterMetricFamily(P + "requests_rejected", "Scored-data requests refused, by reason", labels=["reason"])
        for reason, count in sorted(svc.rejected.items()):
            rejected.add_metric([reason], count)
        yield rejected

    def _per_policy(self) -> Iterator[Metric]:
        """One series per policy (``policy``: its name, the served name, also with one policy), so a
        dashboard reads a run of one or several the same way."""
        svc = self.service
        families = {
            "queue_groups": GaugeMetricFamily(P + "queue_groups", "Groups waiting to be batched", labels=["policy"]),
            "queue_sequences": GaugeMetricFamily(P + "queue_sequences", "Sequences waiting to be batched", labels=["policy"]),
            "current_step": GaugeMetricFamily(P + "current_step", "Batches handed out so far (the trainer step)", labels=["policy"]),
            "trainer_waiting_seconds": GaugeMetricFamily(
                P + "trainer_waiting_seconds", "How long the trainer's batch polls have come back empty (0: not waiting)",
                labels=["policy"]),
            "stalled": GaugeMetricFamily(P + "stalled", "1 while the trainer starves and no env produces for it", labels=["policy"]),
            "stalls": CounterMetricFamily(P + "stalls", "Stalls: the trainer waited stall_after_seconds with no env producing",
                                          labels=["policy"]),
            "groups_accepted": CounterMetricFamily(P + "groups_accepted", "Groups accepted", labels=["policy"]),
            "sequences_accepted": CounterMetricFamily(P + "sequences_accepted", "Sequences accepted", labels=["policy"]),
            "batches_served": CounterMetricFamily(P + "batches_served", "Batches handed to the trainer", labels=["policy"]),
        }
        dropped = CounterMetricFamily(P + "groups_dropped", "Queued groups dropped, by reason", labels=["policy", "reason"])
        for policy, state in svc.states.items():
            c = state.counters
            values = {"queue_groups": state.available_groups, "queue_sequences": state.queued_sequences, "current_step": state.step,
                      "trainer_waiting_seconds": svc.trainer_waits[policy].seconds() or 0.0,
                      "stalled": int(svc.stalls[policy].stalled), "stalls": svc.stalls[policy].episodes,
                      "groups_accepted": c.groups_accepted, "sequences_accepted": c.sequences_accepted,
                      "batches_served": c.batches_served}
            for name, family in families.items():
                family.add_metric([policy], values[name])
            for reason, count in sorted(c.dropped.items()):
                dropped.add_metric([policy, reason], count)
        yield from families.values()
        yield dropped


def wal_sync_histogram(registry: CollectorRegistry) -> Histogram:
    return Histogram(
        P + "wal_write_seconds",
        "Time to write (and fsync) one group-commit batch of log records",
        registry=registry,
        buckets=(0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1),
    )
