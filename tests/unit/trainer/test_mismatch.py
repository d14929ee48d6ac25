"""Training–inference mismatch statistics against numbers worked out by hand."""

import math

import pytest
import torch

from rlstack.trainer.batch import to_tensors
from rlstack.trainer.loss import GRPOLossConfig
from rlstack.trainer.mismatch import MismatchAccumulator
from rlstack.trainer.step import grpo_step


def test_identical_logprobs_have_no_mismatch():
    acc = MismatchAccumulator()
    lp = torch.log(torch.tensor([[0.5, 0.25]]))
    acc.add(lp, lp.clone(), torch.ones(1, 2, dtype=torch.bool))
    m = acc.result()
    assert m.kl == 0 and m.abs_mean == 0 and m.abs_max == 0 and m.ratio_outside == 0 and m.tokens == 2


def test_mismatch_by_hand_over_micro_batches():
    acc = MismatchAccumulator()
    # d = trainer - inference: ln 3 (ratio 3, outside), 0, and on the masked position a huge gap
    acc.add(torch.log(torch.tensor([[0.6, 0.3, 0.9]])), torch.log(torch.tensor([[0.2, 0.3, 1e-6]])),
            torch.tensor([[True, True, False]]))
    # second micro-batch: d = -ln 1.5 (ratio 2/3, inside)
    acc.add(torch.log(torch.tensor([[0.2]])), torch.log(torch.tensor([[0.3]])), torch.tensor([[True]]))
    m = acc.result()
    ds = [math.log(3), 0.0, -math.log(1.5)]
    assert m.tokens == 3
    assert m.kl == pytest.approx(sum(math.exp(d) - d - 1 for d in ds) / 3, rel=1e-5)
    assert m.abs_mean == pytest.approx(sum(abs(d) for d in ds) / 3, rel=1e-5)
    assert m.abs_max == pytest.approx(math.log(3), rel=1e-5)
    assert m.ratio_outside == pytest.approx(1 / 3)


def test_no_tokens_no_result():
    acc = MismatchAccumulator()
    acc.add(torch.zeros(1, 2), torch.zeros(1, 2), torch.zeros(1, 2, dtype=torch.bool))
    assert acc.result() is None


def test_step_counts_only_rows_sampled_by_the_current_weights():
    torch.manual_seed(0)
    from transformers import Qwen2Config, Qwen2ForCausalLM

    model = Qwen2ForCausalLM(Qwen2Config(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                         num_attention_heads=2, num_key_value_heads=1))
    group = {"tokens": [[1, 2, 3, 4], [1, 2, 5, 6]], "masks": [[-100, -100, 3, 4], [-100, -100, 5, 6]], "scores": [1.0, 0.0],
             "inference_logprobs": [[0.0, 0.0, -1.0, -1.0], [0.0, 0.0, -1.0, -1.0]]}
    old, current = {**group, "weight_version": 3}, {**group, "weight_version": 4}
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    stats = grpo_step(model, opt, to_tensors([old, current]), GRPOLossConfig(), current_version=4)
    assert stats.mismatch is not None and stats.mismatch.tokens == 4  # the version-4 group's two trained tokens per row
    assert grpo_step(model, opt, to_tensors([old]), GRPOLossConfig(), current_version=4).mismatch is None


def test_float_noise_reads_as_a_tiny_positive_kl_not_a_negative_one():
    """exp(d) - d - 1 in float32 cancels to <= 0 at d ~ 1e-7 (a float32 replica's noise): a run
    reported a mean KL of -2.9e-10. The figure is d^2 / 2 there."""
    acc = MismatchAccumulator()
    d = torch.tensor([[3e-7, -2e-7, 1e-6]])
    acc.add(d, torch.zeros_like(d), torch.ones_like(d, dtype=torch.bool))
    expected = float((d.double() ** 2 / 2).mean())
    assert acc.result().kl == pytest.approx(expected, rel=1e-3) and acc.result().kl > 0
