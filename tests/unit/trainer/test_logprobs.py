"""Chunked log-probabilities equal the full projection, values and gradients."""

from __future__ import annotations

import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from rlstack.trainer.logprobs import PolicyLogprobs, chunked_logprobs
from rlstack.trainer.loss import token_logprobs


@pytest.mark.parametrize("chunk", [1, 3, 7, 64])
def test_chunked_equals_full_projection_and_its_gradients(chunk):
    torch.manual_seed(0)
    head = torch.nn.Linear(16, 50, bias=False)
    hidden = torch.randn(20, 16, requires_grad=True)
    targets = torch.randint(0, 50, (20,))
    full = token_logprobs(head(hidden), targets)
    weights = torch.randn(20)
    (full * weights).sum().backward()
    want_h, want_w = hidden.grad.clone(), head.weight.grad.clone()
    hidden.grad, head.weight.grad = None, None
    got = chunked_logprobs(head, hidden, targets, chunk)
    assert torch.allclose(got, full, atol=1e-6)
    (got * weights).sum().backward()
    assert torch.allclose(hidden.grad, want_h, atol=1e-6) and torch.allclose(head.weight.grad, want_w, atol=1e-6)


def test_policy_chunks_match_one_chunk_on_a_model():
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(Qwen2Config(vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                         num_attention_heads=2, num_key_value_heads=1))
    ids, targets = torch.randint(0, 97, (2, 11)), torch.randint(0, 97, (2, 11))
    mask = torch.rand(2, 11) > 0.3
    whole = PolicyLogprobs(model, chunk=10_000)(ids, targets, mask, attention_mask=torch.ones_like(ids))
    chunked = PolicyLogprobs(model, chunk=2)(ids, targets, mask, attention_mask=torch.ones_like(ids))
    assert torch.allclose(whole, chunked, atol=1e-6) and (chunked[~mask] == 0).all()
    empty = PolicyLogprobs(model)(ids, targets, torch.zeros_like(mask), attention_mask=torch.ones_like(ids))
    empty.sum().backward()  # nothing trained still reaches every parameter (ranks stay in step under FSDP)
    assert all(p.grad is not None for p in model.parameters())
