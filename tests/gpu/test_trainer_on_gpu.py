"""The trainer on a CUDA GPU (``pytest -m gpu``; skipped without CUDA, so never run in CI here).

Each comparison prints its figures (run with ``-s``) and checks them against a stated tolerance;
where bf16 noise sets the tolerance, a negative control (a layout that is wrong on purpose) shows
the check would catch a real error. Figures from the last GPU run are in docs/trainer.md.
"""

from __future__ import annotations

import dataclasses
import os

import pytest
import torch

from rlstack.common.ports import free_port
from rlstack.trainer import attention
from rlstack.trainer.batch import to_tensors
from rlstack.trainer.config import TrainerSettings
from rlstack.trainer.distributed import DistContext, init_distributed, shutdown
from rlstack.trainer.engine import Engine
from rlstack.trainer.packing import micro_batches
from rlstack.trainer.step import policy_logprobs

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]
CUDA = torch.device("cuda")


def small_model(dtype: torch.dtype = torch.float32, attn: str = "sdpa"):  # noqa: ANN201 - a transformers model
    from transformers import AutoModelForCausalLM, Qwen2Config

    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=1024, hidden_size=256, intermediate_size=704, num_hidden_layers=4, num_attention_heads=8,
                         num_key_value_heads=2, tie_word_embeddings=True, max_position_embeddings=65536)
    with torch.device(CUDA):
        return AutoModelForCausalLM.from_config(config, dtype=dtype, attn_implementation=attn)


def groups(seed: int = 0, n: int = 4, size: int = 4, prompt: int = 48, completion: tuple[int, int] = (16, 200)) -> list[dict]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        head = torch.randint(1, 1024, (prompt,), generator=g).tolist()
        tails = [torch.randint(1, 1024, (int(torch.randint(*completion, (1,), generator=g)),), generator=g).tolist() for _ in range(size)]
        out.append({"tokens": [head + t for t in tails], "masks": [[-100] * prompt + t for t in tails], "weight_version": 0,
                    "scores": [float(i % 2) for i in range(size)],
                    "inference_logprobs": [[0.0] * prompt + [-6.9] * len(t) for t in tails]})
    return out


def logprobs_and_grads(model, batch, pack: bool, bounds: bool = True, bf16: bool = True) -> tuple[torch.Tensor, torch.Tensor]:  # noqa: ANN001
    """Trained tokens' logprobs (in sequence order) and the flat gradient of their sum, under bf16 autocast."""
    model.zero_grad(set_to_none=True)
    if pack:
        (row,) = micro_batches(batch, 0, 1, 64, 1 << 20, None)
        row = row.to(CUDA)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16):
            lp = policy_logprobs(model, row.input_ids, None, row.targets, row.loss_mask, position_ids=row.position_ids if bounds else None,
                                 sequence_lengths=row.sequence_lengths if bounds else None, cu_seq_lens=row.cu_seq_lens if bounds else None)
        picked = lp[row.loss_mask]
    else:
        mask = batch.loss_mask.to(CUDA)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16):
            lp = policy_logprobs(model, batch.input_ids.to(CUDA), batch.attention_mask.to(CUDA), batch.targets.to(CUDA), mask)
        picked = lp[mask]
    picked.sum().backward()
    grad = torch.cat([p.grad.flatten() for p in model.parameters()])
    return picked.detach().float(), grad.float()


