"""One GRPO optimisation step on a batch: micro-batched forward/backward, clip, AdamW step.

Device-agnostic (tensors follow the model). The same function runs in a plain process and on
every rank of a torchrun job whose policy FSDP2 shards (``rlstack.trainer.distributed``): each
rank takes its token-balanced share of the batch (``rlstack.trainer.packing``), gradients are
reduced by FSDP, and the statistics summed over ranks. bf16 autocast (on CUDA by default, on a
CPU when asked) when the weights are not already bf16 through FSDP's mixed precision.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from rlstack.trainer.batch import TrainBatch
from rlstack.trainer.distributed import DistContext, all_reduce, is_sharded
from rlstack.trainer.logprobs import DEFAULT_CHUNK, PolicyLogprobs
from rlstack.trainer.loss import GRPOLossConfig, grpo_loss
from rlstack.trainer.mismatch import Mismatch, MismatchAccumulator
from rlstack.trainer.packing import micro_batches
from rlstack.trainer.prefix_tree import TreeLayout


@dataclass
class StepStats:
    loss: float
    grad_norm: float
    clip_fraction: float
    kl: float
    ratio_mean: float
    is_weight_mean: float
    """Mean truncated importance weight min(p_trainer / p_inference, tis_cap) (1.0 without ``tis_cap``)."""
    is_capped: float
    """Share of trained tokens whose importance weight the cap cut."""
    tokens: int
    seconds: float
    reward_mean: float
    reward_std: float
    mismatch: Mismatch | None = None
    """Inference vs trainer logprobs on the rows checked this step: those sampled by the weights being
    trained, and a sample of older rows scored under their own version (None if no row was checked)."""


def as_policy(model: torch.nn.Module, chunk: int = DEFAULT_CHUNK) -> PolicyLogprobs:
    """The logprob module around a causal LM (a model already wrapped is returned as is)."""
    return model if isinstance(model, PolicyLogprobs) else PolicyLogprobs(model, chunk)


def policy_logprobs(model: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor | None, targets: torch.Tensor,
                    mask: torch.Tensor | None = None, position_ids: torch.Tensor | None = None,
                    chunk: int = DEFAULT_CHUNK, sequence_lengths: list[int] | None = None, cu_seq_lens: torch.Tensor | None = None,
                    trained_index: torch.Tensor | None = None, tree: TreeLayout | None = None) -> torch.Tensor:
    """log p(target) per position ``[B, T]``; with ``mask``, only the trained positions are
    projected onto the vocabulary (the rest are 0), ``chunk`` tokens at a time."""
    return as_policy(model, chunk)(input_ids, targets, mask, attention_mask=attention_mask, position_ids=position_ids,
                                   sequence_lengths=sequence_lengths, cu_seq_lens=cu_seq_lens, trained_index=trained_index, tree=tree)


def bf16_autocast(policy: torch.nn.Module, device: torch.device, bf16: bool | None) -> bool:
    """Whether a forward autocasts to bf16: asked for (None: on a CUDA GPU with bf16), and the policy not
    sharded by FSDP, whose mixed precision already holds bf16 parameters."""
    wanted = device.type == "cuda" if bf16 is None else bf16
    if device.type == "cuda" and not torch.cuda.is_bf16_supported():
        wanted = False  # a GPU before Ampere: float32, as before
    return wanted and not is_sharded(policy)


def clip_gradients(parameters: list[torch.nn.Parameter], max_norm: float) -> torch.Tensor:
    """Global grad-norm clipping; with sharded (DTensor) gradients the norm is reduced over ranks first.
    Returns the norm as a tensor: reading it waits for the GPU, so the caller does that last."""
    grads = [p.grad for p in parameters if p.grad is not None]
    total = torch.nn.utils.get_total_norm(grads, 2.0)
    if hasattr(total, "full_tensor"):
        total = total.full_tensor()
    torch.nn.utils.clip_grads_with_norm_(parameters, max_norm, total)
    return total


def grpo_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, batch: TrainBatch, config: GRPOLossConfig,
              micro_batch_size: int = 8, max_grad_norm: float = 1.0, current_version: int | None = None,
              pack_tokens: int | None = None, ctx: DistContext | None = None,
              mismatch: MismatchAccumulator | None = None, share_prefix: int | None = None, bf16: bool | None = None) -> StepStats:
    """``current_version`` is the weights version the model holds; rows sampled by it measure the mismatch
    (added to ``mismatch`` when given: it may already hold older rows scored under their own weights).

    ``pack_tokens`` packs sequences into rows of at most that many tokens instead of padding
    ``micro_batch_size`` rows; ``share_prefix`` then lays sequences sharing that many leading tokens or
    more out as prefix trees (each prefix computed once). ``bf16``: compute under bf16 autocast over the
    float32 weights (None: on CUDA only). Under torchrun pass every rank's ``ctx``: all ranks call this with
    the same ``batch``, and all get the same statistics back.
    """
    start = time.perf_counter()
    ctx = ctx or DistContext()
    policy = as_policy(model)
    device = next(policy.parameters()).device
    policy.train()
    optimizer.zero_grad(set_to_none=True)
    total_tokens = max(1, batch.trained_tokens)
    # FSDP averages gradients over ranks, while each rank's loss is already its share of the
    # whole batch's token mean: scale back by the world size.
    scale = ctx.world_size / total_tokens
    keys = ("loss", "clip_fraction", "kl", "ratio_mean", "is_weight_mean", "is_capped")
    sums = torch.zeros(len(keys), dtype=torch.float64, device=device)  # summed on the device: no wait per micro-batch
    autocast = bf16_autocast(policy, device, bf16)
    mismatch = mismatch if mismatch is not None else MismatchAccumulator()
    for part in micro_batches(batch, ctx.rank, ctx.world_size, micro_batch_size, pack_tokens, current_version, share_prefix):
        tokens = part.tokens
        if tokens == 0 and ctx.world_size == 1:
            continue  # a lone process skips rows with nothing trained; ranks must stay in step
        part = part.to(device)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=autocast):
            logprobs = policy(part.input_ids, part.targets, part.loss_mask, attention_mask=part.attention_mask,
                              position_ids=part.position_ids, sequence_lengths=part.sequence_lengths, cu_seq_lens=part.cu_seq_lens,
                              trained_index=part.trained_index, tree=part.tree, trained_rows=part.trained_rows)
        # Rows sent without inference logprobs: the behaviour policy is the trainer's own at the
        # step's start, which is this forward's value (the weights change only after the step).
        behaviour = torch.where(part.on_policy, logprobs.detach(), part.inference_logprobs)
        loss, stats = grpo_loss(logprobs, behaviour, part.advantages, part.loss_mask, config)
        mismatch.add(logprobs, part.inference_logprobs, part.loss_mask & part.same_weights)
        # Token-mean over the whole batch: weight each micro-batch by its share of trained tokens.
        (loss * tokens * scale).backward()
        sums += torch.stack([loss.detach(), *(stats[k] for k in keys[1:])]).to(torch.float64) * (tokens / total_tokens)
    grad_norm = clip_gradients([p for p in policy.parameters() if p.requires_grad], max_grad_norm)
    optimizer.step()
    grad_norm = float(grad_norm)
    reduced = dict(zip(keys, all_reduce(ctx, sums.tolist())))
    return StepStats(loss=reduced["loss"], grad_norm=grad_norm, clip_fraction=reduced["clip_fraction"], kl=reduced["kl"],
                     ratio_mean=reduced["ratio_mean"], is_weight_mean=reduced["is_weight_mean"], is_capped=reduced["is_capped"],
                     tokens=batch.trained_tokens, seconds=time.perf_counter() - start,
                     reward_mean=float(batch.rewards.mean()), reward_std=float(batch.rewards.std(unbiased=False)),
                     mismatch=mismatch.reduce(ctx, batch.trained_tokens))
