"""Training–inference mismatch: how far vLLM's logprobs of the sampled tokens are from the trainer's
own under the same weights.

With identical weights the two differ only by numerics (kernels, dtype): a mean k3 KL around
1e-3 in bf16, ~1e-6 in float32. A jump to ~1 means the replicas serve something else than the
trainer holds (a broken weight sync, a wrong adapter): prime-rl found a reload that wrote
garbage only through this number. Every token is compared with the trainer's logprob under the
very version that sampled it: the step's own forward gives that for free on rows of the current
version, and the trainer keeps the versions still in flight (``VersionStore``) to score a sample
of older rows under theirs. Comparing an older token with today's weights would measure the
policy's own change, not a mismatch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from pydantic import BaseModel

if TYPE_CHECKING:
    from rlstack.trainer.distributed import DistContext

RATIO_BAND = (0.5, 2.0)


class Mismatch(BaseModel):
    kl: float
    """Mean k3 estimate of KL(inference || trainer): exp(d) - d - 1 with d = trainer - inference logprob."""
    abs_mean: float
    abs_max: float
    ratio_outside: float
    """Share of tokens whose trainer/inference probability ratio lies outside RATIO_BAND."""
    tokens: int
    share: float | None = None
    """Checked tokens over the step's trained tokens: how much of what was trained this figure covers."""


class MismatchAccumulator:
    """Sums over micro-batches, so the step computes no extra forward pass."""

    def __init__(self) -> None:
        self.kl = self.abs_sum = self.abs_max = 0.0
        self.outside = self.tokens = 0

    def add(self, logprobs: torch.Tensor, inference_logprobs: torch.Tensor, mask: torch.Tensor) -> None:
        if not bool(mask.any()):
            return
        d = (logprobs.detach().float() - inference_logprobs.float())[mask]
        self.kl += float((torch.exp(d) - d - 1).sum())
        self.abs_sum += float(d.abs().sum())
        self.abs_max = max(self.abs_max, float(d.abs().max()))
        low, high = RATIO_BAND
        ratio = torch.exp(d)
        self.outside += int(((ratio < low) | (ratio > high)).sum())
        self.tokens += int(d.numel())

    def reduce(self, ctx: DistContext, trained_tokens: int | None = None) -> Mismatch | None:
        """The result over every rank's tokens (each rank saw its own share of the batch)."""
        from rlstack.trainer.distributed import all_reduce

        if ctx.world_size > 1:
            self.kl, self.abs_sum, outside, tokens = all_reduce(ctx, [self.kl, self.abs_sum, self.outside, self.tokens])
            self.outside, self.tokens = int(outside), int(tokens)
            self.abs_max = all_reduce(ctx, [self.abs_max], op="max")[0]
        return self.result(trained_tokens)

    def result(self, trained_tokens: int | None = None) -> Mismatch | None:
        if self.tokens == 0:
            return None
        share = min(1.0, self.tokens / trained_tokens) if trained_tokens else None
        return Mismatch(kl=self.kl / self.tokens, abs_mean=self.abs_sum / self.tokens, abs_max=self.abs_max,
                        ratio_outside=self.outside / self.tokens, tokens=self.tokens, share=share)
