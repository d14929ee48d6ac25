"""A tiny random-weight policy of a model family: the family's real tokenizer and chat template on
a two-layer model of its architecture (``ModelFamily.tiny_architecture``).

What it is for: token fidelity, not learning. vLLM serves it with the family's parsers, the scripted
teacher's turns are forced in its sampler (``teacher.forcing``), and every id the proxy records
is one vLLM sampled under its weights: the matrix's family cells. Sizes keep head_dim 64 (vLLM's
CPU attention kernels) and the vocabulary whole (the ids are the point).
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel, Field

from rlstack.common.model_families import MODEL_RECORD, ModelFamily

BUILDER = "rlstack make-tiny-model --model-family"


class FamilyTinySpec(BaseModel):
    hidden_size: int = Field(default=128, ge=64)
    intermediate_size: int = Field(default=256, ge=64)
    num_hidden_layers: int = Field(default=2, ge=1)
    num_attention_heads: int = Field(default=2, ge=1)
    num_key_value_heads: int = Field(default=1, ge=1)
    max_position_embeddings: int = Field(default=32768, ge=512)
    seed: int = 0


def _config(family: ModelFamily, vocab_size: int, spec: FamilyTinySpec, ids: dict[str, int | None]):  # noqa: ANN202 - a PretrainedConfig
    import transformers

    common = dict(vocab_size=vocab_size, hidden_size=spec.hidden_size, intermediate_size=spec.intermediate_size,
                  num_hidden_layers=spec.num_hidden_layers, num_attention_heads=spec.num_attention_heads,
                  num_key_value_heads=spec.num_key_value_heads, head_dim=spec.hidden_size // spec.num_attention_heads,
                  max_position_embeddings=spec.max_position_embeddings, tie_word_embeddings=True, **ids)
    arch = family.tiny_architecture
    if arch == "Qwen3ForCausalLM":
        return transformers.Qwen3Config(**common)
    if arch == "LlamaForCausalLM":
        return transformers.LlamaConfig(**common)
    if arch == "Gemma3ForCausalLM":
        return transformers.Gemma3TextConfig(**common, query_pre_attn_scalar=common["head_dim"], sliding_window=512)
    if arch == "GptOssForCausalLM":
        return transformers.GptOssConfig(**{k: v for k, v in common.items() if k != "intermediate_size"},
                                         intermediate_size=spec.intermediate_size, num_local_experts=4,
                                         num_experts_per_tok=2, sliding_window=128)
    raise ValueError(f"no tiny config for {arch}")


def is_built(out: Path, family: ModelFamily) -> bool:
    record = out / MODEL_RECORD
    return (out / "model.safetensors").exists() and record.exists() and \
        json.loads(record.read_text()).get("model_family") == family.name


def build_family_tiny_model(out: Path, family: ModelFamily, spec: FamilyTinySpec | None = None) -> Path:
    """Write the family's tokenizer, a tiny config of its architecture and random weights to ``out``."""
    import torch
    import transformers
    from transformers import AutoTokenizer, GenerationConfig

    spec = spec or FamilyTinySpec()
    if family.tiny_architecture is None:
        raise ValueError(f"no tiny model of {family.name} is built here: {family.source}")
    tokenizer = AutoTokenizer.from_pretrained(family.tokenizer_dir())
    out.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(out)
    turn_end = tokenizer.convert_tokens_to_ids(family.turn_end)
    ends = [turn_end, *tokenizer.convert_tokens_to_ids(list(family.stop_tokens))]
    ids = {"bos_token_id": tokenizer.bos_token_id, "eos_token_id": ends if len(ends) > 1 else turn_end,
           "pad_token_id": tokenizer.pad_token_id if tokenizer.pad_token_id is not None else turn_end}
    torch.manual_seed(spec.seed)
    config = _config(family, len(tokenizer), spec, ids)
    model = getattr(transformers, family.tiny_architecture)(config)
    model.generation_config = GenerationConfig(eos_token_id=ids["eos_token_id"], pad_token_id=ids["pad_token_id"],
                                               bos_token_id=tokenizer.bos_token_id)
    model.save_pretrained(out, safe_serialization=True)
    (out / MODEL_RECORD).write_text(json.dumps({"builder": BUILDER, "model_family": family.name, "tokenizer": family.source,
                                                "architecture": family.tiny_architecture, **spec.model_dump()}, indent=2) + "\n")
    return out
