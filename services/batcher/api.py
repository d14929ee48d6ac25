"""The batcher's routes: Atropos's paths and JSON, each a single call into BatcherService.

Hot routes (/scored_data, /scored_data_list, /batch) take and return raw bytes: the body is
validated once by pydantic-core, and batches are spliced from pre-serialised groups.
"""

from __future__ import annotations

import logging

import orjson
from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from pydantic import ValidationError

from rlstack.batcher.service import BatcherService
from rlstack.batcher.validation import GroupRejected, from_pydantic
from rlstack.common.auth import require_bearer
from rlstack.common.contracts.atropos import (
    SAVED_STEP_HEADER,
    EnvIdentifier,
    EnvRegistration,
    EnvStatus,
    EnvStatusQuery,
    RegisterEnvResponse,
    RegisterResponse,
    ScoredData,
    Status,
    TrainerRegistration,
)
from rlstack.common.contracts.progress import ProgressReport

log = logging.getLogger(__name__)
EMPTY_EXAMPLE = {
    "tokens": [], "masks": [], "scores": [], "advantages": [], "ref_logprobs": [],
    "generation_params": [], "inference_logprobs": [], "messages": [], "images": [],
}


async def service(request: Request) -> BatcherService:
    return request.app.state.batcher


async def writer(request: Request) -> None:
    """With ``--auth-token`` every route that reads or changes state needs it (an unauthenticated
    GET /batch takes a batch from the trainer); /, /healthz, /readyz and /metrics stay open."""
    require_bearer(request, request.app.state.batcher.settings.auth_token)


def _json(body: bytes, replayed: bool = False) -> Response:
    """``Idempotent-Replayed: true`` marks the answer to a retried post whose key had already landed."""
    return Response(body, media_type="application/json", headers={"Idempotent-Replayed": "true"} if replayed else None)


router = APIRouter()
WRITE = [Depends(writer)]


@router.get("/")
async def root() -> dict[str, str]:
    return {"message": "rlstack batcher (Atropos-compatible API)"}


@router.post("/register", dependencies=WRITE, response_model=RegisterResponse)
async def register(body: TrainerRegistration, svc: BatcherService = Depends(service)):
    return await svc.register_trainer(body)


@router.post("/register-env", dependencies=WRITE, response_model=RegisterEnvResponse, response_model_exclude_none=True)
async def register_env(body: EnvRegistration, svc: BatcherService = Depends(service)):
    return await svc.register_env(body)


@router.post("/disconnect-env", dependencies=WRITE)
async def disconnect_env(body: EnvIdentifier, svc: BatcherService = Depends(service)):
    await svc.disconnect_env(body.env_id)
    return {"status": "success"}


@router.get("/wandb_info", dependencies=WRITE)
async def wandb_info(svc: BatcherService = Depends(service)):
    trainer = svc.state.trainer
    return {"group": trainer.wandb_group if trainer else None, "project": trainer.wandb_project if trainer else None}


@router.get("/info", dependencies=WRITE)
async def info(policy: str | None = None, svc: BatcherService = Depends(service)):
    """The trainer's batch shape; ``?policy=``: that policy's trainer's (an rlstack extension)."""
    trainer = svc.queue_of(policy).trainer
    return {"batch_size": trainer.batch_size if trainer else -1, "max_token_len": trainer.max_token_len if trainer else -1,
            "batch_fill": trainer.batch_fill if trainer else "exact"}  # an rlstack extension: Atropos clients ignore it


# The three hot routes skip dependency injection: they run once per group or batch.
@router.get("/batch")
async def batch(request: Request) -> Response:
    require_bearer(request, request.app.state.batcher.settings.auth_token)
    raw = request.headers.get(SAVED_STEP_HEADER)
    if raw is not None and not (raw.isascii() and raw.isdigit() and len(raw) <= 12):
        raise GroupRejected(422, [{"loc": ["header", SAVED_STEP_HEADER], "msg": "must be a step number (digits)",
                                   "type": "value_error"}], "header")
    policy = request.query_params.get("policy")  # an rlstack extension: a policy's own queue
    return _json(await request.app.state.batcher.next_batch(int(raw) if raw is not None else None, policy))


@router.get("/latest_example", dependencies=WRITE)
async def latest_example(svc: BatcherService = Depends(service)) -> Response:
    latest = svc.state.latest
    return _json(latest.json() if latest else orjson.dumps(EMPTY_EXAMPLE))


# The hot routes read raw bytes; their bodies are declared here so the OpenAPI document (and the fuzz suite) know them.
_ONE_GROUP = {"requestBody": {"required": True, "content": {"application/json": {"schema": ScoredData.model_json_schema()}}}}
_GROUP_LIST = {"requestBody": {"required": True, "content": {"application/json": {
    "schema": {"type": "array", "items": ScoredData.model_json_schema()}}}}}


@router.post("/scored_data", openapi_extra=_ONE_GROUP)
async def scored_data(request: Request) -> Response:
    svc: BatcherService = request.app.state.batcher
    require_bearer(request, svc.settings.auth_token)
    _, replayed = await svc.post_groups(await request.body(), as_list=False, key=request.headers.get("idempotency-key"))
    return _json(b'{"status":"received"}', replayed)


@router.post("/scored_data_list", openapi_extra=_GROUP_LIST)
async def scored_data_list(request: Request) -> Response:
    svc: BatcherService = request.app.state.batcher
    require_bearer(request, svc.settings.auth_token)
    count, replayed = await svc.post_groups(await request.body(), as_list=True, key=request.headers.get("idempotency-key"))
    return _json(b'{"status":"received","groups_processed":%d}' % count, replayed)


@router.get("/status", response_model=Status, dependencies=WRITE)
async def status(policy: str | None = None, svc: BatcherService = Depends(service)):
    state = svc.queue_of(policy)
    return {"current_step": state.step, "queue_size": state.available_groups}


@router.get("/status-env", response_model=EnvStatus, dependencies=WRITE)
async def status_env(request: Request, env_id: int | None = None, svc: BatcherService = Depends(service)):
    """Atropos sends ``{"env_id": N}`` as a JSON body on this GET; ``?env_id=N`` works too. Each
    poll renews the env's lease; rlstack's envs add whether they hold back."""
    if env_id is not None:
        svc.require_env(env_id)  # a 404 for any id not registered, negative ones too
        query = EnvStatusQuery(env_id=env_id)
    else:
        try:
            query = EnvStatusQuery.model_validate_json(await request.body() or b"{}")
        except ValidationError as exc:
            raise from_pydantic(exc) from None
    status, revived = svc.env_status(query)
    if revived:
        log.info("env %d polled again after its lease expired: it takes its share again", query.env_id)
    return status


@router.get("/progress", response_model=ProgressReport, dependencies=WRITE)
async def progress(policy: str | None = None, svc: BatcherService = Depends(service)):
    """rlstack extension: is the trainer getting batches, and if not, what each env is doing;
    ``?policy=``: that policy's trainer and queue (unset: the first's)."""
    return svc.progress(policy)


@router.get("/reset_data", dependencies=WRITE)
async def reset_data(svc: BatcherService = Depends(service)) -> PlainTextResponse:
    await svc.reset()
    return PlainTextResponse("Reset successful")



async def rejected_handler(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, GroupRejected)
    headers = {}
    if exc.status_code == 503:
        headers["Retry-After"] = str(request.app.state.batcher.settings.retry_after_seconds)
    return JSONResponse({"detail": exc.errors}, status_code=exc.status_code, headers=headers)
