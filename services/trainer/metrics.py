"""The trainer's Prometheus metrics (the training dashboard queries these names)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info

from rlstack.trainer.sync import SyncReport

if TYPE_CHECKING:
    from rlstack.trainer.report import StepRecord


class TrainerMetrics:
    def __init__(self, registry: CollectorRegistry, policy: str | None = None) -> None:
        """``policy``: the policy this trainer trains, as ``rlstack_trainer_info{policy}`` (the other
        series stay unlabelled: one process trains one policy, and a scrape target names its pod)."""
        if policy is not None:
            Info("rlstack_trainer", "The policy this trainer trains (its replicas' served name)",
                 registry=registry).info({"policy": policy})
        self.step = Gauge("rlstack_trainer_step", "Optimiser steps taken", registry=registry)
        self.weight_version = Gauge("rlstack_trainer_weight_version", "Version of the weights last published", registry=registry)
        self.loss = Gauge("rlstack_trainer_loss", "GRPO loss of the last step", registry=registry)
        self.reward_mean = Gauge("rlstack_trainer_reward_mean", "Mean reward of the last batch", registry=registry)
        self.reward_std = Gauge("rlstack_trainer_reward_std", "Reward standard deviation of the last batch", registry=registry)
        self.kl = Gauge("rlstack_trainer_kl", "KL estimate to the reference of the last step", registry=registry)
        self.clip_fraction = Gauge("rlstack_trainer_clip_fraction", "Share of trained tokens whose ratio was clipped", registry=registry)
        self.grad_norm = Gauge("rlstack_trainer_grad_norm", "Gradient norm before clipping", registry=registry)
        self.staleness = Gauge("rlstack_trainer_staleness", "Mean policy versions between sampling and training, last batch", registry=registry)
        self.eval_score = Gauge("rlstack_trainer_eval_score", "Held-out score of the last evaluation (accuracy or pass rate)",
                                registry=registry)
        self.tokens_per_second = Gauge("rlstack_trainer_tokens_per_second", "Trained tokens per second of the last step", registry=registry)
        self.tokens = Counter("rlstack_trainer_tokens", "Trained tokens", registry=registry)
        self.step_seconds = Histogram("rlstack_trainer_step_seconds", "Seconds per optimiser step", registry=registry,
                                      buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120))
        self.sync_seconds = Histogram("rlstack_trainer_sync_seconds", "Seconds per weight sync, pause to resume", registry=registry,
                                      buckets=(0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60))
        self.sync_verify_seconds = Histogram("rlstack_trainer_sync_verify_seconds", "Seconds per served-weights check, all replicas",
                                             registry=registry, buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5))
        self.sync_verify_failures = Counter("rlstack_trainer_sync_verify_failures", "Replicas that failed the served-weights check",
                                            registry=registry)
        self.sync_failures = Counter("rlstack_trainer_sync_replica_failures", "Replicas a sync did not reach or that failed its check",
                                     registry=registry)
        self.sync_probe_gap = Gauge("rlstack_trainer_sync_probe_gap", "Largest mean |Δlogprob| of the probe over replicas, last sync",
                                    registry=registry)
        self.mismatch_kl = Gauge("rlstack_trainer_mismatch_kl", "Mean k3 KL between inference and trainer logprobs, each token under the version that sampled it",
                                 registry=registry)
        self.mismatch_abs_mean = Gauge("rlstack_trainer_mismatch_abs_mean", "Mean |Δlogprob| inference vs trainer, checked tokens",
                                       registry=registry)
        self.mismatch_abs_max = Gauge("rlstack_trainer_mismatch_abs_max", "Max |Δlogprob| inference vs trainer, checked tokens",
                                      registry=registry)
        self.mismatch_ratio_outside = Gauge("rlstack_trainer_mismatch_ratio_outside",
                                            "Share of checked tokens whose trainer/inference ratio is outside [0.5, 2]", registry=registry)
        self.mismatch_checked_share = Gauge("rlstack_trainer_mismatch_checked_share",
                                            "Share of the last step's trained tokens whose mismatch was checked", registry=registry)
        self.batch_wait_seconds = Counter("rlstack_trainer_batch_wait_seconds", "Seconds spent waiting for batches", registry=registry)

    def observe_sync(self, report: SyncReport) -> None:
        self.sync_seconds.observe(report.seconds)
        self.weight_version.set(report.version)
        self.sync_failures.inc(len(report.failed))
        if report.probes:
            self.sync_verify_seconds.observe(report.verify_seconds)
            self.sync_verify_failures.inc(sum(not p.passed for p in report.probes.values()))
            gaps = [p.mean_abs for p in report.probes.values() if p.mean_abs is not None]
            if gaps:
                self.sync_probe_gap.set(max(gaps))

    def observe_step(self, r: StepRecord) -> None:
        """A step's record as gauges (the same numbers as metrics.jsonl's line)."""
        self.step.set(r.step)
        self.loss.set(r.loss)
        self.reward_mean.set(r.reward_mean)
        self.reward_std.set(r.reward_std)
        self.kl.set(r.kl)
        self.clip_fraction.set(r.clip_fraction)
        self.grad_norm.set(r.grad_norm)
        self.staleness.set(r.staleness_mean)
        self.tokens_per_second.set(r.tokens_per_second)
        if r.mismatch is not None:
            self.mismatch_kl.set(r.mismatch.kl)
            self.mismatch_abs_mean.set(r.mismatch.abs_mean)
            self.mismatch_abs_max.set(r.mismatch.abs_max)
            self.mismatch_ratio_outside.set(r.mismatch.ratio_outside)
        self.mismatch_checked_share.set(r.mismatch.share or 0.0 if r.mismatch is not None else 0.0)
        self.tokens.inc(r.tokens)
        self.step_seconds.observe(r.step_seconds)
