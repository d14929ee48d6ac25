"""The version a replica holds travels from vLLM's workers to the sidecar through files, never
through a ``collective_rpc`` per heartbeat (which kept an idle worker spinning)."""

from __future__ import annotations

import shutil

from rlstack.inference.config import InferenceSettings
from rlstack.inference.weight_state import STATE_DIR_ENV, read_weight_state, write_weight_state
from rlstack.inference.worker_extension import RLStackWorkerExtension


def test_the_lowest_version_over_workers_is_the_replicas(tmp_path):
    assert read_weight_state(tmp_path) is None
    write_weight_state(tmp_path, 0, 3, "policy-v3")
    write_weight_state(tmp_path, 1, 2, "policy-v2")  # this worker missed the last update
    assert read_weight_state(tmp_path) == (2, "policy-v2")
    write_weight_state(tmp_path, 1, 3, "policy-v3")
    assert read_weight_state(tmp_path) == (3, "policy-v3")
    (tmp_path / "worker-2.json").write_text("{half a fi")  # a torn file is skipped, not fatal
    assert read_weight_state(tmp_path) == (3, "policy-v3")


def test_the_worker_writes_the_version_the_trainer_stores(tmp_path, monkeypatch):
    monkeypatch.setenv(STATE_DIR_ENV, str(tmp_path))
    worker = RLStackWorkerExtension()  # the mixin alone: vLLM adds the rest of the worker
    worker.rank = 0
    assert worker.rlstack_set_weight_version(7, adapter="policy-lora-v7") == 7
    assert read_weight_state(tmp_path) == (7, "policy-lora-v7")
    worker.rlstack_set_weight_version(8)
    assert read_weight_state(tmp_path) == (8, None)


def test_the_sidecar_hands_vllm_its_state_dir_and_reads_it(tmp_path):
    from rlstack.inference.app import Replica

    replica = Replica(InferenceSettings(model="m", model_family="demo", vllm_port=8001, weight_version=0))
    assert replica.vllm.env[STATE_DIR_ENV] == str(replica.state_dir)
    replica.read_weight_state()
    assert (replica.weight_version, replica.adapter) == (0, None)
    write_weight_state(replica.state_dir, 0, 5, "a5")
    replica.read_weight_state()
    assert (replica.weight_version, replica.adapter) == (5, "a5")
    shutil.rmtree(replica.state_dir)
