"""Optional Weights & Biases logging of every step record, the evals and the summary.

Off unless ``wandb_project`` is set. The W&B run id is kept in the run directory, so a trainer
resumed after a kill keeps writing to the same W&B run. ``WANDB_MODE=offline`` (W&B's own
variable) records locally for a later ``wandb sync``: that is how the tests run it.
"""

from __future__ import annotations

import logging
import uuid
from pathlib import Path

from rlstack.trainer.config import TrainerSettings
from rlstack.trainer.report import EvalResult, StepRecord, Summary

log = logging.getLogger(__name__)


class WandbTracker:
    def __init__(self, settings: TrainerSettings, run_dir: Path) -> None:
        import wandb

        id_file = run_dir / "wandb-run-id"
        if not id_file.exists():
            id_file.write_text(uuid.uuid4().hex[:16])
        config = settings.model_dump(mode="json", exclude={"auth_token", "batcher_token", "replica_api_key"})
        self.run = wandb.init(project=settings.wandb_project, entity=settings.wandb_entity, name=settings.wandb_run_name or run_dir.name,
                              id=id_file.read_text().strip(), resume="allow", dir=str(run_dir), config=config)
        log.info("W&B run %s (%s)", self.run.id, self.run.url or "offline")

    def step(self, record: StepRecord) -> None:
        self.run.log({f"train/{k}": v for k, v in record.model_dump(exclude={"step"}, exclude_none=True).items()}, step=record.step)

    def evaluation(self, which: str, result: EvalResult | None, step: int) -> None:
        if result is not None:
            self.run.log({f"eval/{which}_accuracy": result.accuracy}, step=step)

    def finish(self, summary: Summary) -> None:
        self.run.summary.update(summary.model_dump(mode="json", exclude_none=True))
        self.run.finish()
