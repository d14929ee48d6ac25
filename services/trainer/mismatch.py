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
    """Sums over micro-batches, so the step computes no extra forward pass. The sums stay on the
    logprobs' device until ``result``: adding a micro-batch never waits for the GPU."""

    def __init__(self) -> None:
        self._sums: torch.Tensor | None = None  # kl, |d|, tokens outside the band, tokens (float64)
        self._max: torch.Tensor | None = None

    def add(self, logprobs: torch.Tensor, inference_logprobs: torch.Tensor, mask: torch.Tensor) -> None:
        d = torch.where(mask, logprobs.detach().float() - inference_logprobs.float(), 0.0)
        low, high = RATIO_BAND
        ratio = torch.exp(d)
        taken = mask.to(torch.float64)
        # exp(d) - d - 1 cancels in float32 at float-noise d (a run read -2.9e-10); below 1e-3 its series
        # d^2/2 (1 + d/3) is exact to float32, with no float64 copy of the step's logprobs.
        k3 = torch.where(d.abs() < 1e-3, 0.5 * d * d * (1 + d / 3), torch.expm1(d) - d)
        sums = torch.stack([(k3 * mask).sum(dtype=torch.float64), d.abs().sum(dtype=torch.float64),
                            (((ratio < low) | (ratio > high)) & mask).sum().to(torch.float64), taken.sum()])
        top = d.abs().amax() if d.numel() else d.new_zeros(())
        self._sums = sums if self._sums is None else self._sums + sums.to(self._sums.device)
        self._max = top if self._max is None else torch.maximum(self._max, top.to(self._max.device))

    def _totals(self) -> tuple[float, float, int, int, float]:
        if self._sums is None:
            return 0.0, 0.0, 0, 0, 0.0
        kl, abs_sum, outside, tokens = self._sums.tolist()
        return kl, abs_sum, int(outside), int(tokens), float(self._max)

    def reduce(self, ctx: DistContext, trained_tokens: int | None = None) -> Mismatch | None:
        """The result over every rank's tokens (each rank saw its own share of the batch)."""
        from rlstack.trainer.distributed import all_reduce

        kl, abs_sum, outside, tokens, abs_max = self._totals()
        if ctx.world_size > 1:
            kl, abs_sum, outside, tokens = all_reduce(ctx, [kl, abs_sum, outside, tokens])
            abs_max = all_reduce(ctx, [abs_max], op="max")[0]
        return _result(kl, abs_sum, int(outside), int(tokens), abs_max, trained_tokens)

    def result(self, trained_tokens: int | None = None) -> Mismatch | None:
        return _result(*self._totals(), trained_tokens)


def _result(kl: float, abs_sum: float, outside: int, tokens: int, abs_max: float, trained_tokens: int | None) -> Mismatch | None:
    if tokens == 0:
        return None
    share = min(1.0, tokens / trained_tokens) if trained_tokens else None
    return Mismatch(kl=kl / tokens, abs_mean=abs_sum / tokens, abs_max=abs_max, ratio_outside=outside / tokens, tokens=tokens,
                    share=share)
