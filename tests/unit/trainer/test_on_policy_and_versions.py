"""Groups without inference logprobs train on-policy; older rows' mismatch is measured under the version
that sampled them (real tiny Qwen2, real GRPO steps on CPU)."""

from __future__ import annotations

import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from rlstack.trainer.batch import to_tensors
from rlstack.trainer.distributed import DistContext
from rlstack.trainer.loss import GRPOLossConfig
from rlstack.trainer.mismatch import MismatchAccumulator
from rlstack.trainer.step import as_policy, grpo_step, policy_logprobs
from rlstack.trainer.versions import VersionStore, pick_rows, score_sample


def tiny(seed: int = 0) -> Qwen2ForCausalLM:
    torch.manual_seed(seed)
    return Qwen2ForCausalLM(Qwen2Config(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                        num_attention_heads=2, num_key_value_heads=1, tie_word_embeddings=True)).float()


def own_logprobs(model, tokens):
    with torch.no_grad():
        lp = policy_logprobs(model, torch.tensor([tokens[:-1]]), torch.ones(1, len(tokens) - 1, dtype=torch.long), torch.tensor([tokens[1:]]))
    return [0.0] + lp[0].tolist()


COMPLETIONS = [[20, 21, 22], [30, 31, 32], [20, 21, 23], [33, 31]]
SCORES = [1.0, 0.0, 1.0, 0.0]


def group(model=None, version=None):
    tokens = [[1, 2, 3, *c] for c in COMPLETIONS]
    g = {"tokens": tokens, "masks": [[-100] * 3 + c for c in COMPLETIONS], "scores": SCORES}
    if model is not None:
        g["inference_logprobs"] = [own_logprobs(model, t) for t in tokens]
    if version is not None:
        g["weight_version"] = version
    return g


def test_group_without_logprobs_becomes_tensors_whatever_its_size():
    batch = to_tensors([group(), group()])  # raised IndexError with two or more rows
    assert batch.on_policy.tolist() == [True] * 8
    assert to_tensors([group(tiny())]).on_policy.tolist() == [False] * 4


def test_without_logprobs_the_step_is_on_policy_grpo():
    """Same update as with exact behaviour logprobs; before, the ratio was taken against zeros (ratio = p)."""
    with_lp, without_lp = tiny(), tiny()
    exact = to_tensors([group(with_lp)])
    missing = to_tensors([group()])
    config = GRPOLossConfig()
    a = grpo_step(with_lp, torch.optim.SGD(with_lp.parameters(), lr=0.1), exact, config, micro_batch_size=2)
    b = grpo_step(without_lp, torch.optim.SGD(without_lp.parameters(), lr=0.1), missing, config, micro_batch_size=2)
    assert b.ratio_mean == pytest.approx(1.0, abs=1e-6) and b.clip_fraction == 0.0
    assert b.loss == pytest.approx(a.loss, abs=1e-5)
    for p, q in zip(with_lp.parameters(), without_lp.parameters(), strict=True):
        assert torch.allclose(p, q, atol=1e-6)
    assert b.mismatch is None  # nothing to compare: no inference logprobs were sent


def test_tis_on_rows_without_logprobs_weighs_them_one():
    model = tiny()
    stats = grpo_step(model, torch.optim.SGD(model.parameters(), lr=0.0), to_tensors([group()]),
                      GRPOLossConfig(tis_cap=2.0), micro_batch_size=4)
    assert stats.ratio_mean == pytest.approx(1.0, abs=1e-6)


def step_to_next_version(model) -> None:
    batch = to_tensors([group(model, version=0)])
    grpo_step(model, torch.optim.SGD(model.parameters(), lr=0.5), batch, GRPOLossConfig(), micro_batch_size=4, current_version=0)


