"""Attention for the trainer's rows without a T x T mask: packed rows by their sequence bounds.

transformers turns packed position ids into a dense ``(batch, 1, T, T)`` mask under ``sdpa``,
which keeps SDPA off its flash kernel and grows memory with T² (0.40x a plain step's tokens/s
on an H200 at 16k-token rows). This module registers an attention function, ``rlstack_varlen``,
that takes each packed row's cumulative sequence bounds instead (``cu_seq_lens_q``, the keyword
transformers already passes through every decoder layer for flash-attn):

- on CUDA in bf16/fp16, torch's own ``varlen_attn`` (the flash-attention varlen kernel built
  into torch: no extra wheel, forward and backward);
- rows of long sequences (``LONG_SEQUENCES``), and everywhere else (CPU, float32): causal SDPA
  over each sequence of the row in turn: exact, memory linear in the row, cuDNN's attention on
  a Hopper GPU, and what a CPU does fastest (docs/trainer.md).

Rows of prefix trees (``prefix_tree``, a ``TreeLayout``) hold each shared prefix once: every node
attends to its ancestors' keys and values, then its own causally. On CUDA in bf16/fp16 that is the
same varlen kernel with the keys gathered per node (its causal mask is aligned to the end of the
keys); elsewhere SDPA node by node, with a causal mask aligned the same way.

Rows without bounds (padded rows) are right-padded by construction (``batch.to_tensors``), so
causal attention never lets a real token see a pad: plain causal SDPA, flash on a GPU, with no
mask at all. Because the name has no mask function registered, transformers skips building one.
"""

from __future__ import annotations

import inspect
from functools import cache
from itertools import accumulate

import torch
import torch.nn.functional as F

from rlstack.trainer.prefix_tree import TreeLayout

NAME = "rlstack_varlen"
"""The ``attn_implementation`` the trainer loads its policy with (``TrainerSettings.attention``)."""


def sequence_bounds(lengths: list[int]) -> torch.Tensor:
    """Cumulative bounds ``[0, l0, l0+l1, ...]`` (int32, as flash kernels take them)."""
    out = torch.zeros(len(lengths) + 1, dtype=torch.int32)
    out[1:] = torch.tensor(lengths, dtype=torch.int32).cumsum(0)
    return out


def lengths_from_positions(position_ids: torch.Tensor) -> list[int] | None:
    """Sequence lengths of a packed row ``[1, T]`` whose positions restart at 0 per sequence; None for
    a row of one sequence. Reads the positions on the host: once per forward, never per layer."""
    if position_ids.shape[0] != 1:
        return None
    flat = position_ids.reshape(-1).cpu()
    starts = torch.nonzero(flat == 0).flatten().tolist()
    if len(starts) < 2:
        return None
    ends = starts[1:] + [flat.numel()]
    return [e - s for s, e in zip(starts, ends)]


@cache
def _varlen_kernel():  # noqa: ANN202 - torch's varlen_attn and how to call it for causal GQA
    """torch's varlen_attn and the keywords this torch version takes (its signature moved between releases)."""
    try:
        from torch.nn.attention.varlen import varlen_attn
    except ImportError:
        return None
    params = inspect.signature(varlen_attn).parameters
    causal = {"is_causal": True} if "is_causal" in params else {"window_size": (-1, 0)}
    return varlen_attn, causal, "enable_gqa" in params


LONG_SEQUENCES = 4096
"""Mean sequence length from which a packed row goes through SDPA one sequence at a time even where
the varlen kernel is available: SDPA then dispatches to cuDNN's Hopper attention, faster than the
flash-attention-2 kernel behind torch's varlen_attn, and a few long calls cost no launch overhead
(docs/trainer.md has the measurement)."""


def varlen_available(query: torch.Tensor) -> bool:
    return query.is_cuda and query.dtype in (torch.bfloat16, torch.float16) and _varlen_kernel() is not None


