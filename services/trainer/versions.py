"""The weights of the versions still in flight, so that older rows' mismatch is measured under
the version that sampled them (``mismatch``).

In an async run most groups were sampled one or more versions ago: only comparing them with the
weights that generated them separates a serving fault (a bad sync, a wrong adapter) from the
policy's own change. ``VersionStore`` keeps a host-memory copy of the trainable parameters of the
last ``keep`` published versions (this rank's shard under torchrun); ``score_sample`` swaps a
version into the live parameters, computes the logprobs of a few of its rows without gradients,
and swaps the current weights back before the step. Cost: one copy of the trainable parameters
per kept version in host memory, and per step two parameter copies plus a no-grad forward of the
sample per version checked (``bench/mismatch.py`` measures it beside the step).
"""

from __future__ import annotations

import random
from collections import OrderedDict
from typing import TYPE_CHECKING

import torch

from rlstack.trainer.mismatch import MismatchAccumulator
from rlstack.trainer.step import bf16_autocast

if TYPE_CHECKING:
    from rlstack.trainer.batch import TrainBatch
    from rlstack.trainer.distributed import DistContext


def _local(p: torch.Tensor) -> torch.Tensor:
    """The tensor this rank holds: its shard of a DTensor (FSDP2), else the parameter itself."""
    return p.to_local() if hasattr(p, "to_local") else p


class VersionStore:
    def __init__(self, keep: int) -> None:
        self.keep = keep
        self._versions: OrderedDict[int, list[torch.Tensor]] = OrderedDict()

    def __contains__(self, version: object) -> bool:
        return version in self._versions

    @property
    def versions(self) -> list[int]:
        return list(self._versions)

    def remember(self, version: int, parameters: list[torch.nn.Parameter]) -> None:
        """Copy the trainable parameters as ``version``; the oldest beyond ``keep`` are forgotten."""
        if self.keep <= 0:
            return
        with torch.no_grad():
            self._versions[version] = [_local(p).detach().to("cpu", copy=True) for p in parameters]
        self._versions.move_to_end(version)
        while len(self._versions) > self.keep:
            self._versions.popitem(last=False)

    def swap_in(self, version: int, parameters: list[torch.nn.Parameter]) -> list[torch.Tensor]:
        """Load ``version`` into the live parameters; returns what they held (for ``restore``)."""
        saved = []
        with torch.no_grad():
            for p, kept in zip(parameters, self._versions[version], strict=True):
                local = _local(p)
                saved.append(local.detach().clone())
                local.copy_(kept)
        return saved

    @staticmethod
    def restore(parameters: list[torch.nn.Parameter], saved: list[torch.Tensor]) -> None:
        with torch.no_grad():
            for p, held in zip(parameters, saved, strict=True):
                _local(p).copy_(held)


def pick_rows(batch: TrainBatch, current_version: int | None, store: VersionStore, sample: int, seed: int) -> dict[int, list[int]]:
    """Up to ``sample`` rows of older, kept versions, with inference logprobs and trained tokens,
    by version. The same on every rank (seeded), so ranks run the same forwards."""
    trained = batch.loss_mask.sum(-1).tolist()
    candidates = [i for i, v in enumerate(batch.weight_versions)
                  if v is not None and v != current_version and v in store and not bool(batch.on_policy[i]) and trained[i] > 0]
    chosen = sorted(random.Random(seed).sample(candidates, min(sample, len(candidates))))
    out: dict[int, list[int]] = {}
    for i in chosen:
        out.setdefault(batch.weight_versions[i], []).append(i)
    return out


def score_sample(policy: torch.nn.Module, batch: TrainBatch, rows: dict[int, list[int]], store: VersionStore,
                 acc: MismatchAccumulator, micro_batch_size: int, ctx: DistContext, bf16: bool | None = None) -> None:
    """Add the chosen rows' mismatch, each under its own version, to ``acc``.

    Every rank runs the same forwards (FSDP gathers each layer from every rank), and only rank 0
    counts them: the step's reduction sums the accumulators over ranks. ``bf16``: as the step computes
    (``step.bf16_autocast``), so an older row's figure reads the same numerics as a current one's.
    """
    if not rows:
        return
    device = next(policy.parameters()).device
    autocast = bf16_autocast(policy, device, bf16)
    parameters = [p for p in policy.parameters() if p.requires_grad]
    was_training = policy.training
    policy.eval()
    try:
        for version, idx in rows.items():
            saved = store.swap_in(version, parameters)
            try:
                with torch.no_grad(), torch.autocast(device.type, dtype=torch.bfloat16, enabled=autocast):
                    for lo in range(0, len(idx), micro_batch_size):
                        part = torch.tensor(idx[lo:lo + micro_batch_size])
                        width = max(1, int(batch.attention_mask[part].sum(-1).max()))
                        mask = batch.loss_mask[part, :width].to(device)
                        logprobs = policy(batch.input_ids[part, :width].to(device), batch.targets[part, :width].to(device), mask,
                                          attention_mask=batch.attention_mask[part, :width].to(device))
                        if ctx.is_main:
                            acc.add(logprobs, batch.inference_logprobs[part, :width].to(device), mask)
            finally:
                store.restore(parameters, saved)
    finally:
        policy.train(was_training)
