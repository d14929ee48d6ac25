"""``python -m rlstack.batcher``: parse settings, then import the app (so --help is instant)."""

from rlstack.batcher.config import BatcherSettings
from rlstack.common.entrypoint import run_service

if __name__ == "__main__":
    run_service(BatcherSettings, "rlstack.batcher.app:build_app")
