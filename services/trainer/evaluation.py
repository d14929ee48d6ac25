"""Held-out evaluation over HTTP: the env server's ``POST /evaluate`` on the weights just published,
recorded in ``evals.jsonl``, the eval gauge and W&B."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
from pydantic import HttpUrl, SecretStr

from rlstack.common.auth import bearer
from rlstack.trainer.metrics import TrainerMetrics
from rlstack.trainer.report import EvalRecord, EvalResult, append_line, read_lines

if TYPE_CHECKING:
    from rlstack.trainer.tracking import WandbTracker

log = logging.getLogger(__name__)


class Evaluator:
    def __init__(self, url: HttpUrl, token: SecretStr | None, evals_path: Path, metrics: TrainerMetrics) -> None:
        self.url = str(url).rstrip("/") + "/evaluate"
        self.token = token
        self.evals_path = evals_path
        self.metrics = metrics

    async def evaluate(self) -> EvalResult | None:
        async with httpx.AsyncClient(timeout=600) as client:
            for _ in range(300):  # the env server starts after the trainer is ready
                try:
                    r = await client.post(self.url, headers=bearer(self.token))
                    if r.status_code == 200:
                        return EvalResult.model_validate(r.json())
                    if 400 <= r.status_code < 500:  # the env answered: it has nothing to evaluate (say why once)
                        log.warning("no evaluation from %s: %d %s", self.url, r.status_code, r.text[:300])
                        return None
                except httpx.TransportError:
                    pass
                await asyncio.sleep(1.0)
        log.warning("no evaluation from %s", self.url)
        return None

    async def round(self, phase: str, step: int, tracker: WandbTracker | None) -> EvalResult | None:
        """One evaluation, recorded (the caller has waited for every replica to serve the weights)."""
        result = await self.evaluate()
        if result is not None:
            record = EvalRecord(**result.model_dump(), step=step, phase=phase)
            await asyncio.to_thread(append_line, self.evals_path, record)
            self.metrics.eval_score.set(result.accuracy)
            log.info("held-out score %s at step %d: %.3f of %d", phase, step, result.accuracy, result.problems)
        if tracker is not None:
            tracker.evaluation(phase, result, step)
        return result


def prune_evals(evals_path: Path, step: int) -> None:
    """After a resume, evaluations of steps lost with the process go too (as their step records do)."""
    kept = [e for e in read_lines(evals_path, EvalRecord) if e.step <= step]
    if evals_path.exists():
        evals_path.write_text("".join(e.model_dump_json() + "\n" for e in kept))
