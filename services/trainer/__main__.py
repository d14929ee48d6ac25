"""``python -m rlstack.trainer``: the GRPO trainer service."""

from rlstack.common.entrypoint import run_service
from rlstack.trainer.config import TrainerSettings

if __name__ == "__main__":
    run_service(TrainerSettings, "rlstack.trainer.app:build_app")
