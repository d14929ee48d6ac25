"""The trainer's main loop: pull a batch, take a GRPO step, publish the weights, checkpoint.

Under torchrun this runs on rank 0 only; the step, checkpoints and weight export are ``Engine``
operations the other ranks join (``rlstack.trainer.engine``). Runs as a task on the service's event loop; the CPU/GPU-bound parts (the step, saving) run in
a worker thread so /healthz, /status and /metrics keep answering during a step. The weight
version is the number of optimiser steps behind the weights, so a group stamped with version
v and trained at step s is s - v steps stale. Its parts: batches in (``batch_feed``), publishing
(``sync.modes`` chooses the publisher), the replicas' catch-up (``replica_watch``), evaluation
(``evaluation``) and reporting from one record (``report.StepRecord``).
"""

from __future__ import annotations

import asyncio
import logging
import statistics
import time
from collections import deque
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from rlstack.common.batcher_client import BatcherClient
from rlstack.common.contracts.atropos import TrainerRegistration, group_name
from rlstack.trainer import checkpoint
from rlstack.trainer.batch import row_versions
from rlstack.trainer.batch_feed import BatchFeed
from rlstack.trainer.config import TrainerSettings
from rlstack.trainer.engine import Engine, ShardedPolicy, computes_in_bf16, load_policy  # noqa: F401 - load_policy: imported from here by tests
from rlstack.trainer.evaluation import Evaluator, prune_evals
from rlstack.trainer.metrics import TrainerMetrics
from rlstack.trainer.replica_watch import ReplicaWatch
from rlstack.trainer.report import (
    EvalRecord,
    EvalResult,
    StepRecord,
    TrainerStatus,
    append_line,
    count_trajectories,
    model_info,
    plot,
    read_lines,
    summarize,
    trial_stats,
    write_summary,
)
from rlstack.trainer.sync.modes import build_publisher

if TYPE_CHECKING:  # wandb is imported only when a project is set
    from rlstack.common.registry_client import RegistryClient
    from rlstack.trainer.tracking import WandbTracker

log = logging.getLogger(__name__)


