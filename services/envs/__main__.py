"""``python -m rlstack.envs``: one environment server."""

from rlstack.common.entrypoint import run_service
from rlstack.envs.config import EnvSettings

if __name__ == "__main__":
    run_service(EnvSettings, "rlstack.envs.app:build_app")
