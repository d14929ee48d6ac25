"""Labelled counters a dashboard queries have a series at 0 before anything happened.

A family declared with no sample is no series to Prometheus: on a real cluster the batcher's
rejections and the proxy's token-in outcomes panels said "No data" until the first event.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest

from rlstack.batcher.config import BatcherSettings
from rlstack.batcher.metrics import BatcherCollector
from rlstack.batcher.service import REJECT_REASONS, BatcherService
from rlstack.batcher.wal import WriteAheadLog
from rlstack.proxy.metrics import TOKEN_IN_OUTCOMES, ProxyMetrics


def test_a_fresh_proxy_exposes_every_token_in_outcome_at_zero():
    registry = CollectorRegistry()
    ProxyMetrics(registry)
    text = generate_latest(registry).decode()
    for outcome in TOKEN_IN_OUTCOMES:
        assert f'rlstack_proxy_token_in_calls_total{{outcome="{outcome}"}} 0.0' in text


def test_a_fresh_batcher_exposes_every_rejection_reason_at_zero(tmp_path):
    service = BatcherService(BatcherSettings(data_dir=tmp_path), WriteAheadLog(tmp_path / "batcher.wal", "fsync"))
    registry = CollectorRegistry()
    registry.register(BatcherCollector(service))
    text = generate_latest(registry).decode()
    for reason in REJECT_REASONS:
        assert f'rlstack_batcher_requests_rejected_total{{reason="{reason}"}} 0.0' in text