class TrainingLoop:
    def __init__(self, settings: TrainerSettings, metrics: TrainerMetrics) -> None:
        self.s = settings
        self.metrics = metrics
        self.status = TrainerStatus(steps=settings.steps, policy=settings.policy)
        self.registered = False
        self.saved_step = 0
        """The step the latest checkpoint holds: the batcher keeps the batches after it for a resumed trainer."""
        self.run_dir = settings.run_dir
        self.checkpoints = self.run_dir / "checkpoints"
        self.records_path = self.run_dir / "metrics.jsonl"
        self.evals_path = self.run_dir / "evals.jsonl"
        self.engine: Engine | None = None
        self.model = None
        """What the publisher syncs: the model itself, or a handle on the sharded one under torchrun."""
        self.step = 0
        self.weight_version = 0
        self.served_dtypes: set[str] = set()
        """What the replicas compute in, from every served-weights check (the summary names it)."""
        self.started = time.monotonic()
        token = settings.batcher_token.get_secret_value() if settings.batcher_token else None
        self.batcher = BatcherClient(str(settings.batcher_url), token, timeout=60)
        self.feed = BatchFeed(self.batcher, settings.batcher_policy, settings.batcher_outage_seconds, metrics)
        self.registry: RegistryClient | None = None
        self.watch: ReplicaWatch | None = None
        """The policy's replicas in the registry, when the trainer publishes to them (one client, shared)."""
        if settings.sync.mode != "none" and settings.registry_url is not None:
            from rlstack.common.registry_client import RegistryClient

            self.registry = RegistryClient(str(settings.registry_url))
            self.watch = ReplicaWatch(self.registry, settings.served_model_name)
        self.publisher = build_publisher(settings, self.registry)
        self.evaluator = Evaluator(settings.evaluation.url, settings.evaluation.token, self.evals_path, metrics) if settings.evaluation.url else None
        self.tracker: WandbTracker | None = None
        self.recent_rewards: deque[float] = deque(maxlen=10)
        """The last 10 steps' mean reward, for /status (kept here, not re-read from metrics.jsonl)."""

    @property
    def trainer_dtype(self) -> str:
        """What the policy computes in (``mixed_precision`` resolved for its device), for the summary."""
        bf16 = self.engine is not None and computes_in_bf16(self.s, self.engine.ctx.device)
        return "bfloat16 compute (float32 master weights)" if bf16 else "float32"

    # -- set-up ------------------------------------------------------------------------------
    def _load(self) -> None:
        if self.s.torch_threads:
            torch.set_num_threads(self.s.torch_threads)
        torch.manual_seed(self.s.seed)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        resume = checkpoint.latest(self.checkpoints)
        self.engine = Engine(self.s)
        self.engine.call("load", resume)
        self.model = ShardedPolicy(self.engine) if self.engine.ctx.launched else self.engine.model
        log.info("training %s in %s", self.s.model, self.trainer_dtype)
        if resume is not None:
            state = checkpoint.load_state(resume)
            self.step, self.weight_version = state.step, state.weight_version
            self.saved_step = self.step
            log.info("resumed from %s at step %d", resume, self.step)
        # Steps after the checkpoint (all of them, killed before the first) were lost with the
        # process: their records go too, or a step trained again would be recorded twice.
        records = [r for r in read_lines(self.records_path, StepRecord) if r.step <= self.step]
        if self.records_path.exists():
            self.records_path.write_text("".join(r.model_dump_json() + "\n" for r in records))
        self.recent_rewards.extend(r.reward_mean for r in records)

    async def _register(self) -> None:
        await self.batcher.register_trainer(TrainerRegistration(
            batch_size=self.s.batch_size, max_token_len=self.s.max_token_len, checkpoint_dir=str(self.checkpoints),
            save_checkpoint_interval=self.s.checkpoint_every, starting_step=self.step, num_steps=self.s.steps,
            vocab_size=getattr(self.model.config, "vocab_size", None), batch_fill="at_least", replay_unsaved=True,
            policy=self.s.batcher_policy))
        self.registered = True

    # -- evaluation --------------------------------------------------------------------------
    async def _eval_round(self, phase: str) -> EvalResult | None:
        """Evaluate the weights published last, once every replica serves them."""
        if self.evaluator is None:
            return None
        self.status.phase = "evaluating"
        if phase != "before" and self.watch is not None:
            await self.watch.wait_for(self.weight_version)
        return await self.evaluator.round(phase, self.step, self.tracker)

    async def _catch_up_replicas(self) -> None:
        """Publish again when a ready replica has served older weights than ours at two looks in a
        row: one restarted on the base model, or one that missed a broadcast. Env servers bound
        staleness by the replicas' versions, so with every replica behind no group starts, no batch
        comes, and without this the run stops."""
        if self.watch is None or self.step == 0:
            return
        lagging = await self.watch.lagging(self.weight_version)
        if lagging:
            log.warning("replica(s) %s still serve weights older than v%d (restarted?): publishing again",
                        ", ".join(sorted(lagging)), self.weight_version)
            await self._publish()

    # -- training ----------------------------------------------------------------------------
    async def _publish(self) -> float | None:
        if self.publisher is None:
            self.weight_version = self.step
            await asyncio.to_thread(self.engine.call, "remember", self.weight_version)
            return None
        report = await self.publisher.publish(self.model, self.step)
        self.weight_version = report.version
        await asyncio.to_thread(self.engine.call, "remember", self.weight_version)  # rows sampled by it are checked under it
        self.metrics.observe_sync(report)
        self.served_dtypes.update(probe.dtype for probe in report.probes.values() if probe.dtype)
        return report.seconds

    async def train_one(self) -> StepRecord:
        groups, waited = await self.feed.next(self.step, self.saved_step, self._catch_up_replicas)
        stats = await asyncio.to_thread(self.engine.call, "step", groups, self.step)
        self.step += 1
        sync_seconds = None
        if self.step % self.s.sync.every == 0 or self.step == self.s.steps:
            sync_seconds = await self._publish()
        record = StepRecord.of(stats, step=self.step, weight_version=self.weight_version, waited=waited, sync_seconds=sync_seconds,
                               sampled=[v for g in groups for v in row_versions(g)],
                               groups=[name for g in groups if (name := group_name(g)) is not None])
        await asyncio.to_thread(append_line, self.records_path, record)
        if self.tracker is not None:
            self.tracker.step(record)
        if self.step % self.s.checkpoint_every == 0 or self.step == self.s.steps:
            state = checkpoint.CheckpointState(step=self.step, weight_version=self.weight_version)
            await asyncio.to_thread(self.engine.call, "save", self.checkpoints, state, self.s.keep_checkpoints)
            self.saved_step = self.step
        self.metrics.observe_step(record)
        self.recent_rewards.append(record.reward_mean)
        self.status = self.status.after(record, statistics.fmean(self.recent_rewards))
        log.info("step %d/%d reward %.3f loss %.4f clip %.3f stale %.1f sync %s", record.step, self.s.steps, record.reward_mean,
                 record.loss, record.clip_fraction, record.staleness_mean,
                 f"{record.sync_seconds:.2f}s" if record.sync_seconds is not None else "-")
        return record

    async def run(self) -> None:
        await asyncio.to_thread(self._load)
        await asyncio.to_thread(self.engine.call, "remember", self.weight_version)
        if self.s.wandb_project:
            from rlstack.trainer.tracking import WandbTracker

            self.tracker = await asyncio.to_thread(WandbTracker, self.s, self.run_dir)
        self.status.phase, self.status.step = "registering", self.step
        await self._register()
        if self.step > 0:
            await self._publish()  # replicas may have restarted on older weights
        eval_before_path = self.run_dir / "eval_before.json"
        await asyncio.to_thread(prune_evals, self.evals_path, self.step)
        if self.step == 0:
            self.status.eval_before = await self._eval_round("before")
            if self.status.eval_before is not None:
                eval_before_path.write_text(self.status.eval_before.model_dump_json())
        elif eval_before_path.exists():
            self.status.eval_before = EvalResult.model_validate_json(eval_before_path.read_text())
        self.status.phase = "training"
        while self.step < self.s.steps:
            await self.train_one()
            if self.s.evaluation.every and self.step % self.s.evaluation.every == 0 and self.step < self.s.steps:
                await self._eval_round("during")
                self.status.phase = "training"
        self.status.eval_after = await self._eval_round("after")
        await asyncio.to_thread(self.finish)  # reads every trajectory file and draws the plot
        await asyncio.to_thread(self._release_ranks)

    def _release_ranks(self) -> None:
        """The other torchrun ranks exit once the run is done (nothing else needs them)."""
        if self.engine is not None and self.engine.ctx.world_size > 1:
            self.engine.call("stop")
            self.engine = None

    def finish(self) -> None:
        """Summary, W&B and plot; blocking file IO, so the loop runs it in a worker thread."""
        records = read_lines(self.records_path, StepRecord)
        evals = read_lines(self.evals_path, EvalRecord)
        trials = trial_stats(self.s.trials_dir)
        summary = summarize(records, policy=self.s.policy, weight_version=self.weight_version, trajectories=count_trajectories(self.s.trials_dir),
                            sync_mode=self.s.sync.mode, eval_before=self.status.eval_before, eval_after=self.status.eval_after,
                            model=str(self.s.model), seconds=time.monotonic() - self.started, evals=evals,
                            model_info=model_info(str(self.s.model), self.trainer_dtype, sorted(self.served_dtypes)), seed=self.s.seed,
                            agent=trials.agent if trials else None, merge_share=trials.merge_share if trials else None,
                            trial_stats=trials)
        write_summary(self.run_dir / "summary.json", summary)
        if self.tracker is not None:
            self.tracker.finish(summary)
        if records:
            plot(records, self.run_dir / "reward.png", f"GRPO on {Path(self.s.model).name} ({self.s.sync.mode} sync)", evals)
        self.status.phase = "done"
        log.info("done: %s", summary.model_dump_json())

    async def aclose(self) -> None:
        await self.batcher.aclose()
        if self.publisher is not None:
            await self.publisher.aclose()
        if self.registry is not None:
            await self.registry.aclose()