def test_packed_rows_on_the_varlen_kernel_match_padded_rows():
    attn = attention.register()
    batch = to_tensors(groups())
    reference = small_model()  # float32, sdpa, padded: the exact values
    lp_ref, _ = logprobs_and_grads(reference, batch, pack=False, bf16=False)
    model = small_model(attn=attn)
    calls = []
    kernel = attention._varlen_kernel()
    assert kernel is not None, "this torch has no torch.nn.attention.varlen"
    lp_pad, g_pad = logprobs_and_grads(model, batch, pack=False)
    original = attention._varlen

    def spy(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        calls.append(1)
        return original(*args, **kwargs)

    attention._varlen = spy
    try:
        lp_pack, g_pack = logprobs_and_grads(model, batch, pack=True)
    finally:
        attention._varlen = original
    lp_wrong, _ = logprobs_and_grads(model, batch, pack=True, bounds=False)  # one long causal sequence: attends across
    err = {name: float((lp - lp_ref).abs().mean()) for name, lp in (("padded", lp_pad), ("packed", lp_pack), ("wrong", lp_wrong))}
    cos = float(torch.nn.functional.cosine_similarity(g_pack, g_pad, dim=0))
    print(f"\nmean |logprob - float32| padded {err['padded']:.2e} packed {err['packed']:.2e} wrong {err['wrong']:.2e}; "
          f"max |packed - padded| {float((lp_pack - lp_pad).abs().max()):.2e}; grad cosine packed/padded {cos:.6f}")
    assert calls, "the packed row did not reach the varlen kernel"
    assert err["packed"] <= 2 * err["padded"] + 1e-4
    assert err["wrong"] > 3 * err["packed"], "the negative control is within the tolerance: the check cannot tell"
    assert cos > 0.999


def agent_groups(seed: int = 1) -> list[dict]:
    """What prefix trees are for: a group over one long prompt, and a group of trials whose later
    segments repeat the trial's first turns (trained again, as a compacted or resumed segment is)."""
    g = torch.Generator().manual_seed(seed)

    def rand(n: int) -> list[int]:
        return torch.randint(1, 1024, (n,), generator=g).tolist()

    prompt = rand(600)
    tokens, trials = [], []
    for trial in range(4):
        turn = prompt + rand(80 + 20 * trial)
        for _ in range(2):
            tokens.append(turn + rand(40))
            trials.append(trial)
            turn = tokens[-1] + rand(30)
    nested = {"tokens": tokens, "masks": [[-100] * len(prompt) + t[len(prompt):] for t in tokens], "trials": trials, "weight_version": 0,
              "scores": [float(i % 2) for i in trials], "inference_logprobs": [[0.0] * len(prompt) + [-6.9] * (len(t) - len(prompt)) for t in tokens]}
    return groups(seed, n=2, size=4, prompt=400, completion=(16, 200)) + [nested]


def tree_logprobs_and_grads(model, batch, bf16: bool = True, isolated: bool = False) -> tuple[torch.Tensor, torch.Tensor]:  # noqa: ANN001
    """As ``logprobs_and_grads`` on one row of prefix trees, the trained tokens put back in sequence order.
    ``isolated``: every node attends to its own tokens only (a wrong layout: the negative control)."""
    model.zero_grad(set_to_none=True)
    (row,) = micro_batches(batch, 0, 1, 64, 1 << 20, None, share_prefix=16)
    tree = row.tree
    assert tree is not None and row.input_ids.shape[1] < row.targets.shape[1], "nothing was shared"
    if isolated:
        tree = dataclasses.replace(tree, key_lengths=tree.node_lengths, key_index=torch.arange(row.input_ids.shape[1]), cu_k=tree.cu_q)
    row = dataclasses.replace(row, tree=tree).to(CUDA)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16):
        lp = policy_logprobs(model, row.input_ids, None, row.targets, row.loss_mask, position_ids=row.position_ids, tree=row.tree)
    per_lp = dict(zip(tree.sequences, torch.split(lp[0], tree.sequence_lengths)))
    per_mask = dict(zip(tree.sequences, torch.split(row.loss_mask[0], tree.sequence_lengths)))
    picked = torch.cat([per_lp[i][per_mask[i]] for i in sorted(per_lp)])
    picked.sum().backward()
    grad = torch.cat([p.grad.flatten() for p in model.parameters()])
    return picked.detach().float(), grad.float()


def test_prefix_tree_rows_on_the_varlen_kernel_match_packed_rows():
    """bf16 on the varlen kernel (keys gathered per node, causal aligned to their end): as close to the
    float32 values as packed rows are; float32 (SDPA node by node) equal to packed rows."""
    attn = attention.register()
    batch = to_tensors(agent_groups())
    lp_ref, _ = logprobs_and_grads(small_model(), batch, pack=False, bf16=False)
    model = small_model(attn=attn)
    lp_pack, g_pack = logprobs_and_grads(model, batch, pack=True)
    calls = []
    kernel = attention._varlen_kernel

    def spy():  # noqa: ANN202
        calls.append(1)
        return kernel()

    attention._varlen_kernel = spy
    try:
        lp_tree, g_tree = tree_logprobs_and_grads(model, batch)
    finally:
        attention._varlen_kernel = kernel
    lp_wrong, _ = tree_logprobs_and_grads(model, batch, isolated=True)
    err = {name: float((lp - lp_ref).abs().mean()) for name, lp in (("packed", lp_pack), ("tree", lp_tree), ("wrong", lp_wrong))}
    cos = float(torch.nn.functional.cosine_similarity(g_tree, g_pack, dim=0))
    lp32_pack, g32_pack = logprobs_and_grads(model, batch, pack=True, bf16=False)
    lp32_tree, g32_tree = tree_logprobs_and_grads(model, batch, bf16=False)
    exact = float((lp32_tree - lp32_pack).abs().max())
    grad_rel = float((g32_tree - g32_pack).norm() / g32_pack.norm())
    print(f"\nmean |logprob - float32| packed {err['packed']:.2e} tree {err['tree']:.2e} wrong {err['wrong']:.2e}; "
          f"grad cosine tree/packed (bf16) {cos:.6f}; float32 tree vs packed: max |logprob| {exact:.2e}, grad rel {grad_rel:.2e}")
    assert calls, "the tree row did not reach the varlen kernel"
    assert err["tree"] <= 2 * err["packed"] + 1e-4
    assert err["wrong"] > 3 * err["tree"], "the negative control is within the tolerance: the check cannot tell"
    assert cos > 0.999
    assert exact < 1e-4 and grad_rel < 1e-4


