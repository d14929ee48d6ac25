"""A batch cut into the micro-batches one rank runs: padded rows, or packed rows.

Every rank receives the whole batch and cuts it the same way, so no rank has to tell another
what it got. Sequences go to ranks by trained-token-balanced greedy assignment (longest first
to the rank with the fewest tokens: every rank's step then lasts about as long). Ranks with
fewer micro-batches get empty ones (a one-token forward with zero loss), because FSDP needs
every rank to run the same number of forwards and backwards.

Packed rows concatenate sequences up to ``pack_tokens`` tokens, with position ids restarting at
each sequence, and carry the sequences' bounds for a varlen attention kernel (no attention across
sequences, no T x T mask); no token is padding. Padded rows keep the old
layout (``micro_batch_size`` rows, padded to the longest).

Shared rows (``share_prefix`` tokens or more in common) are packed rows whose sequences of one
prefix tree hold that prefix once (``rlstack.trainer.prefix_tree``); a row with nothing to share
is an ordinary packed row.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from rlstack.trainer.attention import sequence_bounds
from rlstack.trainer.batch import TrainBatch
from rlstack.trainer.prefix_tree import TreeLayout, build_forest, fit, lay_out


@dataclass
class MicroBatch:
    input_ids: torch.Tensor  # [b, T]
    targets: torch.Tensor  # [b, T]
    loss_mask: torch.Tensor  # [b, T] bool
    inference_logprobs: torch.Tensor  # [b, T]
    advantages: torch.Tensor  # [b, T] per token
    same_weights: torch.Tensor  # [b, T] bool: sampled by the weights being trained
    on_policy: torch.Tensor | None = None  # [b, T] bool: no inference logprobs; ratio against the step's own
    attention_mask: torch.Tensor | None = None  # padded rows
    position_ids: torch.Tensor | None = None  # packed rows
    cu_seq_lens: torch.Tensor | None = None  # packed rows: [n + 1] int32 sequence bounds (for a varlen kernel)
    sequence_lengths: list[int] | None = None  # packed rows: each sequence's length, on the host
    trained_index: torch.Tensor | None = None  # flat positions of the trained tokens (set by ``to``)
    tree: TreeLayout | None = None  # shared rows: input_ids/position_ids hold each shared prefix once
    trained_rows: torch.Tensor | None = None  # shared rows: the row positions predicting the trained tokens (set by ``to``)

    @property
    def tokens(self) -> int:
        return int(self.loss_mask.sum())

    def to(self, device: torch.device) -> MicroBatch:
        """On ``device``, with ``trained_index`` (flat positions of the trained tokens) worked out here on
        the CPU: selecting them on a GPU by a boolean mask would wait for it. Copies to a GPU go from
        pinned memory without blocking, so the host queues the next micro-batch while one runs."""
        fields = dict(self.__dict__)
        if fields["trained_index"] is None:
            fields["trained_index"] = self.loss_mask.flatten().nonzero().squeeze(1)
        if self.tree is not None and fields["trained_rows"] is None:
            fields["trained_rows"] = self.tree.hidden_index.index_select(0, fields["trained_index"])
        pinned = device.type == "cuda"

        def move(v: torch.Tensor) -> torch.Tensor:
            if pinned and v.device.type == "cpu":
                return v.pin_memory().to(device, non_blocking=True)
            return v.to(device)

        if self.tree is not None:
            fields["tree"] = self.tree.apply(move)

        return MicroBatch(**{k: (move(v) if isinstance(v, torch.Tensor) else v) for k, v in fields.items()})


def lengths(batch: TrainBatch) -> list[int]:
    return [int(n) for n in batch.attention_mask.sum(-1)]


def assign_ranks(batch: TrainBatch, world_size: int, share_prefix: int | None = None) -> list[list[int]]:
    """Sequence indices per rank, balancing trained tokens (ties by sequence length).

    With ``share_prefix``, the sequences of one prefix tree go to one rank where balance allows
    (a tree is halved while it holds more trained tokens than a rank's share), so each rank holds
    its groups' prompts once rather than every rank holding every prompt: a rank's load may then
    differ from another's by up to a tree's."""
    trained = batch.loss_mask.sum(-1).tolist()
    size = lengths(batch)
    if share_prefix:
        units = [t.sequences() for t in build_forest({i: batch.input_ids[i, :size[i]].numpy() for i in range(len(size))}, share_prefix)]
        limit = sum(trained) / world_size
        while any(len(u) > 1 and sum(trained[i] for i in u) > limit for u in units):
            big = next(u for u in units if len(u) > 1 and sum(trained[i] for i in u) > limit)
            units.remove(big)
            units += [big[:len(big) // 2], big[len(big) // 2:]]
    else:
        units = [[i] for i in range(len(size))]
    weight = [(sum(trained[i] for i in u), sum(size[i] for i in u)) for u in units]
    order = sorted(range(len(units)), key=lambda k: (-weight[k][0], -weight[k][1], min(units[k])))
    load = [(0, 0)] * world_size
    out: list[list[int]] = [[] for _ in range(world_size)]
    for k in order:
        r = min(range(world_size), key=lambda j: (load[j], j))
        out[r].extend(units[k])
        load[r] = (load[r][0] + weight[k][0], load[r][1] + weight[k][1])
    return [sorted(x) for x in out]


def _same_weights(batch: TrainBatch, current_version: int | None) -> torch.Tensor:
    """Rows sampled by the weights being trained, with vLLM's logprobs to compare (mismatch)."""
    same = torch.tensor([v is not None and v == current_version for v in batch.weight_versions], dtype=torch.bool)
    return same & ~batch.on_policy


def padded(batch: TrainBatch, rows: list[int], micro_batch_size: int, current_version: int | None) -> list[MicroBatch]:
    same = _same_weights(batch, current_version)
    out = []
    for lo in range(0, len(rows), micro_batch_size):
        idx = torch.tensor(rows[lo:lo + micro_batch_size])
        width = max(1, int(batch.attention_mask[idx].sum(-1).max()))
        mask = batch.loss_mask[idx, :width]
        out.append(MicroBatch(input_ids=batch.input_ids[idx, :width], targets=batch.targets[idx, :width], loss_mask=mask,
                              inference_logprobs=batch.inference_logprobs[idx, :width],
                              advantages=batch.advantages[idx].unsqueeze(-1).expand_as(mask).clone(),
                              same_weights=same[idx].unsqueeze(-1).expand_as(mask).clone(),
                              on_policy=batch.on_policy[idx].unsqueeze(-1).expand_as(mask).clone(),
                              attention_mask=batch.attention_mask[idx, :width]))
    return out


def pack_rows(sizes: dict[int, int], budget: int) -> list[list[int]]:
    """First-fit decreasing: sequence indices per row, each row at most ``budget`` tokens (a longer
    sequence gets a row of its own)."""
    rows: list[list[int]] = []
    room: list[int] = []
    for i in sorted(sizes, key=lambda k: (-sizes[k], k)):
        slot = next((r for r, left in enumerate(room) if left >= sizes[i]), None)
        if slot is None:
            rows.append([i])
            room.append(budget - sizes[i])
        else:
            rows[slot].append(i)
            room[slot] -= sizes[i]
    return [sorted(r) for r in rows]


def _packed_row(batch: TrainBatch, row: list[int], size: list[int], same: torch.Tensor) -> MicroBatch:
    def cat(t: torch.Tensor) -> torch.Tensor:
        return torch.cat([t[i, :size[i]] for i in row]).unsqueeze(0)

    return MicroBatch(input_ids=cat(batch.input_ids), targets=cat(batch.targets), loss_mask=cat(batch.loss_mask),
                      inference_logprobs=cat(batch.inference_logprobs),
                      advantages=torch.cat([batch.advantages[i].expand(size[i]) for i in row]).unsqueeze(0),
                      same_weights=torch.cat([same[i].expand(size[i]) for i in row]).unsqueeze(0),
                      on_policy=torch.cat([batch.on_policy[i].expand(size[i]) for i in row]).unsqueeze(0),
                      position_ids=torch.cat([torch.arange(size[i]) for i in row]).unsqueeze(0),
                      sequence_lengths=[size[i] for i in row], cu_seq_lens=sequence_bounds([size[i] for i in row]))


def packed(batch: TrainBatch, rows: list[int], pack_tokens: int, current_version: int | None) -> list[MicroBatch]:
    same = _same_weights(batch, current_version)
    size = lengths(batch)
    return [_packed_row(batch, row, size, same) for row in pack_rows({i: size[i] for i in rows}, pack_tokens)]


def shared(batch: TrainBatch, rows: list[int], pack_tokens: int, share_prefix: int, current_version: int | None) -> list[MicroBatch]:
    """Packed rows of prefix trees: each row at most ``pack_tokens`` tokens once shared prefixes count once."""
    same = _same_weights(batch, current_version)
    size = lengths(batch)
    seqs = {i: batch.input_ids[i, :size[i]].numpy() for i in rows}
    trees = fit(seqs, share_prefix, pack_tokens)
    out = []
    for row in pack_rows({k: t.size() for k, t in enumerate(trees)}, pack_tokens):
        mine = [trees[k] for k in row]
        if not any(t.shares() for t in mine):
            out.append(_packed_row(batch, sorted(s for t in mine for s in t.sequences()), size, same))
            continue
        laid = lay_out(mine, seqs)
        out.append(replace(_packed_row(batch, laid.layout.sequences, size, same), input_ids=laid.input_ids, position_ids=laid.position_ids,
                           tree=laid.layout, sequence_lengths=None, cu_seq_lens=None))
    return out


def shared_tokens(batch: TrainBatch, pack_tokens: int, share_prefix: int) -> tuple[int, int]:
    """(tokens the batch's rows compute with prefixes shared, tokens without): what sharing removes, for reports."""
    size = lengths(batch)
    trees = fit({i: batch.input_ids[i, :size[i]].numpy() for i in range(len(size))}, share_prefix, pack_tokens)
    return sum(t.size() for t in trees), sum(size)


def empty(packed_rows: bool) -> MicroBatch:
    """One token, nothing trained: keeps a rank in step with the others' forwards and backwards."""
    one = torch.zeros(1, 1, dtype=torch.long)
    return MicroBatch(input_ids=one, targets=one, loss_mask=torch.zeros(1, 1, dtype=torch.bool),
                      inference_logprobs=torch.zeros(1, 1), advantages=torch.zeros(1, 1), same_weights=torch.zeros(1, 1, dtype=torch.bool),
                      on_policy=torch.zeros(1, 1, dtype=torch.bool),
                      attention_mask=None if packed_rows else torch.ones(1, 1, dtype=torch.long),
                      position_ids=torch.zeros(1, 1, dtype=torch.long) if packed_rows else None,
                      sequence_lengths=[1] if packed_rows else None, cu_seq_lens=sequence_bounds([1]) if packed_rows else None)


def micro_batches(batch: TrainBatch, rank: int, world_size: int, micro_batch_size: int, pack_tokens: int | None,
                  current_version: int | None, share_prefix: int | None = None) -> list[MicroBatch]:
    """This rank's micro-batches; every rank gets the same number. ``share_prefix`` (with ``pack_tokens``):
    sequences sharing at least that many leading tokens hold them once per row."""
    per_rank = assign_ranks(batch, world_size, share_prefix if pack_tokens else None) if world_size > 1 else [list(range(batch.input_ids.shape[0]))]

    def cut(rows: list[int]) -> list[MicroBatch]:
        if pack_tokens is None:
            return padded(batch, rows, micro_batch_size, current_version)
        if share_prefix:
            return shared(batch, rows, pack_tokens, share_prefix, current_version)
        return packed(batch, rows, pack_tokens, current_version)

    counts = [len(cut(r)) for r in per_rank] if world_size > 1 else None
    mine = cut(per_rank[rank])
    if counts is not None:
        mine += [empty(pack_tokens is not None) for _ in range(max(counts) - len(mine))]
    return mine
