"""Prefix-tree rows train exactly like packed rows: the same per-token logprobs, loss and gradients,
on GRPO groups, on groups with nothing shared, with a sequence that is another's prefix, with a
trial's segments nested inside a group, and under LoRA."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from rlstack.trainer import attention
from rlstack.trainer.batch import to_tensors
from rlstack.trainer.loss import GRPOLossConfig
from rlstack.trainer.packing import assign_ranks, micro_batches, shared_tokens
from rlstack.trainer.prefix_tree import build_forest, fit, lay_out
from rlstack.trainer.step import grpo_step, policy_logprobs

VOCAB = 97


def model(lora: bool = False) -> torch.nn.Module:
    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, tie_word_embeddings=True)
    m = Qwen2ForCausalLM(config)
    m.set_attn_implementation(attention.register())
    if lora:
        from peft import LoraConfig, get_peft_model

        m = get_peft_model(m, LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, task_type="CAUSAL_LM", target_modules=["q_proj", "v_proj", "up_proj"]))
        for name, p in m.named_parameters():
            if "lora_B" in name:  # a trained adapter (B starts at zero, which would hide a wrong gradient into A)
                torch.nn.init.normal_(p, std=0.1)
    return m


def rand(g: torch.Generator, low: int, high: int) -> list[int]:
    return torch.randint(1, VOCAB, (int(torch.randint(low, high, (1,), generator=g)),), generator=g).tolist()


def group(tokens: list[list[int]], prompt: int, g: torch.Generator, trials: list[int] | None = None) -> dict:
    out = {"tokens": tokens, "masks": [[-100] * prompt + t[prompt:] for t in tokens],
           "scores": [float(torch.rand(1, generator=g)) for _ in tokens], "weight_version": 0,
           "inference_logprobs": [[0.0] * prompt + [-float(torch.rand(1, generator=g)) * 3 for _ in t[prompt:]] for t in tokens]}
    if trials is not None:
        out["trials"] = trials
    return out


def grpo_groups(seed: int = 0) -> list[dict]:
    """Two groups, each of a long prompt and uneven completions."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(2):
        prompt = rand(g, 20, 30)
        out.append(group([prompt + rand(g, 2, 14) for _ in range(4)], len(prompt), g))
    return out


def unrelated(seed: int = 1) -> list[dict]:
    g = torch.Generator().manual_seed(seed)
    return [group([rand(g, 10, 30) for _ in range(4)], 3, g)]


def whole_sequence_prefix(seed: int = 2) -> list[dict]:
    """One sequence is the start of another (a trial's first segment, then the segment continued), and one is
    repeated verbatim."""
    g = torch.Generator().manual_seed(seed)
    prompt, first = rand(g, 20, 24), rand(g, 4, 8)
    short = prompt + first
    return [group([short, short + rand(g, 3, 9), list(short), prompt + rand(g, 3, 9)], len(prompt), g)]


def nested(seed: int = 3) -> list[dict]:
    """A group of 3 trials over one prompt; each trial sends 2-3 segments sharing its own first turns
    (trained again in the later segments, so shared positions carry several trained copies)."""
    g = torch.Generator().manual_seed(seed)
    prompt = rand(g, 24, 30)
    tokens, trials = [], []
    for trial in range(3):
        turn = prompt + rand(g, 10, 14)
        for _ in range(2 + trial % 2):
            tokens.append(turn + rand(g, 2, 6))
            trials.append(trial)
            turn = tokens[-1] + rand(g, 3, 5)
    return [group(tokens, len(prompt), g, trials)]


CASES = {"grpo": grpo_groups, "nothing-shared": unrelated, "whole-sequence": whole_sequence_prefix, "nested": nested}