def test_older_rows_are_checked_under_their_own_version_and_weights_come_back():
    model = tiny()
    policy = as_policy(model)
    params = lambda: [p for p in policy.parameters() if p.requires_grad]  # noqa: E731
    store = VersionStore(keep=2)
    store.remember(0, params())
    old = group(model, version=0)  # sampled (by a faithful replica) under version 0
    step_to_next_version(model)
    store.remember(1, params())
    current = [p.detach().clone() for p in params()]
    fresh = group(model, version=1)

    batch = to_tensors([old, fresh])
    rows = pick_rows(batch, 1, store, sample=8, seed=1)
    assert rows == {0: [0, 1, 2, 3]}
    acc = MismatchAccumulator()
    score_sample(policy, batch, rows, store, acc, micro_batch_size=3, ctx=DistContext())
    checked = acc.result()
    assert checked is not None and checked.kl < 1e-9 and checked.abs_max < 1e-5  # no serving fault: no mismatch
    for p, q in zip(params(), current, strict=True):
        assert torch.equal(p, q)  # the current weights are back before the step

    stats = grpo_step(model, torch.optim.SGD(model.parameters(), lr=0.0), batch, GRPOLossConfig(), micro_batch_size=4,
                      current_version=1, mismatch=acc)
    assert stats.mismatch.tokens == batch.trained_tokens and stats.mismatch.share == 1.0
    assert stats.mismatch.kl < 1e-9

    # Compared with today's weights instead, the policy's own change would read as a mismatch:
    naive = grpo_step(model, torch.optim.SGD(model.parameters(), lr=0.0), to_tensors([{**old, "weight_version": 1}]),
                      GRPOLossConfig(), current_version=1)
    assert naive.mismatch.abs_max > 1e-2


def test_a_serving_fault_on_an_older_version_shows():
    model = tiny()
    policy = as_policy(model)
    store = VersionStore(keep=2)
    store.remember(0, [p for p in policy.parameters() if p.requires_grad])
    served_by_broken_replica = group(tiny(seed=7), version=0)  # other weights than the trainer's version 0
    step_to_next_version(model)
    batch = to_tensors([served_by_broken_replica])
    acc = MismatchAccumulator()
    score_sample(policy, batch, pick_rows(batch, 1, store, 8, seed=0), store, acc, 4, DistContext())
    assert acc.result().abs_mean > 0.05


def test_sample_and_store_are_bounded():
    model = tiny()
    policy = as_policy(model)
    store = VersionStore(keep=2)
    for v in range(4):
        store.remember(v, [p for p in policy.parameters() if p.requires_grad])
    assert store.versions == [2, 3]
    batch = to_tensors([group(model, version=v) for v in (0, 2, 3)])
    rows = pick_rows(batch, 3, store, sample=2, seed=0)
    assert sum(len(r) for r in rows.values()) == 2 and set(rows) == {2}  # version 0 is no longer kept
    assert VersionStore(keep=0).versions == []


def test_each_row_is_checked_under_the_version_that_sampled_it_and_rows_spanning_a_sync_are_left_out():
    """Rows carry their own sampling versions (the replica's); the group's label no longer decides."""
    model = tiny()
    policy = as_policy(model)
    params = lambda: [p for p in policy.parameters() if p.requires_grad]  # noqa: E731
    store = VersionStore(keep=3)
    store.remember(0, params())
    old = group(model)
    step_to_next_version(model)
    store.remember(1, params())
    new = group(model)
    step_to_next_version(model)
    store.remember(2, params())
    # One group, rows sampled by different weights: 0 and 1 by v0, 2 by v1, 3 spans the sync v0 -> v1.
    mixed = {**new, "inference_logprobs": old["inference_logprobs"][:2] + new["inference_logprobs"][2:],
             "sampling_versions": [[0], [0], [1], [0, 1]], "weight_version": 0}
    batch = to_tensors([mixed])
    assert batch.weight_versions == [0, 0, 1, None] and batch.spanning_rows == 1
    rows = pick_rows(batch, 2, store, sample=8, seed=0)
    assert rows == {0: [0, 1], 1: [2]}
    acc = MismatchAccumulator()
    score_sample(policy, batch, rows, store, acc, micro_batch_size=4, ctx=DistContext())
    assert acc.result().abs_max < 1e-5  # every checked token under the weights that sampled it
    # Labelled by the group's oldest version instead (the old rule), row 2 reads as a mismatch.
    relabelled = to_tensors([{k: v for k, v in mixed.items() if k != "sampling_versions"}])
    wrong = MismatchAccumulator()
    score_sample(policy, relabelled, pick_rows(relabelled, 2, store, sample=8, seed=0), store, wrong, 4, DistContext())
    assert wrong.result().abs_max > 1e-2
