"""``python -m rlstack.proxy``: the LiteLLM proxy with rlstack's layers, fully offline."""

import os
import secrets
import tempfile

from rlstack.common.entrypoint import run_service
from rlstack.common.metrics import MULTIPROCESS_ENV
from rlstack.proxy.config import ProxySettings

OFFLINE_ENV = {
    # LiteLLM fetches a model cost map and telemetry from the internet by default.
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    "LITELLM_OFFLINE_MODE": "true",
    "LITELLM_TELEMETRY": "False",
    "LITELLM_LOG": "ERROR",
    "DISABLE_SCHEMA_UPDATE": "true",
}


def prepare_litellm_env(settings: ProxySettings) -> None:
    """Must run before litellm is imported: it reads these at import time."""
    for key, value in OFFLINE_ENV.items():
        os.environ.setdefault(key, value)
    # Model calls are authorised by our trial-key hook; the master key only guards LiteLLM's
    # admin routes, so an unset one becomes a random, unknowable one rather than none at all.
    if settings.master_key:
        os.environ["LITELLM_MASTER_KEY"] = settings.master_key.get_secret_value()
    else:
        os.environ.setdefault("LITELLM_MASTER_KEY", f"sk-{secrets.token_hex(24)}")  # workers inherit the parent's
    if settings.workers > 1 and not os.environ.get(MULTIPROCESS_ENV):
        # prometheus_client reads this at import: every worker's metrics land in one directory and
        # /metrics, whichever worker answers it, sums them.
        os.environ[MULTIPROCESS_ENV] = tempfile.mkdtemp(prefix="rlstack-proxy-metrics-")


if __name__ == "__main__":
    run_service(ProxySettings, "rlstack.proxy.app:ProxyApp", before_import=prepare_litellm_env,
                worker_factory="rlstack.proxy.app:worker_app")
