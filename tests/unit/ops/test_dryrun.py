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


def test_parameter_estimate_matches_a_real_model():
    config = Qwen2Config(vocab_size=1000, hidden_size=128, intermediate_size=256, num_hidden_layers=3, num_attention_heads=4,
                         num_key_value_heads=2, tie_word_embeddings=False)
    actual = sum(p.numel() for p in Qwen2ForCausalLM(config).parameters())
    assert abs(estimate_params(config) - actual) / actual < 0.03
