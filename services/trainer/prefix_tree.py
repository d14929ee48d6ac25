"""Sequences that start alike, laid out as trees: each shared prefix computed once per row.

A GRPO group's sequences all begin with the same prompt (an agent's system prompt, its tool
schemas, the task), and a trial's segments begin with the trial's own earlier turns. Packed as
copies, every copy of that prefix runs through every layer again. Here the sequences of a
micro-batch become a radix forest over their token ids (never text): a node is a run of tokens
that every sequence below it shares; the row holds each node once, parents before children, with
positions continuing from the parent's end. A node attends to its ancestors' keys and values and,
causally, its own (``TreeLayout``: which row positions are each node's keys), so each token's
hidden state is the one it has in its own sequence, and the gradients of all the sequences that
share a prefix meet in that prefix's one copy.

A split is kept only where the run shared is at least ``min_shared`` tokens: below that the run
is copied into each child, which costs less than the keys' gather it would save.

Everything per trained token (targets, masks, advantages, vLLM's logprobs) stays in the layout of
the unshared packed row; ``TreeLayout.hidden_index`` says which row position's hidden state
predicts each of its positions. So the first token of each suffix is predicted from the prefix's
last position, with that suffix's own target.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch


@dataclass
class Node:
    """Tokens ``[start, end)`` of the sequence ``owner`` (and of every sequence below this node)."""

    start: int
    end: int
    owner: int
    children: list[Node] = field(default_factory=list)
    ends_here: list[int] = field(default_factory=list)
    """Sequences whose last input token is this node's last."""

    @property
    def length(self) -> int:
        return self.end - self.start

    def size(self) -> int:
        """Tokens of the subtree (each node once)."""
        return self.length + sum(c.size() for c in self.children)

    def sequences(self) -> list[int]:
        return self.ends_here + [s for c in self.children for s in c.sequences()]

    def shares(self) -> bool:
        """Whether any token of this tree stands for more than one sequence."""
        return bool(self.children) or len(self.ends_here) > 1


def _common_end(seqs: dict[int, np.ndarray], members: list[int], depth: int) -> int:
    """First position from ``depth`` at which some member differs from the first, or ends."""
    first = seqs[members[0]]
    end = min(len(seqs[m]) for m in members)
    for m in members[1:]:
        if end <= depth:
            break
        end = depth + _common_start(first[depth:end], seqs[m][depth:end])
    return end


def build_forest(seqs: dict[int, np.ndarray], min_shared: int) -> list[Node]:
    """Radix forest of ``seqs`` (input ids by sequence index); a run shorter than ``min_shared`` tokens
    is never shared (it is copied into each child instead). Deterministic: children in token order."""
    if min_shared < 1:
        raise ValueError("min_shared must be at least 1")

    def grow(members: list[int], depth: int) -> list[Node]:
        if len(members) == 1:
            m = members[0]
            return [Node(depth, len(seqs[m]), m, ends_here=[m])]
        end = _common_end(seqs, members, depth)
        ended = [m for m in members if len(seqs[m]) == end]
        parts: dict[int, list[int]] = {}
        for m in members:
            if len(seqs[m]) > end:
                parts.setdefault(int(seqs[m][end]), []).append(m)
        if end - depth >= min_shared:
            node = Node(depth, end, members[0], ends_here=ended)
            node.children = [n for key in sorted(parts) for n in grow(parts[key], end)]
            return [node]
        # Too short to share: each part keeps its own copy of [depth, end).
        return [Node(depth, end, m, ends_here=[m]) for m in ended] + [n for key in sorted(parts) for n in grow(parts[key], depth)]

    return grow(sorted(seqs), 0)


@dataclass
class TreeLayout:
    """A row of trees: the nodes in row order, the keys each attends to, where each sequence's hidden states are.

    ``key_index`` lists, node after node, the row positions of its ancestors' tokens then its own;
    ``cu_q``/``cu_k`` bound each node's queries and keys (a varlen kernel's bounds, causal aligned to
    the end: a node's first query sees every ancestor key). The host lists drive the per-node path.
    """

    node_lengths: list[int]
    key_lengths: list[int]
    key_index: torch.Tensor  # [sum(key_lengths)] long
    cu_q: torch.Tensor  # [nodes + 1] int32
    cu_k: torch.Tensor  # [nodes + 1] int32
    hidden_index: torch.Tensor  # [unshared tokens] long: the row position predicting each unshared position
    sequences: list[int]
    """The batch rows in the order the unshared layout (the row's per-token tensors) follows."""
    sequence_lengths: list[int]

    @property
    def max_q(self) -> int:
        return max(self.node_lengths)

    @property
    def max_k(self) -> int:
        return max(self.key_lengths)

    def apply(self, move: Callable[[torch.Tensor], torch.Tensor]) -> TreeLayout:
        """The layout with each tensor passed through ``move`` (to a device, as the micro-batch's own go)."""
        return TreeLayout(self.node_lengths, self.key_lengths, *(move(t) for t in (self.key_index, self.cu_q, self.cu_k, self.hidden_index)),
                          self.sequences, self.sequence_lengths)