def test_fsdp2_world_size_one_matches_a_plain_process():
    """The first step's loss of an FSDP2-sharded Engine (bf16 mixed precision) vs a plain process (bf16 autocast)."""
    batch = groups(seed=1)
    losses = {}
    for launched in (False, True):
        if launched:
            os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
            ctx = init_distributed("cuda")
        else:
            ctx = DistContext(device=CUDA)
        settings = TrainerSettings(model="random", sync_mode="none", lr=1e-4, pack_tokens=4096, mismatch_versions=0)
        engine = Engine(settings, ctx)
        engine.load(None, base=small_model())
        losses[launched] = [engine.step(batch, 0).loss for _ in range(2)]
        if launched:
            shutdown(ctx)
            for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
                os.environ.pop(key)
    print(f"\nplain {losses[False]} fsdp2 {losses[True]}")
    assert losses[True][0] == pytest.approx(losses[False][0], abs=2e-3)
    assert losses[True][1] == pytest.approx(losses[False][1], abs=5e-3)


def test_bf16_losses_stay_near_float32(monkeypatch):
    """Three steps in bf16 (autocast, varlen kernel) and in float32 (the per-sequence SDPA path on CUDA)."""
    batch = groups(seed=2)

    def three_steps() -> list[float]:
        settings = TrainerSettings(model="random", sync_mode="none", lr=1e-3, pack_tokens=4096, mismatch_versions=0)
        engine = Engine(settings, DistContext(device=CUDA))
        engine.load(None, base=small_model())
        return [engine.step(batch, 0).loss for _ in range(3)]

    bf16 = three_steps()
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)  # the step's autocast off: float32 throughout
    monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", False)
    float32 = three_steps()
    print(f"\nbf16 {bf16} float32 {float32}")
    for a, b in zip(bf16, float32):
        assert a == pytest.approx(b, rel=2e-2, abs=2e-3)


def _peak_delta(model, tokens: int) -> int:  # noqa: ANN001
    """Extra device memory of one forward + backward on a packed row of ``tokens`` (sequences of 4096)."""
    lengths = [4096] * (tokens // 4096)
    ids = torch.randint(1, 1024, (1, tokens), device=CUDA)
    positions = torch.cat([torch.arange(n) for n in lengths]).unsqueeze(0).to(CUDA)
    bounds = attention.sequence_bounds(lengths).to(CUDA)
    mask = torch.zeros(1, tokens, dtype=torch.bool, device=CUDA)
    mask[:, -64:] = True
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        lp = policy_logprobs(model, ids, None, ids, mask, position_ids=positions, sequence_lengths=lengths, cu_seq_lens=bounds)
    lp.sum().backward()
    torch.cuda.synchronize()
    model.zero_grad(set_to_none=True)
    return torch.cuda.max_memory_allocated() - base


def test_a_32k_token_packed_row_costs_memory_linear_in_its_length():
    """Under the varlen kernel a 32k row costs ~4x an 8k row; transformers' dense block mask (sdpa) grows with T²."""
    ratios = {}
    for attn in (attention.register(), "sdpa"):
        model = small_model(attn=attn)
        small, large = _peak_delta(model, 8192), _peak_delta(model, 32768)
        ratios[attn] = large / small
        print(f"\n{attn}: peak extra memory 8k row {small / 2**20:.0f} MiB, 32k row {large / 2**20:.0f} MiB, ratio {large / small:.2f}")
        del model
    assert ratios[attention.NAME] < 5.0
    assert ratios["sdpa"] > ratios[attention.NAME], "the negative control: the dense mask should grow faster"
