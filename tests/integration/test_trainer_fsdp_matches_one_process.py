"""FSDP2 under torchrun trains like one plain process: two gloo ranks on the tiny model give the
same losses and the same updated weights on the same batch, packed rows give the padded rows'
loss, a checkpoint written by two ranks resumes in one process and the reverse, and the two
ranks share their trained weights by ``ipc`` one layer at a time, each with the (stand-in)
replica on its own device. Real ``python -m torch.distributed.run`` subprocesses running
tests/integration/trainer_fsdp_worker.py."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import torch
from safetensors.torch import load_file

from rlstack.trainer.sync.gather import LAYER
from tests.conftest import start_service
from tests.helpers.ipc_stand_in import StandInIpcReplica
from tests.helpers.wait import wait_until
from tests.integration.trainer_fsdp_worker import run

WORKER = Path(__file__).with_name("trainer_fsdp_worker.py")
LOSS_TOL = 1e-6
WEIGHT_TOL = 1e-4
PACKED_WEIGHT_TOL = 2.5e-4
"""Packed rows sum each token's gradient in another order than padded rows; after two AdamW steps at
lr 1e-3 (each step moves a weight by up to ~lr, and by nearly lr where its gradient is tiny, whatever
its size) that order moved one weight of the current demo model by 1.14e-4 while the losses still
matched to 1e-6. The code at the session's start (2ab32b2) gives the same 1.14e-4 on this model:
the gap is the order of the sums, not a change in training. A quarter of one step is still far below
what a wrong packing (a token trained twice or not at all) moves."""
"""AdamW's first steps move each weight by ~lr whatever its gradient's size, so float noise in a
tiny gradient shows up at ~1e-6 here; a wrong reduction (a missing or doubled rank) moves weights by ~lr = 1e-3."""

BF16_LOSS_TOL = 2e-3
"""bf16 compute moves these losses by ~2.4e-4 at most (measured, 2 steps); ten times that is the bound."""

pytestmark = pytest.mark.slow


def groups(seed: int = 0) -> list[dict]:
    """Two groups of four sequences of uneven lengths (so padding, packing and rank balance all matter)."""
    rng = random.Random(seed)
    out = []
    for _ in range(2):
        prompt = [rng.randrange(1, 8000) for _ in range(rng.randint(6, 12))]
        completions = [[rng.randrange(1, 8000) for _ in range(rng.randint(4, 20))] for _ in range(4)]
        out.append({"tokens": [prompt + c for c in completions], "masks": [[-100] * len(prompt) + c for c in completions],
                    "scores": [1.0, 0.0, 0.5, 0.25], "weight_version": 0,
                    "inference_logprobs": [[0.0] * len(prompt) + [-rng.uniform(5, 10) for _ in c] for c in completions]})
    return out


def spec(tmp_path: Path, name: str, model: Path, steps: int, **extra) -> dict:
    settings = {"lr": 1e-3, "micro_batch_size": 2, **extra.pop("settings", {})}
    return {"model": str(model), "groups": groups(), "steps": steps, "settings": settings, "out": str(tmp_path / name), **extra}


def plain(job: dict) -> dict:
    run(job)
    return json.loads((Path(job["out"]) / "result.json").read_text())


def torchrun(job: dict, nproc: int = 2) -> dict:
    path = Path(job["out"] + ".json")
    path.write_text(json.dumps(job))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(nproc), str(WORKER), str(path)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=WORKER.parents[2])
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    result = json.loads((Path(job["out"]) / "result.json").read_text())
    assert result["world_size"] == nproc
    return result


def weights(out: str) -> dict[str, torch.Tensor]:
    found: dict[str, torch.Tensor] = {}
    for f in sorted((Path(out) / "weights").glob("*.safetensors")):
        found.update(load_file(f))
    return found


def max_gap(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert sorted(a) == sorted(b)
    return max(float((a[k] - b[k]).abs().max()) for k in a)


def losses(result: dict) -> list[float]:
    return [s["loss"] for s in result["steps"]]


@pytest.fixture(scope="module")
def reference(tiny_model, tmp_path_factory) -> dict:
    """One plain process, two steps, padded rows: what every other layout must reproduce."""
    job = spec(tmp_path_factory.mktemp("plain"), "plain", tiny_model, steps=2)
    return {"result": plain(job), "weights": weights(job["out"])}


def test_two_gloo_ranks_give_one_process_loss_and_weights(reference, tiny_model, tmp_path):
    job = spec(tmp_path, "ranks2", tiny_model, steps=2)
    result = torchrun(job)
    start = load_file(tiny_model / "model.safetensors")
    assert max_gap(reference["weights"], start) > 1e-3  # the steps moved the weights
    assert losses(result) == pytest.approx(losses(reference["result"]), abs=LOSS_TOL)
    assert max_gap(weights(job["out"]), reference["weights"]) < WEIGHT_TOL
    # Each rank saw its share of the batch; the statistics are the whole batch's.
    assert result["steps"][0]["mismatch_tokens"] == reference["result"]["steps"][0]["mismatch_tokens"]


def test_packed_rows_on_two_ranks_checkpoint_and_resume_in_one_process(reference, tiny_model, tmp_path):
    sharded = spec(tmp_path, "packed2", tiny_model, steps=1, settings={"pack_tokens": 48}, save=str(tmp_path / "ckpt"))
    first = torchrun(sharded)
    assert (tmp_path / "ckpt" / "step-000001" / "dcp" / ".metadata").exists()
    resumed = plain(spec(tmp_path, "resumed1", tiny_model, steps=1, resume=str(tmp_path / "ckpt" / "step-000001")))
    assert losses(first) + losses(resumed) == pytest.approx(losses(reference["result"]), abs=LOSS_TOL)
    assert max_gap(weights(str(tmp_path / "resumed1")), reference["weights"]) < PACKED_WEIGHT_TOL


def test_one_process_checkpoint_resumes_on_two_ranks(reference, tiny_model, tmp_path):
    first = plain(spec(tmp_path, "plain1", tiny_model, steps=1, save=str(tmp_path / "ckpt")))
    assert (tmp_path / "ckpt" / "step-000001" / "optimizer.pt").exists()  # a plain process's own format
    resumed = torchrun(spec(tmp_path, "resumed2", tiny_model, steps=1, resume=str(tmp_path / "ckpt" / "step-000001")))
    assert losses(first) + losses(resumed) == pytest.approx(losses(reference["result"]), abs=LOSS_TOL)
    assert max_gap(weights(str(tmp_path / "resumed2")), reference["weights"]) < WEIGHT_TOL


def test_lora_adapter_on_two_ranks_matches_one_process_and_resumes_in_one(tiny_model, tmp_path):
    lora = {"lora_rank": 4}
    one = plain(spec(tmp_path, "lora1", tiny_model, steps=1, settings=lora))
    two = torchrun(spec(tmp_path, "lora2", tiny_model, steps=1, settings={**lora, "pack_tokens": 48}, save=str(tmp_path / "ckpt")))
    assert losses(two) == pytest.approx(losses(one), abs=LOSS_TOL)
    assert max_gap(weights(str(tmp_path / "lora2")), weights(str(tmp_path / "lora1"))) < WEIGHT_TOL  # the adapters
    resumed = plain(spec(tmp_path, "lora-resumed", tiny_model, steps=1, settings=lora, resume=str(tmp_path / "ckpt" / "step-000001")))
    assert resumed["steps"][0]["step"] == 2 and resumed["steps"][0]["loss"] != one["steps"][0]["loss"]


def test_bf16_mixed_precision_checkpointing_and_offload_on_two_ranks_train_like_float32(reference, tiny_model, tmp_path):
    """The GPU memory savers, run on CPU ranks: FSDP2's bf16 MixedPrecisionPolicy (float32
    reduction and master weights), activation checkpointing and CPU offload, with packed rows."""
    settings = {"mixed_precision": "bf16", "activation_checkpointing": True, "cpu_offload": True, "pack_tokens": 48}
    result = torchrun(spec(tmp_path, "savers", tiny_model, steps=2, settings=settings))
    assert losses(result) == pytest.approx(losses(reference["result"]), abs=BF16_LOSS_TOL)
    assert losses(result) != pytest.approx(losses(reference["result"]), abs=LOSS_TOL)  # bf16 compute did run
    trained = weights(str(tmp_path / "savers"))
    assert all(t.dtype == torch.float32 for t in trained.values())  # the master weights stay float32
    assert max_gap(trained, load_file(tiny_model / "model.safetensors")) > 1e-3


def test_two_ranks_share_each_layer_by_ipc_with_the_replica_on_their_device(tiny_model, tmp_path):
    registry = start_service("registry", ["--probe-interval-seconds", "0.5"], tmp_path)
    replicas = [StandInIpcReplica(f"cpu-rank-{rank}") for rank in range(2)]  # one beside each rank, as on a GPU node
    try:
        for i, replica in enumerate(replicas):
            httpx.put(f"{registry.url}/v1/endpoints/stand-in-{i}", json={"url": replica.url, "model": "policy", "ttl_seconds": 600}
                      ).raise_for_status()
        wait_until(lambda: all(e["ready"] for e in httpx.get(f"{registry.url}/v1/endpoints").json()["endpoints"]), timeout=30)
        job = spec(tmp_path, "ipc2", tiny_model, steps=1, ipc={"registry_url": registry.url, "served_model": "policy", "version": 1})
        result = torchrun(job)
        assert sorted(result["sync"]["replicas"]) == ["stand-in-0", "stand-in-1"] and not result["sync"]["failed"]

        trained, start = weights(job["out"]), load_file(tiny_model / "model.safetensors")
        assert max_gap(trained, start) > 1e-4  # the step moved the weights
        layers = json.loads((tiny_model / "config.json").read_text())["num_hidden_layers"]
        for replica in replicas:
            assert max_gap(replica.received, trained) == 0.0  # every tensor, exactly the trainer's
            assert replica.offered == {"cpu-rank-0", "cpu-rank-1"}  # each read its own rank's copy, by device id
            # One update per decoder layer, then the rest (embeddings, norm): never the whole model at once.
            assert len(replica.updates) == layers + 1
            assert all(len({LAYER.search(n).group(1) for n in names}) == 1 for names in replica.updates[:-1])
            assert not any(LAYER.search(n) for n in replica.updates[-1])
            assert replica.calls == ["/init_weight_transfer_engine", "/pause", "/start_weight_update", *["/update_weights"] * (layers + 1),
                                     "/finish_weight_update", "/collective_rpc", "/reset_prefix_cache", "/resume"]
            assert replica.version == 1 and not replica.paused
    finally:
        for replica in replicas:
            replica.close()
        registry.terminate()
