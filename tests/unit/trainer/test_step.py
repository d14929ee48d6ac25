"""A real GRPO step on the tiny Qwen2 (CPU): alignment of targets/logprobs, and learning direction."""

from __future__ import annotations

import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from rlstack.trainer.batch import to_tensors
from rlstack.trainer.loss import GRPOLossConfig
from rlstack.trainer.step import grpo_step, policy_logprobs


@pytest.fixture
def model():
    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                         num_key_value_heads=1, max_position_embeddings=64, tie_word_embeddings=True)
    return Qwen2ForCausalLM(config).float()


def own_logprobs(model, tokens):
    """The model's logprob of each token given the ones before (what vLLM would report)."""
    with torch.no_grad():
        lp = policy_logprobs(model, torch.tensor([tokens[:-1]]), torch.ones(1, len(tokens) - 1, dtype=torch.long), torch.tensor([tokens[1:]]))
    return [0.0] + lp[0].tolist()


def group(model, completions, scores, prompt=(1, 2, 3)):
    tokens = [list(prompt) + c for c in completions]
    return {"tokens": tokens, "masks": [[-100] * len(prompt) + c for c in completions], "scores": scores,
            "inference_logprobs": [own_logprobs(model, t) for t in tokens], "weight_version": 0}


def test_batch_shifts_targets_and_masks_by_one(model):
    batch = to_tensors([group(model, [[10, 11], [12]], [1.0, 0.0])])
    assert batch.input_ids[0].tolist() == [1, 2, 3, 10] and batch.targets[0].tolist() == [2, 3, 10, 11]
    assert batch.loss_mask[0].tolist() == [False, False, True, True]
    assert batch.loss_mask[1].tolist() == [False, False, True, False]  # padding is never trained
    assert batch.advantages.tolist() == pytest.approx([1.0, -1.0], abs=1e-4)


def test_on_policy_ratio_is_one_and_the_step_moves_probability_towards_reward(model):
    good, bad = [20, 21, 22], [30, 31, 32]
    batch = to_tensors([group(model, [good, bad, good, bad], [1.0, 0.0, 1.0, 0.0])])
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    before_good, before_bad = sum(own_logprobs(model, [1, 2, 3, *good])), sum(own_logprobs(model, [1, 2, 3, *bad]))
    stats = grpo_step(model, optimizer, batch, GRPOLossConfig(), micro_batch_size=3)
    assert stats.ratio_mean == pytest.approx(1.0, abs=1e-4)  # the batch's logprobs are the model's own
    assert stats.clip_fraction == 0.0 and stats.tokens == 12 and stats.grad_norm > 0
    after_good, after_bad = sum(own_logprobs(model, [1, 2, 3, *good])), sum(own_logprobs(model, [1, 2, 3, *bad]))
    assert after_good > before_good and after_bad < before_bad


def test_masked_projection_equals_the_full_forward_and_its_gradient():
    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                         num_key_value_heads=1)
    model = Qwen2ForCausalLM(config)
    ids = torch.randint(0, 97, (3, 9))
    targets = torch.randint(0, 97, (3, 9))
    attention = torch.ones_like(ids)
    mask = torch.zeros(3, 9, dtype=torch.bool)
    mask[:, 5:] = True
    full = policy_logprobs(model, ids, attention, targets)
    picked = policy_logprobs(model, ids, attention, targets, mask)
    assert torch.allclose(picked[mask], full[mask], atol=1e-5) and (picked[~mask] == 0).all()
    (picked * mask).sum().backward()
    grad_picked = model.lm_head.weight.grad.clone()
    model.zero_grad()
    (full * mask).sum().backward()
    assert torch.allclose(grad_picked, model.lm_head.weight.grad, atol=1e-5)


def test_bf16_on_a_cpu_computes_in_bf16_over_float32_weights(model):
    """``mixed_precision=bf16`` in a plain process: the step's forward is bf16 (its logprobs differ from the
    float32 step's by bf16 rounding, not by nothing), the weights and their update stay float32, and the
    step still moves probability towards reward."""
    good, bad = [20, 21, 22], [30, 31, 32]
    batch = to_tensors([group(model, [good, bad, good, bad], [1.0, 0.0, 1.0, 0.0])])
    twin = Qwen2ForCausalLM(model.config).float()
    twin.load_state_dict(model.state_dict())
    before_good = sum(own_logprobs(model, [1, 2, 3, *good]))
    full = grpo_step(twin, torch.optim.AdamW(twin.parameters(), lr=1e-2), batch, GRPOLossConfig(), micro_batch_size=4,
                     current_version=0, bf16=False)
    half = grpo_step(model, torch.optim.AdamW(model.parameters(), lr=1e-2), batch, GRPOLossConfig(), micro_batch_size=4,
                     current_version=0, bf16=True)
    # The batch's logprobs are float32's own: float32 reads them back to float noise, bf16 to its rounding.
    assert full.mismatch.abs_mean < 1e-5
    assert 1e-4 < half.mismatch.abs_mean < 0.1
    assert all(p.dtype == torch.float32 for p in model.parameters())
    assert sum(own_logprobs(model, [1, 2, 3, *good])) > before_good
