"""Build the demo policy: a byte-level BPE tokenizer with a ChatML template and a tiny Qwen2.

No model can be downloaded here, so the demo model is made: the tokenizer is trained on
``corpus.training_corpus()``, the weights are random (a supervised warm start comes later), and
both are written with ``save_pretrained`` so transformers and vLLM load them like any
Hugging Face model directory. The context is long enough for claude-code's first request.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable
from pathlib import Path

from pydantic import BaseModel, Field

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>"]
TEMPLATE = Path(__file__).with_name("chat_template.jinja")


class TinyModelSpec(BaseModel):
    """Shape of the demo model; defaults give ~3.6M parameters and head_dim 64 (vLLM's CPU kernels)."""

    vocab_size: int = Field(default=8192, ge=512, le=65536)
    hidden_size: int = Field(default=256, ge=64)
    intermediate_size: int = Field(default=688, ge=64)
    num_hidden_layers: int = Field(default=2, ge=1)
    num_attention_heads: int = Field(default=4, ge=1)
    num_key_value_heads: int = Field(default=2, ge=1)
    max_position_embeddings: int = Field(default=32768, ge=512)
    seed: int = 0


def train_tokenizer(vocab_size: int, extra_text: Iterable[str] = (), template: Path = TEMPLATE,
                    prose_bytes: int = 4_000_000):
    """BPE on ``corpus.training_corpus()`` plus ``extra_text`` (an agent's own requests, say)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    from rlstack.modelkit.corpus import training_corpus

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    tok.train_from_iterator(itertools.chain(training_corpus(prose_bytes), extra_text), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>", unk_token=None,
        model_max_length=1 << 30, clean_up_tokenization_spaces=False,
    )
    fast.chat_template = template.read_text()
    return fast


def is_current(out: Path, template: Path = TEMPLATE) -> bool:
    """A model directory built by this builder with today's chat template (older ones are rebuilt)."""
    written = out / "chat_template.jinja"
    return (out / "model.safetensors").exists() and written.exists() and written.read_text() == template.read_text()


def build_tiny_model(out: Path, spec: TinyModelSpec | None = None, extra_text: Iterable[str] = (),
                     template: Path = TEMPLATE, prose_bytes: int = 4_000_000) -> Path:
    """Write tokenizer, config and random weights to ``out``; returns ``out``."""
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    spec = spec or TinyModelSpec()
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = train_tokenizer(spec.vocab_size, extra_text, template, prose_bytes)
    tokenizer.save_pretrained(out)
    torch.manual_seed(spec.seed)
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_hidden_layers,
        num_attention_heads=spec.num_attention_heads,
        num_key_value_heads=spec.num_key_value_heads,
        max_position_embeddings=spec.max_position_embeddings,
        tie_word_embeddings=True,
        rope_theta=10000.0,
        bos_token_id=tokenizer.convert_tokens_to_ids("<|endoftext|>"),
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        torch_dtype="float32",
    )
    model = Qwen2ForCausalLM(config)
    model.generation_config = GenerationConfig(eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    model.save_pretrained(out, safe_serialization=True)
    (out / "rlstack-model.json").write_text(json.dumps({"builder": "rlstack make-tiny-model", **spec.model_dump()}, indent=2))
    return out
