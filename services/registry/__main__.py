"""``python -m rlstack.registry``: parse settings, then import the app (so --help is instant)."""

from rlstack.common.entrypoint import run_service
from rlstack.registry.config import RegistrySettings

if __name__ == "__main__":
    run_service(RegistrySettings, "rlstack.registry.app:build_app")
