"""The trainer's main loop: pull a batch, take a GRPO step, publish the weights, checkpoint.

Under torchrun this runs on rank 0 only; the step, checkpoints and weight export are ``Engine``
operations the other ranks join (``rlstack.trainer.engine``). Runs as a task on the service's event loop; the CPU/GPU-bound parts (the step, saving) run in
a worker thread so /healthz, /status and /metrics keep answering during a step. The weight
version is the number of optimiser steps behind the weights, so a group stamped with version
v and trained at step s is s - v steps stale.
"""

from __future__ import annotations

import asyncio
import logging
import statistics
import time
from collections import deque
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import torch
from pydantic import BaseModel

from rlstack.common.auth import bearer
from rlstack.common.batcher_client import BatcherClient, BatcherRefused
from rlstack.common.contracts.atropos import TrainerRegistration, group_name
from rlstack.common.contracts.registry import Endpoint
from rlstack.trainer import checkpoint
from rlstack.trainer.batch import row_versions
from rlstack.trainer.config import BroadcastSync, FilesystemSync, IpcSync, LoraSync, TrainerSettings
from rlstack.trainer.engine import Engine, ShardedPolicy, computes_in_bf16, load_policy  # noqa: F401 - load_policy: imported from here by tests
from rlstack.trainer.metrics import TrainerMetrics
from rlstack.trainer.report import (
    EvalRecord,
    EvalResult,
    StepRecord,
    append_line,
    count_trajectories,
    model_info,
    plot,
    read_lines,
    summarize,
    trial_stats,
    write_summary,
)
from rlstack.trainer.sync import WeightPublisher

if TYPE_CHECKING:  # wandb is imported only when a project is set
    from rlstack.trainer.tracking import WandbTracker

log = logging.getLogger(__name__)
LAGGING_LOOK_SECONDS = 5.0
STARVED_LOG_SECONDS = 60.0
"""While it waits for a batch, how often the trainer logs why (the batcher's ``/progress``)."""
"""While it waits for a batch, how often the trainer looks for replicas behind its weights."""


def replicas_behind(endpoints: list[Endpoint], version: int) -> set[str]:
    """Ready replicas that report a weight version older than ``version``."""
    return {e.id for e in endpoints if e.ready and e.weight_version < version}


class TrainerStatus(BaseModel):
    """``GET /status``: what ``rlstack up`` draws its progress line from."""

    policy: str | None = None
    """The policy this trainer trains (its replicas' served name)."""
    phase: str = "loading"
    step: int = 0
    steps: int
    weight_version: int = 0
    reward_mean: float | None = None
    reward_recent: float | None = None
    loss: float | None = None
    staleness: float | None = None
    sync_seconds: float | None = None
    eval_before: EvalResult | None = None
    eval_after: EvalResult | None = None
    error: str | None = None


def build_publisher(settings: TrainerSettings) -> WeightPublisher | None:
    if settings.sync_mode == "none":
        return None
    if settings.registry_url is None:
        raise ValueError("registry_url is required to sync weights (or set sync_mode=none)")
    from rlstack.common.registry_client import RegistryClient

    registry = RegistryClient(str(settings.registry_url))
    key = settings.replica_api_key.get_secret_value() if settings.replica_api_key else None
    publisher = _publisher(settings, registry, key)
    if not settings.verify_sync:
        return publisher
    from rlstack.trainer.sync import replica_headers
    from rlstack.trainer.sync.verify import ServedWeightsCheck, VerifiedPublisher

    return VerifiedPublisher(publisher, ServedWeightsCheck(registry, settings.served_model_name, replica_headers(key), settings.verify_tolerance),
                             settings.verify_wait_seconds)


