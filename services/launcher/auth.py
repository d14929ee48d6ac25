"""Auth for a local stack, on by default: ``rlstack up`` mints the tokens and hands each service
and client the ones it needs, as environment variables; nothing to configure.

One bearer token per server (batcher, registry, trainer, env servers) and one trial-key secret
shared by the proxy and the env servers, fresh per run. They are written to
``<run dir>/auth.json`` (mode 0600) for a person's curl or ``rlstack doctor``. A run config turns
this off with ``auth: false`` (an unmodified Atropos client, which sends no token).
"""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path

from pydantic import BaseModel

from rlstack.common.registry_client import REGISTRY_TOKEN_ENV

AUTH_FILE = "auth.json"


class RunTokens(BaseModel):
    batcher: str
    registry: str
    trainer: str
    env: str
    trial_key_secret: str

    @classmethod
    def mint(cls) -> RunTokens:
        return cls(**{name: secrets.token_urlsafe(32) for name in cls.model_fields})

    def service_env(self, module: str) -> dict[str, str]:
        """What the service started as ``python -m <module>`` gets: its own server token, the tokens
        of the servers it calls, the trial-key secret where trial keys are minted or checked."""
        service = module.removeprefix("rlstack.").split(".")[0]
        env = {REGISTRY_TOKEN_ENV: self.registry}  # every registry client (proxy, trainer, envs, replicas)
        if service == "batcher":
            env["RLSTACK_BATCHER_AUTH_TOKEN"] = self.batcher
        elif service == "registry":
            env["RLSTACK_REGISTRY_AUTH_TOKEN"] = self.registry
        elif service == "inference":
            env["RLSTACK_INFERENCE_REGISTRY_TOKEN"] = self.registry
        elif service == "proxy":
            env["RLSTACK_PROXY_TRIAL_KEY_SECRET"] = self.trial_key_secret
        elif service == "trainer":
            env |= {"RLSTACK_TRAINER_AUTH_TOKEN": self.trainer, "RLSTACK_TRAINER_BATCHER_TOKEN": self.batcher,
                    "RLSTACK_TRAINER_EVALUATION__TOKEN": self.env}  # the env servers' POST /evaluate
        elif service == "envs":
            env |= {"RLSTACK_ENV_AUTH_TOKEN": self.env, "RLSTACK_ENV_BATCHER_TOKEN": self.batcher,
                    "RLSTACK_ENV_TRIAL_KEY_SECRET": self.trial_key_secret}
        return env

    def token_for(self, module: str) -> str | None:
        """The bearer token a client of this service's routes presents."""
        service = module.removeprefix("rlstack.").split(".")[0]
        return {"batcher": self.batcher, "registry": self.registry, "trainer": self.trainer,
                "envs": self.env}.get(service)

    def save(self, run_dir: Path) -> Path:
        path = run_dir / AUTH_FILE
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(self.model_dump(), f, indent=2)
        return path
