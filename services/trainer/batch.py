"""An Atropos batch (list of scored groups) as padded training tensors.

Sequence i predicts token t+1 from tokens <= t, so every per-token quantity is shifted by one:
targets are tokens[1:], the loss mask is masks[1:] != -100, and the inference logprob of
target t+1 is inference_logprobs[t+1] (vLLM reports each sampled token's own logprob).

A group without ``inference_logprobs`` (every unmodified Atropos env) has no behaviour policy to
take the ratio against: its rows are marked ``on_policy`` and the step takes their ratio against
the trainer's own logprobs at the step's start (plain on-policy GRPO), never against zeros.

A row's weight version is the one that sampled all its trained tokens (``sampling_versions``, as
the replica reported it); a row whose tokens span a sync has none, so the mismatch check, which
must score each token under the weights that sampled it, leaves it out (and it is counted).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from rlstack.common.contracts.atropos import MASKED
from rlstack.trainer.loss import group_advantages


def member_advantages(scores: torch.Tensor, trials: list[int] | None) -> torch.Tensor:
    """GRPO advantages over the group's members: a trial that brought several sequences (side calls,
    sub-agents, compacted segments) counts once in the baseline, and each of its rows gets its advantage."""
    if trials is None:
        return group_advantages(scores)
    index = torch.tensor(trials)
    per_member = torch.zeros(int(index.max()) + 1).index_copy(0, index, scores)  # a member's rows share one score
    return group_advantages(per_member)[index]


def row_versions(group: dict[str, Any]) -> list[list[int] | None]:
    """Per row, the versions that sampled it: the group's ``sampling_versions``, else (an env that
    sends only the group's label) that label for every row, else unknown."""
    sampled = group.get("sampling_versions")
    if sampled:
        return [list(v) for v in sampled]
    label = group.get("weight_version")
    return [[label] if label is not None else None for _ in group["tokens"]]


@dataclass
class TrainBatch:
    input_ids: torch.Tensor  # [B, T] padded tokens[:-1]
    targets: torch.Tensor  # [B, T] tokens[1:]
    loss_mask: torch.Tensor  # [B, T] bool
    inference_logprobs: torch.Tensor  # [B, T]
    advantages: torch.Tensor  # [B]
    attention_mask: torch.Tensor  # [B, T]
    rewards: torch.Tensor  # [B]
    weight_versions: list[int | None]
    """Per row, the one version that sampled every trained token; None: unknown, or it spans a sync."""
    on_policy: torch.Tensor | None = None  # [B] bool: no inference logprobs were sent for the row
    spanning_rows: int = 0
    """Rows whose tokens several versions sampled."""

    def __post_init__(self) -> None:
        if self.on_policy is None:
            self.on_policy = torch.zeros(self.input_ids.shape[0], dtype=torch.bool)

    @property
    def trained_tokens(self) -> int:
        return int(self.loss_mask.sum())


def to_tensors(groups: list[dict[str, Any]], pad_id: int = 0) -> TrainBatch:
    rows, advantages, rewards, versions, on_policy = [], [], [], [], []
    for group in groups:
        scores = torch.tensor(group["scores"], dtype=torch.float32)
        sent = group.get("advantages")
        if sent and all(len(a) == 1 for a in sent):
            adv = torch.tensor([a[0] for a in sent])
        else:
            adv = member_advantages(scores, group.get("trials"))
        sampled = group.get("inference_logprobs")
        sampled_by = row_versions(group)
        for i, tokens in enumerate(group["tokens"]):
            logprobs = sampled[i] if sampled else [0.0] * len(tokens)
            on_policy.append(not sampled)
            rows.append((tokens, group["masks"][i], logprobs))
            advantages.append(float(adv[i]))
            rewards.append(float(scores[i]))
            versions.append(sampled_by[i])
    width = max(len(t) for t, _, _ in rows) - 1
    size = len(rows)
    input_ids = torch.full((size, width), pad_id, dtype=torch.long)
    targets = torch.full((size, width), pad_id, dtype=torch.long)
    loss_mask = torch.zeros((size, width), dtype=torch.bool)
    inference = torch.zeros((size, width), dtype=torch.float32)
    attention = torch.zeros((size, width), dtype=torch.long)
    for i, (tokens, masks, logprobs) in enumerate(rows):
        n = len(tokens) - 1
        input_ids[i, :n] = torch.tensor(tokens[:-1])
        targets[i, :n] = torch.tensor(tokens[1:])
        loss_mask[i, :n] = torch.tensor([m != MASKED for m in masks[1:]])
        inference[i, :n] = torch.tensor(logprobs[1:], dtype=torch.float32)
        attention[i, :n] = 1
    return TrainBatch(input_ids, targets, loss_mask, inference, torch.tensor(advantages), attention,
                      torch.tensor(rewards), [v[0] if v and len(v) == 1 else None for v in versions],
                      torch.tensor(on_policy, dtype=torch.bool), spanning_rows=sum(v is not None and len(v) > 1 for v in versions))
