"""GRPO loss against numbers worked out by hand."""

import math

import pytest
import torch

from rlstack.trainer.loss import GRPOLossConfig, group_advantages, grpo_loss, token_logprobs

CFG = GRPOLossConfig(clip_low=0.2, clip_high=0.2, dual_clip=3.0)


def test_group_advantages_are_normalised_and_zero_for_ties():
    adv = group_advantages(torch.tensor([1.0, 0.0, 0.0, 1.0]))
    assert torch.allclose(adv, torch.tensor([1.0, -1.0, -1.0, 1.0]), atol=1e-5)
    assert torch.equal(group_advantages(torch.tensor([0.5, 0.5])), torch.zeros(2))


def test_on_policy_loss_is_minus_mean_advantage():
    # ratio = 1 everywhere: the loss is -(mean advantage over trained tokens).
    lp = torch.log(torch.tensor([[0.5, 0.25, 0.5], [0.5, 0.5, 0.5]]))
    mask = torch.tensor([[0, 1, 1], [0, 1, 0]])
    loss, stats = grpo_loss(lp, lp.clone(), torch.tensor([1.0, -0.5]), mask, CFG)
    # tokens: A=1, A=1, A=-0.5 -> -(1 + 1 - 0.5) / 3
    assert loss.item() == pytest.approx(-0.5)
    assert float(stats["clip_fraction"]) == 0.0 and float(stats["ratio_mean"]) == pytest.approx(1.0)


def test_clipping_and_dual_clip_by_hand():
    inference = torch.log(torch.tensor([[0.5, 0.5, 0.5, 0.5]]))
    # ratios 1.5, 0.5, 1.1, 5.0 against the inference logprobs
    current = torch.log(torch.tensor([[0.75, 0.25, 0.55, 2.5]]))
    adv = torch.tensor([[1.0, -1.0, 1.0, -1.0]])
    loss, stats = grpo_loss(current, inference, adv, torch.ones(1, 4), CFG)
    # token 1: A>0, ratio 1.5 -> min(1.5, 1.2) = 1.2
    # token 2: A<0, ratio 0.5 -> min(-0.5, -0.8) = -0.8
    # token 3: A>0, ratio 1.1 -> 1.1 (inside the band)
    # token 4: A<0, ratio 5.0 -> min(-5, -1.2) = -5, dual clip max(-5, -3) = -3
    expected = -(1.2 - 0.8 + 1.1 - 3.0) / 4
    assert loss.item() == pytest.approx(expected, rel=1e-5)
    assert float(stats["clip_fraction"]) == pytest.approx(2 / 4)  # tokens 1 and 2


def test_gradient_flows_only_through_unclipped_trained_tokens():
    inference = torch.log(torch.tensor([[0.5, 0.5, 0.5]]))
    current = torch.log(torch.tensor([[0.75, 0.55, 0.5]])).requires_grad_()
    loss, _ = grpo_loss(current, inference, torch.tensor([1.0]), torch.tensor([[1, 1, 0]]), CFG)
    loss.backward()
    # token 1 clipped (no grad), token 2: d/dlp of -(ratio)/2 = -ratio/2 = -0.55, token 3 masked
    assert current.grad[0, 0].item() == 0.0
    assert current.grad[0, 1].item() == pytest.approx(-0.55, rel=1e-5)
    assert current.grad[0, 2].item() == 0.0


def test_k3_kl_term():
    lp = torch.log(torch.tensor([[0.5]]))
    ref = torch.log(torch.tensor([[0.25]]))
    cfg = GRPOLossConfig(kl_coef=0.1)
    loss, stats = grpo_loss(lp, lp.clone(), torch.tensor([0.0]), torch.ones(1, 1), cfg, ref_logprobs=ref)
    k3 = 0.5 - math.log(0.5) - 1  # exp(d) - d - 1 with d = log(0.25/0.5)
    assert float(stats["kl"]) == pytest.approx(k3, rel=1e-5)
    assert loss.item() == pytest.approx(0.1 * k3, rel=1e-5)


def test_token_logprobs_match_log_softmax():
    logits = torch.tensor([[[0.0, math.log(3.0)]]])
    assert token_logprobs(logits, torch.tensor([[1]])).item() == pytest.approx(math.log(0.75))


def test_truncated_importance_sampling_caps_the_inference_ratio():
    cfg = GRPOLossConfig(clip_low=0.2, clip_high=0.2, dual_clip=3.0, tis_cap=2.0)
    trainer = torch.log(torch.tensor([[0.6, 0.3, 0.2]])).requires_grad_()
    # p_trainer / p_inference = 3.0 (capped to 2), 1.0, 0.5
    inference = torch.log(torch.tensor([[0.2, 0.3, 0.4]]))
    adv = torch.tensor([1.0])
    loss, stats = grpo_loss(trainer, inference, adv, torch.ones(1, 3), cfg)
    # The PPO ratio is against the trainer's own logprobs at the step's start (1 here), so each
    # token contributes -A * min(p_trainer / p_inference, cap).
    assert loss.item() == pytest.approx(-(2.0 + 1.0 + 0.5) / 3, rel=1e-5)
    assert float(stats["is_weight_mean"]) == pytest.approx((2.0 + 1.0 + 0.5) / 3, rel=1e-5)
    assert float(stats["is_capped"]) == pytest.approx(1 / 3)  # the first token's 3.0 was cut to 2
    loss.backward()
    # d/d logp of -A * w * exp(logp - stop_grad(logp)) / n = -A * w / n
    assert torch.allclose(trainer.grad, torch.tensor([[-2.0, -1.0, -0.5]]) / 3, atol=1e-6)


def test_without_tis_the_ratio_is_taken_against_inference():
    trainer = torch.log(torch.tensor([[0.6]]))
    inference = torch.log(torch.tensor([[0.2]]))
    loss, stats = grpo_loss(trainer, inference, torch.tensor([1.0]), torch.ones(1, 1), CFG)
    assert loss.item() == pytest.approx(-1.2, rel=1e-5)  # ratio 3 clipped to 1.2
    assert float(stats["is_weight_mean"]) == 1.0 and float(stats["is_capped"]) == 0.0
