"""The trainer's attention (``rlstack_varlen``): packed rows by their sequence bounds, never a T x T mask.

On CPU the packed path is causal SDPA one sequence at a time; torch's varlen kernel is CUDA-only
and is checked by ``tests/gpu`` (``pytest -m gpu``) on a GPU.
"""

from __future__ import annotations

import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM
from transformers.masking_utils import AttentionMaskInterface

from rlstack.trainer import attention
from rlstack.trainer.batch import to_tensors
from rlstack.trainer.packing import micro_batches
from rlstack.trainer.step import policy_logprobs


def model(attn: str) -> Qwen2ForCausalLM:
    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, tie_word_embeddings=True)
    m = Qwen2ForCausalLM(config)
    m.set_attn_implementation(attn)
    return m


def batch():
    g = torch.Generator().manual_seed(3)
    groups = []
    for _ in range(3):
        prompt = torch.randint(1, 97, (int(torch.randint(2, 9, (1,), generator=g)),), generator=g).tolist()
        tails = [torch.randint(1, 97, (int(torch.randint(1, 15, (1,), generator=g)),), generator=g).tolist() for _ in range(3)]
        groups.append({"tokens": [prompt + t for t in tails], "masks": [[-100] * len(prompt) + t for t in tails], "scores": [1.0, 0.0, 0.5]})
    return to_tensors(groups)


def packed_logprobs(m: Qwen2ForCausalLM, b, **overrides) -> tuple[torch.Tensor, torch.Tensor]:  # noqa: ANN001
    (row,) = micro_batches(b, 0, 1, micro_batch_size=64, pack_tokens=1 << 16, current_version=None)
    kwargs = {"position_ids": row.position_ids, "cu_seq_lens": row.cu_seq_lens, "sequence_lengths": row.sequence_lengths, **overrides}
    lp = policy_logprobs(m, row.input_ids, None, row.targets, row.loss_mask, **kwargs)
    return lp, row.loss_mask


def test_packed_rows_give_each_sequence_its_own_logprobs_and_gradients():
    b = batch()
    reference = model("sdpa")
    expected = policy_logprobs(reference, b.input_ids, b.attention_mask, b.targets, b.loss_mask)
    expected[b.loss_mask].sum().backward()
    m = model(attention.register())
    got, mask = packed_logprobs(m, b)
    got[mask].sum().backward()
    # Rows come packed in sequence order, so the trained tokens line up one to one.
    assert torch.allclose(got[mask], expected[b.loss_mask], atol=1e-5)
    for (name, p), q in zip(m.named_parameters(), reference.parameters()):
        assert torch.allclose(p.grad, q.grad, atol=1e-5), name


def test_bounds_from_position_ids_alone_give_the_same_values():
    b = batch()
    m = model(attention.register())
    with_bounds, mask = packed_logprobs(m, b)
    from_positions, _ = packed_logprobs(m, b, cu_seq_lens=None, sequence_lengths=None)
    assert torch.equal(with_bounds[mask], from_positions[mask])


def test_a_packed_row_without_bounds_attends_across_sequences():
    """The negative control of the tests above: the same row read as one sequence gives other values."""
    b = batch()
    m = model(attention.register())
    right, mask = packed_logprobs(m, b)
    wrong, _ = packed_logprobs(m, b, position_ids=None, cu_seq_lens=None, sequence_lengths=None)
    assert (right[mask] - wrong[mask]).abs().max() > 1e-3


def test_padded_rows_match_transformers_masked_attention():
    b = batch()
    expected = policy_logprobs(model("sdpa"), b.input_ids, b.attention_mask, b.targets, b.loss_mask)
    got = policy_logprobs(model(attention.register()), b.input_ids, b.attention_mask, b.targets, b.loss_mask)
    assert torch.allclose(got[b.loss_mask], expected[b.loss_mask], atol=1e-5)


def test_left_padded_rows_are_refused():
    """The kernel reads no padding mask: a pad before a real token would be attended to, so it is refused."""
    b = batch()
    left = b.attention_mask.flip(-1)
    with pytest.raises(RuntimeError, match="right-padded"):
        policy_logprobs(model(attention.register()), b.input_ids.flip(-1), left, b.targets.flip(-1), b.loss_mask.flip(-1))


def test_no_mask_is_built_for_a_packed_row(monkeypatch):
    """transformers' mask builders are never called under the varlen kernel; under sdpa they are (the spy bites)."""
    built = []

    def spy(name):  # noqa: ANN001, ANN202
        original = AttentionMaskInterface._global_mapping[name]

        def wrapper(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
            built.append(name)
            return original(*args, **kwargs)
        return wrapper

    for name in ("sdpa", "eager"):
        monkeypatch.setitem(AttentionMaskInterface._global_mapping, name, spy(name))
    b = batch()
    packed_logprobs(model("sdpa"), b)
    assert built == ["sdpa"]
    built.clear()
    packed_logprobs(model(attention.register()), b)
    policy_logprobs(model(attention.NAME), b.input_ids, b.attention_mask, b.targets, b.loss_mask)
    assert built == []


def test_the_trained_index_path_equals_the_mask_path():
    b = batch()
    m = model(attention.register())
    (row,) = micro_batches(b, 0, 1, micro_batch_size=64, pack_tokens=1 << 16, current_version=None)
    on_device = row.to(torch.device("cpu"))
    by_mask = policy_logprobs(m, row.input_ids, None, row.targets, row.loss_mask, position_ids=row.position_ids,
                              sequence_lengths=row.sequence_lengths)
    by_index = policy_logprobs(m, on_device.input_ids, None, on_device.targets, on_device.loss_mask,
                               position_ids=on_device.position_ids, cu_seq_lens=on_device.cu_seq_lens,
                               sequence_lengths=on_device.sequence_lengths, trained_index=on_device.trained_index)
    assert torch.equal(on_device.trained_index, row.loss_mask.flatten().nonzero().squeeze(1))
    assert torch.allclose(by_mask, by_index, atol=0)


def test_the_varlen_kernel_is_called_for_causal_attention_whatever_this_torch_names_it():
    kernel = attention._varlen_kernel()
    assert kernel is not None  # torch >= 2.9 ships torch.nn.attention.varlen
    _, causal, _ = kernel
    assert causal in ({"is_causal": True}, {"window_size": (-1, 0)})
