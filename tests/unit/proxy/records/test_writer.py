"""The trajectory writer counts what it wrote and what it could not, in the proxy's metrics."""

from prometheus_client import CollectorRegistry

from rlstack.common.contracts.trajectory import TrajectoryRecord
from rlstack.proxy.metrics import ProxyMetrics
from rlstack.proxy.records.writer import TrajectoryWriter


def record(run: str, trial: str) -> TrajectoryRecord:
    return TrajectoryRecord(run_id=run, trial_id=trial, request_id="r", api="openai", started_at=0.0, ended_at=1.0,
                            latency_seconds=1.0)


def test_written_and_failed_lines_are_counted(tmp_path):
    registry = CollectorRegistry()
    metrics = ProxyMetrics(registry)
    (tmp_path / "blocked").write_text("a file where the run directory should be")
    writer = TrajectoryWriter(tmp_path, "w1", metrics.trajectory_lines)
    writer.start()
    writer.submit(record("ok", "t1"))
    writer.submit(record("ok", "t1"))
    writer.submit(record("blocked", "t2"))
    writer.close()
    assert (tmp_path / "ok" / "t1" / "litellm-trajectory.w1.jsonl").read_text().count("\n") == 2
    assert registry.get_sample_value("rlstack_proxy_trajectory_lines_total", {"outcome": "written"}) == 2
    assert registry.get_sample_value("rlstack_proxy_trajectory_lines_total", {"outcome": "failed"}) == 1
    assert (writer.written, writer.failed) == (2, 1)