def _autocast(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Under autocast, q/k/v leave the rotary embedding in float32; SDPA would cast them itself, a
    custom kernel must be handed the autocast dtype."""
    kind = query.device.type
    if torch.is_autocast_enabled(kind) and query.dtype == torch.float32:
        dtype = torch.get_autocast_dtype(kind)
        return query.to(dtype), key.to(dtype), value.to(dtype)
    return query, key, value


def _per_sequence(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, bounds: list[int], scale: float | None) -> torch.Tensor:
    """Causal SDPA on each sequence of a packed row; ``[1, H, T, D]`` in, ``[1, T, H, D]`` out."""
    parts = [F.scaled_dot_product_attention(query[:, :, lo:hi], key[:, :, lo:hi], value[:, :, lo:hi], is_causal=True, scale=scale,
                                            enable_gqa=True)
             for lo, hi in zip(bounds[:-1], bounds[1:]) if hi > lo]
    return torch.cat(parts, dim=2).transpose(1, 2)


def _kernel_call(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_q: torch.Tensor, cu_k: torch.Tensor, max_q: int, max_k: int,
                 scale: float | None) -> torch.Tensor:
    """torch's varlen kernel, causal, on ``[T, H, D]`` tensors (grouped KV heads expanded where it cannot take them)."""
    kernel, causal, gqa = _varlen_kernel()
    extra = {}
    if q.shape[1] != k.shape[1]:
        if gqa:
            extra["enable_gqa"] = True
        else:
            groups = q.shape[1] // k.shape[1]
            k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
    return kernel(q, k, v, cu_q, cu_k, max_q, max_k, scale=scale, **causal, **extra).unsqueeze(0)


def _varlen(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, bounds: torch.Tensor, longest: int,
            scale: float | None) -> torch.Tensor:
    q, k, v = (t[0].transpose(0, 1) for t in (query, key, value))  # [T, H, D]
    bounds = bounds.to(device=q.device, dtype=torch.int32)
    return _kernel_call(q, k, v, bounds, bounds, longest, longest, scale)


def _tree(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, tree: TreeLayout, scale: float | None) -> torch.Tensor:
    """Each node over its ancestors' keys and its own; ``[1, H, T, D]`` in, ``[1, T, H, D]`` out."""
    if varlen_available(query):
        k, v = (t[0].transpose(0, 1).index_select(0, tree.key_index) for t in (key, value))
        return _kernel_call(query[0].transpose(0, 1), k, v, tree.cu_q, tree.cu_k, tree.max_q, tree.max_k, scale)
    parts, q_lo, k_lo = [], 0, 0
    for n_q, n_k in zip(tree.node_lengths, tree.key_lengths):
        q = query[:, :, q_lo:q_lo + n_q]
        if n_k == n_q:  # a root: its own keys only
            k, v, mask, causal = key[:, :, q_lo:q_lo + n_q], value[:, :, q_lo:q_lo + n_q], None, n_q > 1
        else:
            index = tree.key_index[k_lo:k_lo + n_k]
            k, v = key.index_select(2, index), value.index_select(2, index)
            mask = torch.ones(n_q, n_k, dtype=torch.bool, device=query.device).tril(n_k - n_q)
            causal = False
        parts.append(F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal, scale=scale, enable_gqa=True))
        q_lo, k_lo = q_lo + n_q, k_lo + n_k
    return torch.cat(parts, dim=2).transpose(1, 2)


def varlen_attention(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,  # noqa: ARG001 - transformers' signature
                     attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                     cu_seq_lens_q: torch.Tensor | None = None, sequence_lengths: list[int] | None = None,
                     prefix_tree: TreeLayout | None = None, **kwargs) -> tuple[torch.Tensor, None]:
    """transformers' attention signature: ``query [B, H, T, D]``, ``key``/``value [B, H_kv, T, D]``;
    returns ``[B, T, H, D]``. A packed row comes with its lengths on the host (``sequence_lengths``)
    and its bounds on the device (``cu_seq_lens_q``), both from ``PolicyLogprobs``; a row without
    them is one causal sequence."""
    if attention_mask is not None:
        raise ValueError(f"{NAME} takes no attention mask: pack rows (sequence bounds) or right-pad them")
    if dropout:
        raise ValueError(f"{NAME} has no dropout (the trainer's models have none)")
    if prefix_tree is not None:
        return _tree(*_autocast(query, key, value), prefix_tree, scaling), None
    if sequence_lengths is None:
        out = F.scaled_dot_product_attention(query, key, value, is_causal=query.shape[2] > 1, scale=scaling, enable_gqa=True)
        return out.transpose(1, 2), None
    if query.shape[0] != 1:
        raise ValueError(f"{NAME}: a packed row is one row of sequences (batch 1), got batch {query.shape[0]}")
    query, key, value = _autocast(query, key, value)
    long_rows = sum(sequence_lengths) >= LONG_SEQUENCES * len(sequence_lengths)
    if varlen_available(query) and not long_rows:
        return _varlen(query, key, value, cu_seq_lens_q, max(sequence_lengths), scaling), None
    return _per_sequence(query, key, value, list(accumulate(sequence_lengths, initial=0)), scaling), None


def register() -> str:
    """Make ``NAME`` a valid ``attn_implementation`` (idempotent); returns it."""
    from transformers import AttentionInterface

    AttentionInterface.register(NAME, varlen_attention)
    return NAME
