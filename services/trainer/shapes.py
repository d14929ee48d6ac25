"""Model shapes to build without a download: Qwen2 sizes for benchmarks and memory arithmetic.

Random weights in the published shapes (hidden size, layers, heads, vocabulary) cost the same
compute and memory as the released models, which cannot be fetched here.
"""

from __future__ import annotations

from typing import Any

QWEN2: dict[str, dict[str, Any]] = {
    "qwen2-0.5b": {"hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24, "num_attention_heads": 14,
                   "num_key_value_heads": 2, "vocab_size": 151936, "tie_word_embeddings": True},
    "qwen2-1.5b": {"hidden_size": 1536, "intermediate_size": 8960, "num_hidden_layers": 28, "num_attention_heads": 12,
                   "num_key_value_heads": 2, "vocab_size": 151936, "tie_word_embeddings": True},
    "qwen2-7b": {"hidden_size": 3584, "intermediate_size": 18944, "num_hidden_layers": 28, "num_attention_heads": 28,
                 "num_key_value_heads": 4, "vocab_size": 152064, "tie_word_embeddings": False},
    "tiny": {"hidden_size": 256, "intermediate_size": 688, "num_hidden_layers": 2, "num_attention_heads": 4,
             "num_key_value_heads": 2, "vocab_size": 8192, "tie_word_embeddings": True},
}


def qwen2_config(shape: str, max_position_embeddings: int = 32768):  # noqa: ANN201 - a transformers Qwen2Config
    """A ``Qwen2Config`` of a named shape (see ``QWEN2``)."""
    from transformers import Qwen2Config

    if shape not in QWEN2:
        raise ValueError(f"unknown shape {shape!r}; one of {sorted(QWEN2)}")
    return Qwen2Config(**QWEN2[shape], max_position_embeddings=max_position_embeddings, rope_theta=1_000_000.0)
