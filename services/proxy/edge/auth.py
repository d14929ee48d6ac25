"""LiteLLM custom auth: trial keys in ``x-api-key`` or ``Authorization: Bearer``.

With a secret configured, a missing, forged or expired key is a 401, and a path prefix that
names another trial than the key is a 403. Without one (local development), any key passes
and the identity comes from the path prefix, else run and trial ``default``.
"""

from __future__ import annotations

from fastapi import HTTPException, Request

from rlstack.common.trial_keys import InvalidTrialKey, TrialIdentity, verify
from rlstack.proxy.names import TRIAL_HEADER


class TrialAuth:
    def __init__(self, secret: str | None) -> None:
        self.secret = secret

    def identify(self, api_key: str, path_trial: str | None) -> TrialIdentity:
        from_path = None
        if path_trial:
            run, _, trial = path_trial.partition("/")
            from_path = TrialIdentity(run=run, trial=trial)
        if self.secret is None:
            return from_path or TrialIdentity(run="default", trial="default")
        key = api_key.removeprefix("Bearer ").strip()
        try:
            identity = verify(self.secret, key)
        except InvalidTrialKey as exc:
            raise HTTPException(401, detail=f"api key: {exc} (expected a trial key from `rlstack trial-key`)") from None
        if from_path is not None and from_path != identity:
            raise HTTPException(403, detail=f"path names trial {from_path.run}/{from_path.trial}, key is for {identity.run}/{identity.trial}")
        return identity

    async def __call__(self, request: Request, api_key: str):  # LiteLLM's custom_auth signature
        from litellm.proxy._types import UserAPIKeyAuth

        identity = self.identify(api_key or request.headers.get("x-api-key", ""), request.headers.get(TRIAL_HEADER))
        return UserAPIKeyAuth(
            api_key=f"trial:{identity.run}/{identity.trial}",
            user_id=f"{identity.run}/{identity.trial}",
            metadata={"rlstack_run": identity.run, "rlstack_trial": identity.trial},
        )
