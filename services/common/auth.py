"""Optional bearer-token check on a service's routes, reads included (constant-time compare)."""

from __future__ import annotations

import hmac
from typing import TYPE_CHECKING

from pydantic import SecretStr

if TYPE_CHECKING:  # clients (the agent in a sandbox, CLIs) import ``bearer`` without the web framework
    from fastapi import Request


def bearer(token: str | SecretStr | None) -> dict[str, str]:
    """``Authorization: Bearer`` headers for a client, or none when there is no token."""
    if token is None:
        return {}
    value = token.get_secret_value() if isinstance(token, SecretStr) else token
    return {"Authorization": f"Bearer {value}"} if value else {}


def require_bearer(request: Request, token: SecretStr | None) -> None:
    """Raise 401 unless auth is off or the request carries ``Authorization: Bearer <token>``."""
    if token is None:
        return
    header = request.headers.get("authorization", "")
    scheme, _, presented = header.partition(" ")
    expected = token.get_secret_value()
    if scheme.lower() != "bearer" or not hmac.compare_digest(presented.strip(), expected):
        from fastapi import HTTPException

        raise HTTPException(
            status_code=401,
            detail="authorization: missing or wrong bearer token",
            headers={"WWW-Authenticate": "Bearer"},
        )
