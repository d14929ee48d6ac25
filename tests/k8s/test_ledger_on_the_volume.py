"""`rlstack ledger DIR --run RUN` reads a chart install's shared volume where the chart puts each
service's files (the local layout of `rlstack up` is another): found auditing the first real run."""

from __future__ import annotations

from pathlib import Path

from rlstack.ops.ledger import LedgerSources
from tests.k8s.conftest import env_of, objects_of


def test_the_ledger_reads_the_files_where_the_chart_writes_them():
    objects = objects_of("values-agent.yaml")
    env = env_of(objects, "Deployment", "env-agent")
    batcher = env_of(objects, "Deployment", "-batcher")
    trainer = env_of(objects, "Job", "-trainer")
    run = env["RLSTACK_ENV_RUN_ID"]
    sources = LedgerSources.of(Path("/data"), run)  # the chart's sharedStorage.mountPath
    assert sources.run == run
    assert str(sources.trials_dir) == env["RLSTACK_ENV_TRIALS_DIR"] == trainer["RLSTACK_TRAINER_TRIALS_DIR"]
    assert str(sources.journal_dir) == env["RLSTACK_ENV_JOURNAL_DIR"]
    assert str(sources.batcher_wal) == f"{batcher['RLSTACK_BATCHER_DATA_DIR']}/batcher.wal"
    assert str(sources.trainer_metrics) == f"{trainer['RLSTACK_TRAINER_RUN_DIR']}/metrics.jsonl"


def test_a_local_run_directory_keeps_its_layout(tmp_path):
    sources = LedgerSources.of(tmp_path)
    assert sources.batcher_wal == tmp_path / "batcher" / "batcher.wal" and sources.trainer_metrics == tmp_path / "metrics.jsonl"
    assert sources.run == "*"
