"""GRPO's objective, free of any model or device code so it can be checked by hand.

Advantages are group-normalised rewards (or the env's own). The policy ratio is taken per token
against the *inference* logprobs (what vLLM actually sampled with), clipped PPO-style with
separate low/high bounds, and, for negative advantages, dual-clipped: a token the policy has
already moved far from (a stale or off-policy sample) contributes a bounded weight instead of
an exploding one. An optional k3 KL term pulls towards a reference policy. The loss is a mean
over trained tokens of the whole batch, so long answers are not down-weighted.
"""

from __future__ import annotations

import torch

from rlstack.trainer.loss_config import GRPOLossConfig

__all__ = ["GRPOLossConfig", "group_advantages", "grpo_loss", "token_logprobs"]


def group_advantages(scores: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """(score - group mean) / group std; a group whose scores are all equal teaches nothing: zeros."""
    centered = scores - scores.mean()
    std = scores.std(unbiased=False)
    if std < eps:
        return torch.zeros_like(scores)
    return centered / (std + eps)


def token_logprobs(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """log p(target) per position, in float32 whatever the logits' dtype."""
    return torch.log_softmax(logits.float(), dim=-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)


def grpo_loss(
    logprobs: torch.Tensor,
    inference_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    config: GRPOLossConfig,
    ref_logprobs: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Loss over ``[batch, tokens]`` tensors; ``advantages`` is per sequence ``[batch]`` or per token.

    The statistics are 0-dim tensors on the loss's device, so a step can sum them over
    micro-batches without waiting for the GPU after each one."""
    mask = mask.to(logprobs.dtype)
    adv = advantages.unsqueeze(-1) if advantages.dim() == 1 else advantages
    adv = adv.to(logprobs.dtype).expand_as(logprobs)
    if config.tis_cap is None:
        ratio = torch.exp(logprobs - inference_logprobs)
        is_weight, capped = torch.ones_like(logprobs), torch.zeros_like(logprobs)
    else:
        behaviour = logprobs.detach()
        ratio = torch.exp(logprobs - behaviour)
        raw = torch.exp(behaviour - inference_logprobs)
        is_weight, capped = raw.clamp(max=config.tis_cap), (raw > config.tis_cap).to(logprobs.dtype)
    clipped_ratio = ratio.clamp(1 - config.clip_low, 1 + config.clip_high)
    surrogate = torch.minimum(ratio * adv, clipped_ratio * adv)
    surrogate = torch.where(adv < 0, torch.maximum(surrogate, config.dual_clip * adv), surrogate)
    per_token = -surrogate * is_weight
    kl = torch.zeros_like(per_token)
    if ref_logprobs is not None and config.kl_coef > 0:
        delta = ref_logprobs - logprobs
        kl = torch.exp(delta) - delta - 1
        per_token = per_token + config.kl_coef * kl
    tokens = mask.sum().clamp(min=1)
    loss = (per_token * mask).sum() / tokens
    with torch.no_grad():
        clipped = ((ratio > 1 + config.clip_high) & (adv > 0)) | ((ratio < 1 - config.clip_low) & (adv < 0))
        stats = {
            "clip_fraction": (clipped.to(mask.dtype) * mask).sum() / tokens,
            "ratio_mean": (ratio * mask).sum() / tokens,
            "kl": (kl * mask).sum() / tokens,
            "is_weight_mean": (is_weight * mask).sum() / tokens,
            "is_capped": (capped * mask).sum() / tokens,
            "tokens": mask.sum(),
        }
    return loss, stats