def _publisher(settings: TrainerSettings, registry, key: str | None) -> WeightPublisher:  # noqa: ANN001 - a RegistryClient
    sync = settings.sync
    if isinstance(sync, BroadcastSync):
        from rlstack.trainer.sync.broadcast import BroadcastPublisher

        return BroadcastPublisher(registry, settings.served_model_name, trainer_host=sync.host, replica_api_key=key)
    if isinstance(sync, IpcSync):
        from rlstack.trainer.sync.ipc import IpcPublisher

        return IpcPublisher(registry, settings.served_model_name, replica_api_key=key)
    if isinstance(sync, LoraSync):
        from rlstack.trainer.sync.lora import LoraPublisher

        return LoraPublisher(sync.weights_dir, registry, settings.served_model_name, replica_api_key=key)
    if isinstance(sync, FilesystemSync):
        from rlstack.trainer.sync.filesystem import FilesystemPublisher

        return FilesystemPublisher(sync.weights_dir, registry, settings.served_model_name, replica_api_key=key)
    raise ValueError(f"sync_mode={sync.mode} publishes nothing")


class TrainingLoop:
    def __init__(self, settings: TrainerSettings, metrics: TrainerMetrics) -> None:
        self.s = settings
        self.metrics = metrics
        self.status = TrainerStatus(steps=settings.steps, policy=settings.policy)
        self.registered = False
        self.saved_step = 0
        """The step the latest checkpoint holds: the batcher keeps the batches after it for a resumed trainer."""
        self._behind: set[str] = set()
        """Replicas seen on older weights at the last look (``_catch_up_replicas``)."""
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
        self.publisher = build_publisher(settings)
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
    async def _evaluate(self) -> EvalResult | None:
        if self.s.eval_url is None:
            return None
        url = str(self.s.eval_url).rstrip("/") + "/evaluate"
        async with httpx.AsyncClient(timeout=600) as client:
            for _ in range(300):  # the env server starts after the trainer is ready
                try:
                    r = await client.post(url, headers=bearer(self.s.eval_token))
                    if r.status_code == 200:
                        return EvalResult.model_validate(r.json())
                    if 400 <= r.status_code < 500:  # the env answered: it has nothing to evaluate (say why once)
                        log.warning("no evaluation from %s: %d %s", url, r.status_code, r.text[:300])
                        return None
                except httpx.TransportError:
                    pass
                await asyncio.sleep(1.0)
        log.warning("no evaluation from %s", url)
        return None

    async def _eval_round(self, phase: str) -> EvalResult | None:
        """Evaluate the weights published last, once every replica serves them; recorded in
        evals.jsonl, the eval gauge and W&B."""
        if self.s.eval_url is None:
            return None
        self.status.phase = "evaluating"
        if phase != "before":
            await self._wait_for_registry(self.weight_version)
        result = await self._evaluate()
        if result is not None:
            record = EvalRecord(**result.model_dump(), step=self.step, phase=phase)
            await asyncio.to_thread(append_line, self.evals_path, record)
            self.metrics.eval_score.set(result.accuracy)
            log.info("held-out score %s at step %d: %.3f of %d", phase, self.step, result.accuracy, result.problems)
        if self.tracker is not None:
            self.tracker.evaluation(phase, result, self.step)
        return result

    def _prune_evals(self) -> None:
        """After a resume, evaluations of steps lost with the process go too (as their step records do)."""
        kept = [e for e in read_lines(self.evals_path, EvalRecord) if e.step <= self.step]
        if self.evals_path.exists():
            self.evals_path.write_text("".join(e.model_dump_json() + "\n" for e in kept))

    async def _wait_for_registry(self, version: int, timeout: float = 30.0) -> None:
        """Until every ready replica reports ``version`` (sidecars publish it on their next heartbeat)."""
        if self.publisher is None or self.s.registry_url is None:
            return
        from rlstack.common.registry_client import RegistryClient

        registry = RegistryClient(str(self.s.registry_url))
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline:
                endpoints = (await registry.list(model=self.s.served_model_name, ready=True)).endpoints
                if endpoints and all(e.weight_version == version for e in endpoints):
                    return
                await asyncio.sleep(0.2)
        finally:
            await registry.aclose()
        log.warning("registry does not show weight version %d on every replica after %.0fs", version, timeout)

    async def _catch_up_replicas(self) -> None:
        """Publish again when a ready replica has served older weights than ours at two looks in a
        row (one look could catch a heartbeat in flight): one restarted on the base model, or one
        that missed a broadcast. Env servers bound staleness by the replicas' versions, so with
        every replica behind no group starts, no batch comes, and without this the run stops."""
        if self.publisher is None or self.s.registry_url is None or self.step == 0:
            return
        from rlstack.common.registry_client import RegistryClient

        registry = RegistryClient(str(self.s.registry_url))
        try:
            endpoints = (await registry.list(model=self.s.served_model_name, ready=True)).endpoints
        except (httpx.HTTPError, ValueError) as exc:  # the registry is away: look again later
            log.debug("could not list replicas: %r", exc)
            return
        finally:
            await registry.aclose()
        behind = replicas_behind(endpoints, self.weight_version)
        if behind & self._behind:
            log.warning("replica(s) %s still serve weights older than v%d (restarted?): publishing again",
                        ", ".join(sorted(behind & self._behind)), self.weight_version)
            await self._publish()
            behind = set()
        self._behind = behind

    # -- training ----------------------------------------------------------------------------
    async def _next_batch(self) -> tuple[list[dict], float]:
        start = looked = said = time.monotonic()
        away_since: float | None = None
        while True:
            try:
                batch = await self.batcher.batch(saved_step=self.saved_step, policy=self.s.batcher_policy)
            except (httpx.TransportError, httpx.HTTPStatusError) as exc:
                # A batcher restart (Recreate rollout, node loss) outlasts the client's retries;
                # exiting here would reload the policy and lose the steps since the checkpoint.
                now = time.monotonic()
                away_since = away_since or now
                if now - away_since > self.s.batcher_outage_seconds:
                    raise
                if now - said >= STARVED_LOG_SECONDS or away_since == now:
                    said = now
                    log.warning("batcher unreachable for %.0fs at step %d (%r): waiting up to %.0fs for it",
                                now - away_since, self.step, exc, self.s.batcher_outage_seconds)
                await asyncio.sleep(1.0)
                continue
            if away_since is not None:
                log.info("batcher back after %.0fs", time.monotonic() - away_since)
                away_since = None
            if batch:
                waited = time.monotonic() - start
                self.metrics.batch_wait_seconds.inc(waited)
                return batch, waited
            if time.monotonic() - looked >= LAGGING_LOOK_SECONDS:
                looked = time.monotonic()
                await self._catch_up_replicas()
            if time.monotonic() - said >= STARVED_LOG_SECONDS:
                said = time.monotonic()
                await self._say_why_starved(said - start)
            await asyncio.sleep(0.05)

    async def _say_why_starved(self, waited: float) -> None:
        """A long wait for a batch is logged with the batcher's account of it: the queue, and what
        each env is doing (holding back, silent, producing)."""
        try:
            report = await self.batcher.progress(self.s.batcher_policy)
        except (httpx.HTTPError, BatcherRefused, ValueError) as exc:  # an Atropos server has no /progress
            log.warning("no batch for %.0fs at step %d (the batcher gives no account: %r)", waited, self.step, exc)
            return
        whose = f" of policy {self.s.batcher_policy}" if self.s.batcher_policy else ""
        log.warning("no batch%s for %.0fs at step %d%s: %s", whose, waited, self.step, " (stalled)" if report.stalled else "",
                    report.describe())

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
        groups, waited = await self._next_batch()
        stats = await asyncio.to_thread(self.engine.call, "step", groups, self.step)
        sampled = [v for g in groups for v in row_versions(g)]
        stale = [max(0, self.step - v[0]) for v in sampled if v]  # from each row's oldest sampling version
        self.step += 1
        sync_seconds = None
        if self.step % self.s.sync_every == 0 or self.step == self.s.steps:
            sync_seconds = await self._publish()
        record = StepRecord(
            step=self.step, weight_version=self.weight_version, loss=stats.loss, reward_mean=stats.reward_mean,
            reward_std=stats.reward_std, kl=stats.kl, clip_fraction=stats.clip_fraction, ratio_mean=stats.ratio_mean,
            is_weight_mean=stats.is_weight_mean, is_capped=stats.is_capped,
            grad_norm=stats.grad_norm, tokens=stats.tokens, step_seconds=stats.seconds,
            tokens_per_second=stats.tokens / max(stats.seconds, 1e-9), wait_seconds=waited,
            staleness_mean=statistics.fmean(stale) if stale else 0.0, staleness_max=max(stale, default=0), sync_seconds=sync_seconds,
            mismatch=stats.mismatch, rows=len(sampled), rows_spanning_versions=sum(v is not None and len(v) > 1 for v in sampled),
            groups=[name for g in groups if (name := group_name(g)) is not None],
        )
        await asyncio.to_thread(append_line, self.records_path, record)
        if self.tracker is not None:
            self.tracker.step(record)
        if self.step % self.s.checkpoint_every == 0 or self.step == self.s.steps:
            state = checkpoint.CheckpointState(step=self.step, weight_version=self.weight_version)
            await asyncio.to_thread(self.engine.call, "save", self.checkpoints, state, self.s.keep_checkpoints)
            self.saved_step = self.step
        self._observe(record)
        return record

    def _observe(self, r: StepRecord) -> None:
        m = self.metrics
        m.step.set(r.step)
        m.loss.set(r.loss)
        m.reward_mean.set(r.reward_mean)
        m.reward_std.set(r.reward_std)
        m.kl.set(r.kl)
        m.clip_fraction.set(r.clip_fraction)
        m.grad_norm.set(r.grad_norm)
        m.staleness.set(r.staleness_mean)
        m.tokens_per_second.set(r.tokens_per_second)
        if r.mismatch is not None:
            m.mismatch_kl.set(r.mismatch.kl)
            m.mismatch_abs_mean.set(r.mismatch.abs_mean)
            m.mismatch_abs_max.set(r.mismatch.abs_max)
            m.mismatch_ratio_outside.set(r.mismatch.ratio_outside)
        m.mismatch_checked_share.set(r.mismatch.share or 0.0 if r.mismatch is not None else 0.0)
        m.tokens.inc(r.tokens)
        m.step_seconds.observe(r.step_seconds)
        self.recent_rewards.append(r.reward_mean)
        self.status = self.status.model_copy(update={
            "phase": "training", "step": r.step, "weight_version": self.weight_version, "reward_mean": r.reward_mean,
            "reward_recent": statistics.fmean(self.recent_rewards), "loss": r.loss, "staleness": r.staleness_mean,
            "sync_seconds": r.sync_seconds if r.sync_seconds is not None else self.status.sync_seconds})
        log.info("step %d/%d reward %.3f loss %.4f clip %.3f stale %.1f sync %s", r.step, self.s.steps, r.reward_mean, r.loss,
                 r.clip_fraction, r.staleness_mean, f"{r.sync_seconds:.2f}s" if r.sync_seconds is not None else "-")

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
        await asyncio.to_thread(self._prune_evals)
        if self.step == 0:
            self.status.eval_before = await self._eval_round("before")
            if self.status.eval_before is not None:
                eval_before_path.write_text(self.status.eval_before.model_dump_json())
        elif eval_before_path.exists():
            self.status.eval_before = EvalResult.model_validate_json(eval_before_path.read_text())
        self.status.phase = "training"
        while self.step < self.s.steps:
            await self.train_one()
            if self.s.eval_every and self.step % self.s.eval_every == 0 and self.step < self.s.steps:
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
                            sync_mode=self.s.sync_mode, eval_before=self.status.eval_before, eval_after=self.status.eval_after,
                            model=str(self.s.model), seconds=time.monotonic() - self.started, evals=evals,
                            model_info=model_info(str(self.s.model), self.trainer_dtype, sorted(self.served_dtypes)), seed=self.s.seed,
                            agent=trials.agent if trials else None, merge_share=trials.merge_share if trials else None,
                            trial_stats=trials)
        write_summary(self.run_dir / "summary.json", summary)
        if self.tracker is not None:
            self.tracker.finish(summary)
        if records:
            plot(records, self.run_dir / "reward.png", f"GRPO on {Path(self.s.model).name} ({self.s.sync_mode} sync)", evals)
        self.status.phase = "done"
        log.info("done: %s", summary.model_dump_json())

    async def aclose(self) -> None:
        await self.batcher.aclose()
        if self.publisher is not None:
            await self.publisher.aclose()
