import pytest
import yaml
from transformers import Qwen2Config, Qwen2ForCausalLM, T5Config

from rlstack.ops.dryrun import estimate_params, run_dryrun
from tests.conftest import REPO

EXAMPLE = REPO / "examples" / "local-arithmetic.yaml"
CHART = REPO / "charts" / "rlstack"


def example_with(tmp_path, model, inference_args=(), trainer_args=()):
    config = yaml.safe_load(EXAMPLE.read_text())
    for spec in config["services"]:
        if spec["name"] in ("inference", "trainer"):
            spec["args"][spec["args"].index("--model") + 1] = str(model)
        if spec["name"] == "inference":
            spec["args"] += list(inference_args)
        if spec["name"] == "trainer":
            spec["args"] += list(trainer_args)
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def failed(findings) -> set[str]:
    return {f.check for f in findings if not f.ok}


def test_the_shipped_example_passes(tiny_model, tmp_path):
    _, findings, memory = run_dryrun(example_with(tmp_path, tiny_model))
    assert failed(findings) == set() and memory["params"] > 1_000_000


@pytest.mark.parametrize(("inference_args", "trainer_args", "check"), [
    (["--tensor-parallel-size", "3"], [], "tensor parallel"),
    ([], ["--sync-mode", "lora", "--lora-rank", "64"], "lora"),
    ([], ["--sync-mode", "ipc"], "ipc sync"),
])
def test_bad_run_configs_are_caught(tiny_model, tmp_path, inference_args, trainer_args, check):
    path = example_with(tmp_path, tiny_model, inference_args, trainer_args)
    if check == "ipc sync":  # ipc is checked against TP: make it impossible
        path = example_with(tmp_path, tiny_model, ["--tensor-parallel-size", "2"], trainer_args)
    assert check in failed(run_dryrun(path)[1])


def test_each_service_resolves_through_its_own_settings_model(tiny_model, tmp_path):
    """A typo in a flag or an impossible value is named before anything starts, as the service would name it."""
    findings = run_dryrun(example_with(tmp_path, tiny_model, trainer_args=["--stepz", "3"]))[1]
    bad = next(f for f in findings if f.check == "settings")
    assert not bad.ok and "trainer" in bad.detail and "stepz" in bad.detail
    findings = run_dryrun(example_with(tmp_path, tiny_model, inference_args=["--max-lora-rank", "0"]))[1]
    assert "max_lora_rank" in next(f for f in findings if f.check == "settings").detail


def test_unknown_addresses_and_models_are_caught(tiny_model, tmp_path):
    path = example_with(tmp_path, tiny_model)
    path.write_text(path.read_text().replace("{batcher.url}", "{batcherr.url}", 1))
    assert "addresses" in failed(run_dryrun(path)[1])
    T5Config().save_pretrained(tmp_path / "t5")
    assert "decoder-only causal LM" in failed(run_dryrun(example_with(tmp_path, tmp_path / "t5"))[1])
    assert "model config" in failed(run_dryrun(example_with(tmp_path, tmp_path / "missing"))[1])


def test_values_overlays_merge_the_chart_defaults_and_check_gpu_memory(tiny_model, tmp_path):
    _, findings, _ = run_dryrun(CHART / "values-cpu.yaml", str(tiny_model))
    assert failed(findings) == set()
    small = tmp_path / "values.yaml"
    small.write_text(yaml.safe_dump({**yaml.safe_load((CHART / "values.yaml").read_text()), "gpuMemoryGiB": 0.001}))
    assert "memory per GPU" in failed(run_dryrun(small, str(tiny_model))[1])


def test_the_report_says_whether_the_trainer_shares_prefixes(tiny_model, tmp_path):
    assert run_dryrun(CHART / "values.yaml", str(tiny_model))[2]["trainer"]["share_prefix"] == 64
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    for trainer, shared in (({"sharePrefix": None}, None), ({"packTokens": None}, None), ({"sharePrefix": 1024}, 1024)):
        overlay = tmp_path / "values.yaml"
        overlay.write_text(yaml.safe_dump({**values, "trainer": {**values["trainer"], **trainer}}))
        assert run_dryrun(overlay, str(tiny_model))[2]["trainer"]["share_prefix"] == shared, trainer


def test_parameter_estimate_matches_a_real_model():
    config = Qwen2Config(vocab_size=1000, hidden_size=128, intermediate_size=256, num_hidden_layers=3, num_attention_heads=4,
                         num_key_value_heads=2, tie_word_embeddings=False)
    actual = sum(p.numel() for p in Qwen2ForCausalLM(config).parameters())
    assert abs(estimate_params(config) - actual) / actual < 0.03


