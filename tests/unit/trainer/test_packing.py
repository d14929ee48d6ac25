"""Packed rows train exactly like padded rows, and ranks get balanced, equally long shares."""

from __future__ import annotations

import copy

import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from rlstack.trainer import attention
from rlstack.trainer.batch import to_tensors
from rlstack.trainer.loss import GRPOLossConfig
from rlstack.trainer.packing import assign_ranks, micro_batches, pack_rows
from rlstack.trainer.step import grpo_step, policy_logprobs


def model(attn: str = "sdpa") -> Qwen2ForCausalLM:
    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                         num_key_value_heads=1, tie_word_embeddings=True)
    m = Qwen2ForCausalLM(config)
    m.set_attn_implementation(attention.register() if attn == attention.NAME else attn)
    return m


def batch(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    groups = []
    for _ in range(2):
        prompt = torch.randint(1, 97, (int(torch.randint(3, 8, (1,), generator=g)),), generator=g).tolist()
        comps = [torch.randint(1, 97, (int(torch.randint(2, 12, (1,), generator=g)),), generator=g).tolist() for _ in range(3)]
        groups.append({"tokens": [prompt + c for c in comps], "masks": [[-100] * len(prompt) + c for c in comps],
                       "scores": [1.0, 0.0, 0.5], "weight_version": 0,
                       "inference_logprobs": [[0.0] * len(prompt) + [-4.5] * len(c) for c in comps]})
    return to_tensors(groups)


def test_a_packed_row_attends_within_each_sequence_only():
    m, b = model(), batch()
    padded = policy_logprobs(m, b.input_ids, b.attention_mask, b.targets, b.loss_mask)
    (row,) = micro_batches(b, 0, 1, micro_batch_size=8, pack_tokens=1000, current_version=0)
    assert row.attention_mask is None and row.input_ids.shape[0] == 1
    assert row.input_ids.shape[1] == int(b.attention_mask.sum())  # no padding at all
    packed = policy_logprobs(m, row.input_ids, None, row.targets, row.loss_mask, position_ids=row.position_ids)
    assert torch.allclose(packed[row.loss_mask].sort().values, padded[b.loss_mask].sort().values, atol=1e-5)


@pytest.mark.parametrize("attn", [attention.NAME, "sdpa"])
@pytest.mark.parametrize("pack_tokens", [16, 40, 1000])
def test_packed_and_padded_steps_give_the_same_loss_and_gradients(pack_tokens, attn):
    b, config = batch(), GRPOLossConfig()
    padded_model, packed_model = model(attn), model(attn)
    grads = {}
    for name, m, pack in (("padded", padded_model, None), ("packed", packed_model, pack_tokens)):
        frozen = torch.optim.SGD(m.parameters(), lr=0.0)  # gradients without moving the weights
        stats = grpo_step(m, frozen, b, config, micro_batch_size=2, max_grad_norm=1e9, current_version=0, pack_tokens=pack)
        grads[name] = (stats, {n: p.grad.clone() for n, p in m.named_parameters()})
    (s_pad, g_pad), (s_pack, g_pack) = grads["padded"], grads["packed"]
    assert s_pack.loss == pytest.approx(s_pad.loss, abs=1e-6) and s_pack.grad_norm == pytest.approx(s_pad.grad_norm, rel=1e-5)
    assert s_pack.mismatch.tokens == s_pad.mismatch.tokens == b.trained_tokens
    assert max(float((g_pad[n] - g_pack[n]).abs().max()) for n in g_pad) < 1e-6


def test_ranks_get_balanced_trained_tokens_and_the_same_number_of_micro_batches():
    b = batch()
    shares = assign_ranks(b, 2)
    assert sorted(i for s in shares for i in s) == list(range(b.input_ids.shape[0]))
    tokens = [int(b.loss_mask[s].sum()) for s in shares]
    assert max(tokens) - min(tokens) <= int(b.loss_mask.sum(-1).max())  # within one sequence
    for pack in (None, 16):
        parts = [micro_batches(b, r, 2, micro_batch_size=1, pack_tokens=pack, current_version=0) for r in range(2)]
        assert len(parts[0]) == len(parts[1])
        assert sum(p.tokens for ps in parts for p in ps) == b.trained_tokens


def test_rows_never_exceed_the_budget_unless_one_sequence_does():
    rows = pack_rows({0: 10, 1: 7, 2: 5, 3: 3, 4: 30}, 12)
    sizes = {0: 10, 1: 7, 2: 5, 3: 3, 4: 30}
    assert sorted(i for r in rows for i in r) == [0, 1, 2, 3, 4]
    assert all(sum(sizes[i] for i in r) <= 12 or r == [4] for r in rows)


def test_the_step_does_not_change_the_batch():
    b = batch()
    before = copy.deepcopy(b)
    grpo_step(model(), torch.optim.SGD(model().parameters(), lr=0.0), b, GRPOLossConfig(), pack_tokens=20)
    assert torch.equal(before.input_ids, b.input_ids) and torch.equal(before.loss_mask, b.loss_mask)
