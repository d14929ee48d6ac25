"""Train a saved batch for a few steps, as one plain process or as every rank of a torchrun job.

    python -m torch.distributed.run --nproc_per_node 2 tests/integration/trainer_fsdp_worker.py SPEC.json

SPEC holds the model, the batch (a list of scored groups), the trainer settings, how many
steps, and where to resume from / checkpoint to / write results. Rank 0 drives the engine
(``Engine.call``) while the others follow (``Engine.serve``), exactly as the service does; rank
0 writes ``result.json`` (per-step loss and grad norm) and the exported weights. With ``ipc``
(a registry URL and a served model), every rank shares from CPU shared memory under the device
id ``cpu-rank-<rank>`` (tests/helpers/ipc_stand_in.py) and rank 0 publishes the trained weights
with the real ipc publisher, before exporting them.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch


def run(spec: dict) -> None:
    from rlstack.trainer import checkpoint
    from rlstack.trainer.config import TrainerSettings
    from rlstack.trainer.engine import Engine

    torch.manual_seed(0)
    torch.set_num_threads(1)
    settings = TrainerSettings(model=spec["model"], **{"sync_mode": "none", **spec.get("settings", {})})
    engine = Engine(settings)
    if spec.get("ipc"):
        sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a script: make the repo's tests importable
        from tests.helpers.ipc_stand_in import shared_memory_source

        engine.ipc_source = shared_memory_source(f"cpu-rank-{engine.ctx.rank}")
    if not engine.ctx.is_main:
        engine.serve()
        return
    out = Path(spec["out"])
    out.mkdir(parents=True, exist_ok=True)
    resume = Path(spec["resume"]) if spec.get("resume") else None
    engine.call("load", resume)
    first = checkpoint.load_state(resume).step if resume else 0
    records = []
    for step in range(first, first + spec["steps"]):
        stats = engine.call("step", spec["groups"], step)
        records.append({"step": step + 1, "loss": stats.loss, "grad_norm": stats.grad_norm, "kl": stats.kl,
                        "mismatch_tokens": stats.mismatch.tokens if stats.mismatch else 0})
    if spec.get("save"):
        state = checkpoint.CheckpointState(step=first + spec["steps"], weight_version=first + spec["steps"])
        engine.call("save", Path(spec["save"]), state, 2)
    result: dict = {"world_size": engine.ctx.world_size, "steps": records}
    if spec.get("ipc"):
        result["sync"] = publish_ipc(engine, spec["ipc"]).model_dump()
    engine.call("export", out / "weights")
    engine.call("stop")
    (out / "result.json").write_text(json.dumps(result))


def publish_ipc(engine, ipc: dict):  # noqa: ANN001, ANN201 - an Engine; a SyncReport
    import asyncio

    from rlstack.common.registry_client import RegistryClient
    from rlstack.trainer.engine import ShardedPolicy
    from rlstack.trainer.sync.ipc import IpcPublisher

    policy = ShardedPolicy(engine) if engine.ctx.launched else engine.model

    async def go():  # noqa: ANN202
        publisher = IpcPublisher(RegistryClient(ipc["registry_url"]), ipc["served_model"], source=engine.ipc_source)
        try:
            return await publisher.publish(policy, ipc["version"])
        finally:
            await publisher.aclose()

    return asyncio.run(go())


if __name__ == "__main__":
    run(json.loads(Path(sys.argv[1]).read_text()))
    from rlstack.trainer.distributed import launched_by_torchrun

    if launched_by_torchrun():
        import torch.distributed as dist

        dist.destroy_process_group()
