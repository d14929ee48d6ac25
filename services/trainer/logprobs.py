"""log p(target) of the trained tokens, without the whole float32 vocabulary projection at once.

The decoder runs over every position; only trained positions are projected onto the vocabulary
(the prompt is most of an RL row), and those ``chunk`` tokens at a time, each chunk under
activation checkpointing: its float32 logits exist only while that chunk is computed, forward
and again in backward. At 32k trained tokens and a 152k vocabulary the full projection would be
~19 GB in float32; a chunk of 4096 is ~2.5 GB, whatever the sequence length.

``PolicyLogprobs`` is the module the step calls; FSDP2 shards it as the root unit (embeddings,
final norm, head), so the head's weights are gathered for exactly this forward.
"""

from __future__ import annotations

import torch
from torch.utils.checkpoint import checkpoint

from rlstack.trainer.attention import NAME, lengths_from_positions, sequence_bounds
from rlstack.trainer.loss import token_logprobs
from rlstack.trainer.prefix_tree import TreeLayout

DEFAULT_CHUNK = 4096


def _project(head: torch.nn.Module, hidden: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return token_logprobs(head(hidden), targets)


def chunked_logprobs(head: torch.nn.Module, hidden: torch.Tensor, targets: torch.Tensor, chunk: int = DEFAULT_CHUNK) -> torch.Tensor:
    """``token_logprobs(head(hidden), targets)`` for ``hidden [N, H]``, ``chunk`` rows at a time."""
    if hidden.shape[0] == 0 or (hidden.shape[0] <= chunk and not torch.is_grad_enabled()):
        # Nothing trained still runs the head: the (zero) gradient must reach every sharded unit.
        return _project(head, hidden, targets)
    parts = []
    for lo in range(0, hidden.shape[0], chunk):
        h, t = hidden[lo:lo + chunk], targets[lo:lo + chunk]
        if torch.is_grad_enabled():
            parts.append(checkpoint(_project, head, h, t, use_reentrant=False))
        else:
            parts.append(_project(head, h, t))
    return torch.cat(parts)


class PolicyLogprobs(torch.nn.Module):
    """A causal LM returning log p(target) per position ``[B, T]`` (0 where ``mask`` is False).

    Padded rows pass ``attention_mask``; packed rows pass ``position_ids`` restarting at each
    sequence and no attention mask, plus the row's sequence lengths when known (else read once from
    the position ids). Under ``attention.NAME`` the bounds go to a varlen kernel;
    under ``sdpa``/``eager`` transformers builds a block-diagonal causal mask from the position
    ids instead (same values, T x T memory). Models whose head does more than a linear map (logit
    soft-capping) or that expose no decoder take the full-logits path.
    """

    def __init__(self, model: torch.nn.Module, chunk: int = DEFAULT_CHUNK) -> None:
        super().__init__()
        self.model = model
        self.chunk = chunk

    def forward(self, input_ids: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor | None = None,
                attention_mask: torch.Tensor | None = None, position_ids: torch.Tensor | None = None,
                sequence_lengths: list[int] | None = None, cu_seq_lens: torch.Tensor | None = None,
                trained_index: torch.Tensor | None = None, tree: TreeLayout | None = None,
                trained_rows: torch.Tensor | None = None) -> torch.Tensor:
        """``sequence_lengths``: a packed row's lengths (``cu_seq_lens``: their bounds already on the
        device, when the caller has them); ``trained_index``: the flat positions where ``mask`` is True.
        Both worked out on the host spare the GPU a wait.

        ``tree``: a row of prefix trees. ``input_ids``/``position_ids`` are then the tree row, while
        ``targets``, ``mask`` and the result keep the unshared packed layout; ``trained_rows`` are the
        tree row's positions predicting ``trained_index``'s tokens."""
        if tree is not None:
            return self._tree_forward(input_ids, position_ids, targets, mask, tree, trained_index, trained_rows)
        model = self.model
        decoder = getattr(model, "get_decoder", lambda: None)()
        head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
        plain_head = getattr(getattr(model, "config", None), "final_logit_softcapping", None) is None
        kwargs = {"attention_mask": attention_mask, "position_ids": position_ids, "use_cache": False}
        if getattr(getattr(model, "config", None), "_attn_implementation", None) == NAME:
            if attention_mask is not None:
                # The varlen kernel reads no mask: padded rows must be right-padded (causal attention
                # then never reaches a pad). Checked on the device without waiting for it.
                torch._assert_async(~(attention_mask[:, 1:] > attention_mask[:, :-1]).any(), "padded rows must be right-padded")
                kwargs["attention_mask"] = None
            if sequence_lengths is None and position_ids is not None:
                sequence_lengths = lengths_from_positions(position_ids)
        if sequence_lengths is not None:
            if cu_seq_lens is None:
                cu_seq_lens = sequence_bounds(sequence_lengths).to(input_ids.device)
            longest = max(sequence_lengths)
            kwargs.update(sequence_lengths=sequence_lengths, cu_seq_lens_q=cu_seq_lens, cu_seq_lens_k=cu_seq_lens,
                          max_length_q=longest, max_length_k=longest)
        if decoder is None or head is None or not plain_head:
            return token_logprobs(model(input_ids=input_ids, **kwargs).logits, targets)
        hidden = decoder(input_ids=input_ids, **kwargs).last_hidden_state
        if mask is None:
            flat = chunked_logprobs(head, hidden.flatten(0, 1), targets.flatten(), self.chunk)
            return flat.view(targets.shape)
        if trained_index is None:
            picked = chunked_logprobs(head, hidden[mask], targets[mask], self.chunk)
            return torch.zeros(mask.shape, dtype=picked.dtype, device=picked.device).masked_scatter(mask, picked)
        picked = chunked_logprobs(head, hidden.flatten(0, 1).index_select(0, trained_index), targets.flatten().index_select(0, trained_index),
                                  self.chunk)
        return _scatter(picked, trained_index, mask)

    def _tree_forward(self, input_ids: torch.Tensor, position_ids: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor | None,
                      tree: TreeLayout, trained_index: torch.Tensor | None, trained_rows: torch.Tensor | None) -> torch.Tensor:
        model = self.model
        if getattr(getattr(model, "config", None), "_attn_implementation", None) != NAME:
            raise ValueError(f"prefix-tree rows need attn_implementation={NAME!r} (the trainer's attention=varlen)")
        kwargs = {"input_ids": input_ids, "position_ids": position_ids, "attention_mask": None, "use_cache": False, "prefix_tree": tree}
        decoder = getattr(model, "get_decoder", lambda: None)()
        head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
        if decoder is None or head is None or getattr(model.config, "final_logit_softcapping", None) is not None:
            logits = model(**kwargs).logits.index_select(1, tree.hidden_index)  # the row's logits, in the unshared layout
            return token_logprobs(logits, targets)
        hidden = decoder(**kwargs).last_hidden_state.flatten(0, 1)
        if mask is None:
            return chunked_logprobs(head, hidden.index_select(0, tree.hidden_index), targets.flatten(), self.chunk).view(targets.shape)
        if trained_index is None:
            trained_index = mask.flatten().nonzero().squeeze(1)
        if trained_rows is None:
            trained_rows = tree.hidden_index.index_select(0, trained_index)
        picked = chunked_logprobs(head, hidden.index_select(0, trained_rows), targets.flatten().index_select(0, trained_index), self.chunk)
        return _scatter(picked, trained_index, mask)


def _scatter(picked: torch.Tensor, trained_index: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The trained tokens' logprobs at their places in ``mask``'s shape, 0 elsewhere."""
    flat = torch.zeros(mask.numel(), dtype=picked.dtype, device=picked.device).index_put((trained_index,), picked)
    return flat.view(mask.shape)