@dataclass
class TreeRow:
    """One packed row of trees: its input ids and positions, and the layout."""

    input_ids: torch.Tensor  # [1, row tokens]
    position_ids: torch.Tensor  # [1, row tokens]
    layout: TreeLayout


def lay_out(trees: list[Node], seqs: dict[int, np.ndarray]) -> TreeRow:
    """The trees as one row: nodes depth-first (parents first); each sequence's positions mapped to the
    row positions of its path's nodes."""
    ids, positions, node_lengths, key_lengths, keys = [], [], [], [], []
    paths: dict[int, list[tuple[int, int]]] = {}
    offset = 0

    def place(node: Node, ancestors: list[tuple[int, int]]) -> None:
        nonlocal offset
        span = (offset, offset + node.length)
        ids.append(seqs[node.owner][node.start:node.end])
        positions.append(np.arange(node.start, node.end))
        offset = span[1]
        path = [*ancestors, span]
        node_lengths.append(node.length)
        key_lengths.append(sum(hi - lo for lo, hi in path))
        keys.extend(np.arange(lo, hi) for lo, hi in path)
        for s in node.ends_here:
            paths[s] = path
        for child in node.children:
            place(child, path)

    for tree in trees:
        place(tree, [])
    order = [s for tree in trees for s in tree.sequences()]
    hidden = np.concatenate([np.arange(lo, hi) for s in order for lo, hi in paths[s]])

    def bounds(lengths: list[int]) -> torch.Tensor:
        return torch.tensor(np.concatenate([[0], np.cumsum(lengths)]), dtype=torch.int32)

    layout = TreeLayout(node_lengths, key_lengths, torch.from_numpy(np.concatenate(keys)).long(), bounds(node_lengths), bounds(key_lengths),
                        torch.from_numpy(hidden).long(), order, [len(seqs[s]) for s in order])
    return TreeRow(torch.from_numpy(np.concatenate(ids)).long().unsqueeze(0), torch.from_numpy(np.concatenate(positions)).long().unsqueeze(0),
                   layout)


def fit(seqs: dict[int, np.ndarray], min_shared: int, budget: int) -> list[Node]:
    """The forest of ``seqs`` with every tree at most ``budget`` tokens: a tree over it is cut, its
    sequences taken in tree order, into as few trees as fit (each holds the shared prefix again);
    a sequence longer than ``budget`` is a tree of its own.

    A cut's size is counted as a trie's (each sequence adds what it does not share with the one
    before it in tree order): one pass, where rebuilding the forest per sequence was quadratic
    (3 s for a claude-code batch of 256 sequences, all under one system prompt). Runs shorter
    than ``min_shared`` are copied, so a cut can come out larger than counted: it is then halved."""
    out = []
    for tree in build_forest(seqs, min_shared):
        if tree.size() <= budget or len(tree.sequences()) == 1:
            out.append(tree)
            continue
        chunk: list[int] = []
        used, previous = 0, None
        for m in tree.sequences():
            adds = len(seqs[m]) - (_common_start(seqs[previous], seqs[m]) if previous is not None else 0)
            if chunk and used + adds > budget:
                out.extend(_halved(seqs, chunk, min_shared, budget))
                chunk, adds = [], len(seqs[m])
                used = 0
            chunk.append(m)
            used += adds
            previous = m
        out.extend(_halved(seqs, chunk, min_shared, budget))
    return out


def _common_start(a: np.ndarray, b: np.ndarray) -> int:
    n = min(len(a), len(b))
    diff = np.flatnonzero(a[:n] != b[:n])
    return int(diff[0]) if diff.size else n


def _halved(seqs: dict[int, np.ndarray], members: list[int], min_shared: int, budget: int) -> list[Node]:
    """The forest of ``members``, each tree over ``budget`` halved until it fits or is one sequence."""
    out = []
    for tree in build_forest({i: seqs[i] for i in members}, min_shared):
        inside = tree.sequences()
        if tree.size() <= budget or len(inside) == 1:
            out.append(tree)
        else:
            out += _halved(seqs, inside[:len(inside) // 2], min_shared, budget) + _halved(seqs, inside[len(inside) // 2:], min_shared, budget)
    return out
