"""The proxy's garbage-collector pauses reach ``rlstack_proxy_gc_pause_seconds``, and never from inside
the collector: a collection can start while a metric's (non-reentrant) lock is held."""

import gc

from prometheus_client import CollectorRegistry

from rlstack.proxy.metrics import ProxyMetrics


def count(registry: CollectorRegistry, generation: str) -> float:
    return registry.get_sample_value("rlstack_proxy_gc_pause_seconds_count", {"generation": generation}) or 0.0


def test_pauses_are_noted_in_the_collector_and_observed_after():
    registry = CollectorRegistry()
    metrics = ProxyMetrics(registry)
    try:
        gc.collect()
        assert count(registry, "2") == 0  # noted only: the callback touched no metric
        metrics.flush_gc()
        assert count(registry, "2") >= 1
        assert registry.get_sample_value("rlstack_proxy_gc_pause_seconds_sum", {"generation": "2"}) > 0
    finally:
        gc.callbacks.remove(metrics._gc_event)
