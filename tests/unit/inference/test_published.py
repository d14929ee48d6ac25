"""Which published version a (re)starting replica loads: the newest complete one (issue 22, item 3)."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import save_file

from rlstack.inference.command import vllm_command
from rlstack.inference.config import InferenceSettings
from rlstack.inference.published import latest_published


def full(path: Path, shards: int = 1) -> Path:
    path.mkdir(parents=True)
    (path / "config.json").write_text("{}")
    if shards == 1:
        save_file({"w": torch.ones(64, 64)}, path / "model.safetensors")
    else:
        names = {f"w{i}": f"model-{i:05d}-of-{shards:05d}.safetensors" for i in range(shards)}
        for key, name in names.items():
            save_file({key: torch.ones(32, 32)}, path / name)
        (path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": names}))
    return path


def truncate(file: Path) -> None:
    data = file.read_bytes()
    file.write_bytes(data[: len(data) - 100])


def test_the_newest_whole_version_wins_and_a_half_written_one_is_passed_over(tmp_path):
    full(tmp_path / "v000002")
    full(tmp_path / "v000010", shards=3)
    writing = full(tmp_path / "v000011")
    truncate(writing / "model.safetensors")  # the trainer is saving it right now
    (tmp_path / "v000012").mkdir()  # config.json not written yet
    full(tmp_path / "v000013", shards=2)
    (tmp_path / "v000013" / "model-00001-of-00002.safetensors").unlink()  # a shard still missing
    (tmp_path / "checkpoints").mkdir()
    found = latest_published(tmp_path)
    assert found is not None and (found.version, found.kind) == (10, "full")


def test_an_adapter_version_and_no_version(tmp_path):
    assert latest_published(tmp_path / "absent") is None and latest_published(tmp_path) is None
    adapter = tmp_path / "v000004"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text("{}")
    save_file({"a": torch.zeros(4, 4)}, adapter / "adapter_model.safetensors")
    found = latest_published(tmp_path)
    assert found is not None and (found.version, found.kind) == (4, "adapter")


def test_a_published_version_is_loaded_with_the_base_models_tokenizer():
    argv, _ = vllm_command(InferenceSettings(model="/data/models/policy", model_family="demo"), python="py", weights="/data/weights/rl/v000007")
    assert argv[argv.index("--model") + 1] == "/data/weights/rl/v000007"
    assert argv[argv.index("--tokenizer") + 1] == "/data/models/policy"
    assert "--tokenizer" not in vllm_command(InferenceSettings(model="m", model_family="demo"), python="py")[0]
