"""``python -m rlstack.inference``: one vLLM replica with its registration sidecar."""

from rlstack.common.entrypoint import run_service
from rlstack.inference.config import InferenceSettings

if __name__ == "__main__":
    run_service(InferenceSettings, "rlstack.inference.app:build_app")