def shaped(tmp_path, shape):
    from rlstack.trainer.shapes import qwen2_config

    cfg = qwen2_config(shape)
    cfg.architectures = ["Qwen2ForCausalLM"]
    cfg.save_pretrained(tmp_path / shape)
    return str(tmp_path / shape)


def values_with(tmp_path, env, gpus=1):
    data = yaml.safe_load((CHART / "values.yaml").read_text())
    data["trainer"] = {**data["trainer"], "gpus": gpus, "env": {**data["trainer"]["env"], **env}}
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_trainer_memory_refuses_what_cannot_fit_and_says_what_to_change(tmp_path):
    model = shaped(tmp_path, "qwen2-7b")
    full = {"RLSTACK_TRAINER_PACK_TOKENS": "32768", "RLSTACK_TRAINER_ACTIVATION_CHECKPOINTING": "true"}
    _, findings, memory = run_dryrun(values_with(tmp_path, full), model)
    refused = next(f for f in findings if f.check == "trainer memory")
    assert not refused.ok and "states" in refused.detail and "cpu_offload" in refused.detail
    assert memory["trainer_gib_by_part"]["states"] > 100  # 16 bytes x 7.6B parameters on one GPU
    lora = {**full, "RLSTACK_TRAINER_SYNC_MODE": "lora", "RLSTACK_TRAINER_LORA_RANK": "16"}
    assert "trainer memory" not in failed(run_dryrun(values_with(tmp_path, lora), model)[1])  # 7B LoRA at 32k on 80 GB
    assert "trainer memory" not in failed(run_dryrun(values_with(tmp_path, full, gpus=8), model)[1])  # sharded over 8
    long_rows = {"RLSTACK_TRAINER_PACK_TOKENS": "65536"}
    refused = next(f for f in run_dryrun(values_with(tmp_path, long_rows), shaped(tmp_path, "qwen2-1.5b"))[1] if f.check == "trainer memory")
    assert "activation_checkpointing" in refused.detail


def test_trainer_memory_shrinks_with_ranks_offload_and_checkpointing():
    from rlstack.ops.dryrun import TrainerShape, trainer_memory
    from rlstack.trainer.shapes import qwen2_config

    cfg = qwen2_config("qwen2-0.5b")
    base = trainer_memory(cfg, TrainerShape(tokens_per_micro_batch=32768))
    assert trainer_memory(cfg, TrainerShape(tokens_per_micro_batch=32768, gpus=4))["states"] == pytest.approx(base["states"] / 4)
    assert trainer_memory(cfg, TrainerShape(tokens_per_micro_batch=32768, cpu_offload=True))["states"] == 0
    checkpointed = trainer_memory(cfg, TrainerShape(tokens_per_micro_batch=32768, activation_checkpointing=True))
    assert checkpointed["activations"] < base["activations"] / 5 and checkpointed["total"] < 80 * 1024**3


def test_values_policies_whose_claims_overlap_by_a_prefix_are_refused_before_an_install(tiny_model, tmp_path):
    """The chart refuses a name two policies list; a prefix one policy's claim covers in another's
    (``claude-*`` and ``claude-haiku-*``) only the services see: dryrun reads the table as they do."""
    values = yaml.safe_load((CHART / "values-two-policies.yaml").read_text())
    findings = run_dryrun(CHART / "values-two-policies.yaml", str(tiny_model))[1]
    assert "policies" not in failed(findings)
    values["policies"][0]["servedNames"] = ["claude-*"]
    overlay = tmp_path / "values.yaml"
    overlay.write_text(yaml.safe_dump(values))
    findings = run_dryrun(overlay, str(tiny_model))[1]
    assert "policies" in failed(findings)
    assert any("'lead' claims 'claude-*' and 'helper' claims 'claude-haiku-*'" in f.detail for f in findings)


def test_a_config_of_two_policies_is_read_through_its_services_settings(tiny_model, tmp_path):
    """The policies block's passed check once stopped every service's settings from being read (the plan
    then showed the trainer's defaults, not the config's)."""
    config = yaml.safe_load((REPO / "examples" / "local-agent-claude-code-team.yaml").read_text())
    for policy in config["policies"]:
        policy["model"] = str(tiny_model)
    path = tmp_path / "team.yaml"
    path.write_text(yaml.safe_dump(config))
    plan, findings, _ = run_dryrun(path)
    assert failed(findings) == set() and {"policies", "settings"} <= {f.check for f in findings}
    assert (plan.trainer.tokens_per_micro_batch, plan.trainer.share_prefix) == (4096, 64)  # the config's pack_tokens
