import subprocess

import pytest

from rlstack.inference.command import WORKER_EXTENSION, vllm_command
from rlstack.inference.config import InferenceSettings
from tests.conftest import VLLM_PYTHON


def test_cpu_command_has_the_rl_flags_and_env():
    argv, env = vllm_command(InferenceSettings(model="m", model_family="demo", served_model_name="policy", vllm_port=9001, api_key="k", kv_cache_gib=2), python="py")
    assert argv[:3] == ["py", "-m", "vllm.entrypoints.openai.api_server"]
    joined = " ".join(argv)
    for flag in ("--served-model-name policy", "--port 9001", f"--worker-extension-cls {WORKER_EXTENSION}", "--enable-lora",
                 "--enable-prefix-caching", "--enforce-eager", "--api-key k", "--enable-auto-tool-choice"):
        assert flag in joined
    assert env["VLLM_TARGET_DEVICE"] == "cpu" and env["VLLM_CPU_KVCACHE_SPACE"] == "2"
    assert env["VLLM_SERVER_DEV_MODE"] == "1" and env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == "True"


def test_cuda_command_sets_gpu_memory_and_no_cpu_env():
    argv, env = vllm_command(InferenceSettings(device="cuda", model_family="demo", enforce_eager=False, enable_lora=False), python="py")
    assert "--gpu-memory-utilization" in argv and "--enforce-eager" not in argv and "--enable-lora" not in argv
    assert "VLLM_TARGET_DEVICE" not in env and env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == "False"


def test_advertise_url_defaults_to_a_reachable_host():
    assert str(InferenceSettings(vllm_host="0.0.0.0", vllm_port=8001).advertise_url) == "http://127.0.0.1:8001/"


def test_the_parsers_come_from_the_models_family_unless_named(tmp_path):
    import json

    from rlstack.common.model_families import ModelFamilyError

    model = tmp_path / "qwen3"
    model.mkdir()
    (model / "rlstack-model.json").write_text(json.dumps({"model_family": "qwen3"}))
    argv = vllm_command(InferenceSettings(model=str(model)), python="py")[0]
    assert argv[argv.index("--tool-call-parser") + 1] == "hermes" and argv[argv.index("--reasoning-parser") + 1] == "qwen3"
    argv = vllm_command(InferenceSettings(model=str(model), model_family="llama3.1"), python="py")[0]
    assert "--tool-call-parser" not in argv and "--reasoning-parser" not in argv  # its shipped template has no tool format
    argv = vllm_command(InferenceSettings(model=str(model), model_family="llama3.1", tool_call_parser="llama3_json"), python="py")[0]
    assert argv[argv.index("--tool-call-parser") + 1] == "llama3_json"
    with pytest.raises(ModelFamilyError, match="cannot tell the model family of Qwen/Qwen3-8B.*--model-family"):
        vllm_command(InferenceSettings(model="Qwen/Qwen3-8B"), python="py")


def test_the_family_read_from_the_model_directory_is_pinned_in_the_settings_once(tmp_path):
    """``check_family`` (before vLLM starts) reads the directory; the command line and the registration
    then take the name it pinned instead of reading ``config.json`` and the tokenizer again."""
    (tmp_path / "rlstack-model.json").write_text('{"model_family": "demo"}')
    code = ("from rlstack.inference.__main__ import check_family; from rlstack.inference.config import InferenceSettings; "
            f"s = InferenceSettings(model={str(tmp_path)!r}); assert s.model_family is None; check_family(s); print(s.model_family)")
    done = subprocess.run([str(VLLM_PYTHON), "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "demo"