def step(m: torch.nn.Module, groups: list[dict], pack_tokens: int, share: int | None):
    frozen = torch.optim.SGD([p for p in m.parameters() if p.requires_grad], lr=0.0)  # gradients without moving the weights
    stats = grpo_step(m, frozen, to_tensors(groups), GRPOLossConfig(), max_grad_norm=1e9, current_version=0, pack_tokens=pack_tokens,
                      share_prefix=share)
    return stats, {n: p.grad.clone() for n, p in m.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("pack_tokens", [64, 4096])
def test_shared_rows_give_the_packed_loss_and_gradients(case, pack_tokens):
    groups = CASES[case]()
    packed_stats, packed_grads = step(model(), groups, pack_tokens, None)
    shared_stats, shared_grads = step(model(), groups, pack_tokens, 4)
    assert shared_stats.loss == pytest.approx(packed_stats.loss, abs=1e-6)
    assert shared_stats.grad_norm == pytest.approx(packed_stats.grad_norm, rel=1e-5)
    assert packed_grads.keys() == shared_grads.keys()
    for name, grad in packed_grads.items():
        torch.testing.assert_close(shared_grads[name], grad, atol=1e-6, rtol=1e-5, msg=name)


def test_shared_rows_give_the_packed_gradients_of_a_lora_adapter():
    groups = nested()
    packed_stats, packed_grads = step(model(lora=True), groups, 4096, None)
    shared_stats, shared_grads = step(model(lora=True), groups, 4096, 4)
    assert shared_stats.loss == pytest.approx(packed_stats.loss, abs=1e-6)
    assert packed_grads and all("lora_" in n for n in packed_grads)
    for name, grad in packed_grads.items():
        torch.testing.assert_close(shared_grads[name], grad, atol=1e-6, rtol=1e-5, msg=name)


@pytest.mark.parametrize("case", CASES)
def test_each_tokens_logprob_is_the_one_it_has_in_its_own_sequence(case):
    """Every unshared position, the first token after each prefix included, gets its own sequence's logprob."""
    batch, m = to_tensors(CASES[case]()), model()
    packed = micro_batches(batch, 0, 1, 8, 4096, 0)
    shared = micro_batches(batch, 0, 1, 8, 4096, 0, share_prefix=4)
    with torch.no_grad():
        want = [policy_logprobs(m, p.input_ids, None, p.targets, position_ids=p.position_ids, sequence_lengths=p.sequence_lengths) for p in packed]
        got = [policy_logprobs(m, p.input_ids, None, p.targets, position_ids=p.position_ids, sequence_lengths=p.sequence_lengths)
               if p.tree is None else m_tree(m, p) for p in shared]
    # Rows are the same sequences in another order: compare each sequence's logprobs by its tokens.
    def by_sequence(parts, logprobs):
        out = {}
        for p, lp in zip(parts, logprobs):
            lo = 0
            for n in p.sequence_lengths or p.tree.sequence_lengths:
                out[tuple(p.targets[0, lo:lo + n].tolist())] = lp[0, lo:lo + n]
                lo += n
        return out

    want_seq, got_seq = by_sequence(packed, want), by_sequence(shared, got)
    assert want_seq.keys() == got_seq.keys()
    for key, lp in want_seq.items():
        torch.testing.assert_close(got_seq[key], lp, atol=1e-5, rtol=1e-5)
    if case != "nothing-shared":
        assert any(p.tree is not None for p in shared)
        assert sum(p.input_ids.shape[1] for p in shared) < sum(p.input_ids.shape[1] for p in packed)


def m_tree(m: torch.nn.Module, part) -> torch.Tensor:
    return policy_logprobs(m, part.input_ids, None, part.targets, position_ids=part.position_ids, tree=part.tree)


def test_the_forest_shares_long_runs_and_copies_short_ones():
    a, b = np.arange(10), np.concatenate([np.arange(8), [50, 51]])
    c = np.concatenate([[99], np.arange(1, 6)])
    seqs = {0: a, 1: b, 2: c, 3: a[:6]}
    forest = build_forest(seqs, min_shared=5)
    assert sorted((t.start, t.end, sorted(t.sequences())) for t in forest) == [(0, 6, [0, 1, 3]), (0, 6, [2])]
    root = next(t for t in forest if t.shares())
    # 0, 1 and 3 share [0, 6), where 3 ends; 0 and 1 go on together for two tokens only: each keeps its own copy.
    assert root.ends_here == [3] and [(n.start, n.end) for n in root.children] == [(6, 10), (6, 10)]
    assert root.size() == 6 + 4 + 4
    # With runs of 1 shared, [6, 8) is a node of its own.
    root = next(t for t in build_forest(seqs, min_shared=1) if t.shares())
    assert [(n.start, n.end) for n in root.children] == [(6, 8)] and root.size() == 6 + 2 + 2 + 2
    # With 7, [0, 6) is not worth sharing but [0, 8) is.
    assert sorted(t.size() for t in build_forest(seqs, min_shared=7)) == [6, 6, 8 + 2 + 2]


def test_a_tree_over_the_row_budget_is_split_into_trees_that_fit():
    prompt = np.arange(40)
    seqs = {i: np.concatenate([prompt, 100 + i * 10 + np.arange(10)]) for i in range(8)}
    assert [t.size() for t in fit(seqs, 4, 10_000)] == [40 + 8 * 10]
    trees = fit(seqs, 4, 100)
    assert sorted(s for t in trees for s in t.sequences()) == list(range(8))
    assert [t.size() for t in trees] == [40 + 6 * 10, 40 + 2 * 10]  # as few trees as fit, each with the prompt again
    row = lay_out(trees[:1], seqs)
    assert row.layout.key_lengths[0] == 40 and row.layout.key_lengths[1:] == [50] * (len(row.layout.key_lengths) - 1)


def test_shared_tokens_counts_what_the_trees_remove():
    kept, total = shared_tokens(to_tensors(grpo_groups()), 4096, 4)
    assert total == sum(len(t) - 1 for g in grpo_groups() for t in g["tokens"])
    prompts = [sum(1 for m in g["masks"][0] if m == -100) for g in grpo_groups()]
    assert total - kept >= sum(3 * p for p in prompts)  # each group's prompt, three of four copies gone at least
    assert shared_tokens(to_tensors(unrelated()), 4096, 4) == (total_of(unrelated()),) * 2


def total_of(groups: list[dict]) -> int:
    return sum(len(t) - 1 for g in groups for t in g["tokens"])


def test_ranks_keep_a_groups_sequences_together_where_balance_allows():
    groups = grpo_groups() + grpo_groups(seed=5)
    batch = to_tensors(groups)
    starts = [0, 4, 8, 12]  # the four groups' first rows
    shares = assign_ranks(batch, 2, share_prefix=4)
    assert sorted(i for s in shares for i in s) == list(range(16))
    for share in shares:  # whole groups: a rank holds each of its prompts once
        assert {i // 4 for i in share} == {g for g in range(4) if starts[g] in share} and len(share) % 4 == 0
    # Sixteen ranks for four groups: groups are split, so no rank holds more than a rank's share and one piece.
    fair = batch.trained_tokens / 16
    shares = assign_ranks(batch, 16, share_prefix=4)
    assert sorted(i for s in shares for i in s) == list(range(16))
    assert max(int(batch.loss_mask[s].sum()) for s in shares if s) <= 2 * fair
    parts = [micro_batches(batch, r, 2, 8, 4096, 0, share_prefix=4) for r in range(2)]
    assert len(parts[0]) == len(parts[1]) and all(p.tree is not None for ps in parts for p in ps)
    assert sum(p.tokens for ps in parts for p in ps) == batch.trained_tokens


def test_a_soft_capped_head_takes_the_full_logits_path_on_tree_rows_too():
    """Gemma 2 caps its logits, so its head is more than a linear map: the row's logits are taken whole."""
    from transformers import Gemma2Config, Gemma2ForCausalLM

    torch.manual_seed(0)
    config = Gemma2Config(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                          num_key_value_heads=1, head_dim=16, final_logit_softcapping=5.0)
    m = Gemma2ForCausalLM(config)
    m.set_attn_implementation(attention.register())
    groups = nested()
    packed_stats, packed_grads = step(m, groups, 4096, None)
    shared_stats, shared_grads = step(m, groups, 4096, 4)
    assert shared_stats.loss == pytest.approx(packed_stats.loss, abs=1e-6)
    for name, grad in packed_grads.items():
        torch.testing.assert_close(shared_grads[name], grad, atol=1e-6, rtol=1e-5, msg=name)
