"""The trainer's Prometheus metrics (the training dashboard queries these names)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


class TrainerMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.step = Gauge("rlstack_trainer_step", "Optimiser steps taken", registry=registry)
        self.weight_version = Gauge("rlstack_trainer_weight_version", "Version of the weights last published", registry=registry)
        self.loss = Gauge("rlstack_trainer_loss", "GRPO loss of the last step", registry=registry)
        self.reward_mean = Gauge("rlstack_trainer_reward_mean", "Mean reward of the last batch", registry=registry)
        self.reward_std = Gauge("rlstack_trainer_reward_std", "Reward standard deviation of the last batch", registry=registry)
        self.kl = Gauge("rlstack_trainer_kl", "KL estimate to the reference of the last step", registry=registry)
        self.clip_fraction = Gauge("rlstack_trainer_clip_fraction", "Share of trained tokens whose ratio was clipped", registry=registry)
        self.grad_norm = Gauge("rlstack_trainer_grad_norm", "Gradient norm before clipping", registry=registry)
        self.staleness = Gauge("rlstack_trainer_staleness", "Mean policy versions between sampling and training, last batch", registry=registry)
        self.tokens_per_second = Gauge("rlstack_trainer_tokens_per_second", "Trained tokens per second of the last step", registry=registry)
        self.tokens = Counter("rlstack_trainer_tokens", "Trained tokens", registry=registry)
        self.step_seconds = Histogram("rlstack_trainer_step_seconds", "Seconds per optimiser step", registry=registry,
                                      buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120))
        self.sync_seconds = Histogram("rlstack_trainer_sync_seconds", "Seconds per weight sync, pause to resume", registry=registry,
                                      buckets=(0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60))
        self.batch_wait_seconds = Counter("rlstack_trainer_batch_wait_seconds", "Seconds spent waiting for batches", registry=registry)
