"""Train a saved batch for a few steps, as one plain process or as every rank of a torchrun job.

    python -m torch.distributed.run --nproc_per_node 2 tests/integration/trainer_fsdp_worker.py SPEC.json

SPEC holds the model, the batch (a list of scored groups), the trainer settings, how many
steps, and where to resume from / checkpoint to / write results. Rank 0 drives the engine
(``Engine.call``) while the others follow (``Engine.serve``), exactly as the service does; rank
0 writes ``result.json`` (per-step loss and grad norm) and the exported weights.
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
    settings = TrainerSettings(model=spec["model"], sync_mode="none", **spec.get("settings", {}))
    engine = Engine(settings)
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
    engine.call("export", out / "weights")
    engine.call("stop")
    (out / "result.json").write_text(json.dumps({"world_size": engine.ctx.world_size, "steps": records}))


if __name__ == "__main__":
    run(json.loads(Path(sys.argv[1]).read_text()))
    from rlstack.trainer.distributed import launched_by_torchrun

    if launched_by_torchrun():
        import torch.distributed as dist

        dist.destroy_process_group()
