"""Token-in: LiteLLM's upstream for each replica, sending a trial's calls on its threads' exact ids.

LiteLLM translates and routes as before, but its deployments point here (one loopback listener
per proxy process, so a trial's thread state and the call that needs it live in the same
process). For a call that continues a thread (``threads.ThreadTable``) this asks the replica
to render the request (``/v1/chat/completions/render``), sends the spliced ids to
``/inference/v1/generate``, and has the replica's own tool parser turn the generated ids back
into a chat message (``/v1/chat/completions/derender``). LiteLLM receives an ordinary chat
completion (``prompt_token_ids`` = the ids really sent) and turns it into the client's dialect.

A call that continues none of this process's heads first takes up the heads other proxy
processes logged for the trial (``thread_log``: a pod that died, another worker). A call that
still continues nothing (a trial's first, a side call, an edited history: told from the
messages before anything is rendered), streaming calls and ``n > 1`` go to
``/v1/chat/completions`` unchanged, one hop as without token-in. The listener answers only LiteLLM: every request must carry this process's random
token, so a sandbox that finds the port cannot write into a trial's threads.

Every call also learns here which weight versions sampled each choice (``relay.versions``: the
spans ``generate`` reports, or the replica's label read around a one-hop call); the versions go
into the call's outcome for its record and onto each choice of the answer (``weight_versions``).
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import secrets
import socket
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson
from aiohttp import web

from rlstack.proxy.jsonio import dumps, loads
from rlstack.proxy.names import CALL_HEADER, POLICY_HEADER, RELAY_PREFIX, TRIAL_HEADER
from rlstack.proxy.relay import versions
from rlstack.proxy.relay.thread_log import ThreadLog
from rlstack.proxy.relay.threads import (
    Head,
    Plan,
    Splice,
    ThreadTable,
)
from rlstack.proxy.relay.turn_end import ended_on_turn_end, turn_end_after_reply, without_turn_end
from rlstack.proxy.replicas import ReplicaView

log = logging.getLogger(__name__)
MAX_OUTCOMES = 4096
KEEPALIVE_SECONDS = 4.0
"""How long an idle connection to a replica is kept: under the replica's own keep-alive (vLLM's
uvicorn closes idle connections after 5 s), so the relay never sends on one the replica is closing.
aiohttp's default (15 s) let a call go out on a closed connection, fail, and be retried by LiteLLM,
whose retry's record was lost (2 of 4,000 calls in ``bench/env_scale.py``)."""
CLOSE_WAIT_SECONDS = 1.0
"""How long close() lets calls still in the listener finish before cancelling them."""
STALE_CONNECTION = (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError)
"""Errors of a pooled connection the replica closed before answering: the request is sent again, once."""


@dataclass
class CallOutcome:
    splice: Splice | None
    segment: str | None
    head: Head | None = None
    versions: list[list[int] | None] | None = None
    """Per choice, the weight versions that sampled it (``relay.versions``)."""


class UpstreamError(Exception):
    def __init__(self, status: int, body: bytes) -> None:
        super().__init__(body[:300])
        self.status, self.body = status, body


class TokenInUpstream:
    def __init__(self, view: ReplicaView, replica_api_key: str | None, timeout: float,
                 thread_log: ThreadLog | None = None, adopted: Callable[[int], None] | None = None) -> None:
        self.view = view
        self.thread_log = thread_log
        self.adopted = adopted
        """Told how many heads each take-up from the log brought (the proxy's metric)."""
        self.token = secrets.token_urlsafe(24)
        """What LiteLLM sends as its api key: only this process knows it."""
        self.replica_headers = {"content-type": "application/json"}
        if replica_api_key:
            self.replica_headers["authorization"] = f"Bearer {replica_api_key}"
        self.timeout = aiohttp.ClientTimeout(total=timeout, sock_connect=3.0)
        self.threads: dict[str, ThreadTable] = {}
        """Per policy, its threads of each trial: a call continues only threads its own policy sampled."""
        self.turn_ends: dict[str, int | None] = {}
        """Per replica, the id its chat template closes an assistant turn with (probed once)."""
        self.outcomes: OrderedDict[str, CallOutcome] = OrderedDict()
        """Per LiteLLM call id, what token-in did: the trajectory hook files it with the call."""
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.session: aiohttp.ClientSession | None = None
        self.runner: web.AppRunner | None = None

    def api_base(self, replica_id: str) -> str:
        return f"http://127.0.0.1:{self.port}{RELAY_PREFIX}/{replica_id}/v1"

    async def start(self) -> None:
        connector = aiohttp.TCPConnector(keepalive_timeout=KEEPALIVE_SECONDS)
        self.session = aiohttp.ClientSession(timeout=self.timeout, connector=connector,
                                             json_serialize=lambda o: orjson.dumps(o).decode())
        app = web.Application(client_max_size=256 * 1024 * 1024)
        app.router.add_post(RELAY_PREFIX + "/{replica}/v1/chat/completions", self.chat)
        # By close() the proxy's own requests are over, so a call still here has no one to answer
        # (aiohttp would wait 60 s for it: a stop that outlasted rlstack up's grace).
        self.runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=CLOSE_WAIT_SECONDS)
        await self.runner.setup()
        await web.SockSite(self.runner, self.sock).start()
        log.info("token-in upstream on 127.0.0.1:%d", self.port)

    async def close(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()
        if self.session is not None:
            await self.session.close()

    def outcome(self, call_id: str) -> CallOutcome | None:
        return self.outcomes.pop(call_id, None)

    def _threads(self, policy: str) -> ThreadTable:
        if policy not in self.threads:
            self.threads[policy] = ThreadTable()
        return self.threads[policy]

    def end_trial(self, trial: str) -> None:
        for table in self.threads.values():
            table.end(trial)
        if self.thread_log is not None:
            self.thread_log.forget(trial)

    async def chat(self, request: web.Request) -> web.Response:
        if not hmac.compare_digest(request.headers.get("authorization", ""), f"Bearer {self.token}"):
            return _error(401, "this listener answers the proxy's own router only")
        endpoint = self.view.endpoints.get(request.match_info["replica"])
        if endpoint is None:  # worded so the failure hook drops the deployment at once
            return _error(502, f"replica {request.match_info['replica']}: connection refused (no longer registered)")
        policy = request.headers.get(POLICY_HEADER, endpoint.model)
        if policy != endpoint.model:  # LiteLLM's routes never cross policies; if one did, the call must not be answered
            return _error(502, f"replica {endpoint.id} serves policy {endpoint.model!r}, not this call's {policy!r}")
        base = str(endpoint.url).rstrip("/")
        raw = await request.read()
        body = loads(raw)
        trial = request.headers.get(TRIAL_HEADER)
        call_id = request.headers.get(CALL_HEADER)
        threads = self._threads(endpoint.model)
        try:
            if body.get("stream"):  # --stream-mode litellm: vLLM's events, passed through as they come
                return await self._stream(request, base, raw, body, call_id)
            if not call_id:  # the proxy's own health pings: no record, so no versions to learn
                return _json(await self._post(f"{base}/v1/chat/completions", raw))
            if not trial or (body.get("n") or 1) != 1:
                answer, sampled = await self._one_hop(base, await self._fit(base, endpoint.id, raw, body), body)
                self._note(call_id, CallOutcome(None, None, versions=sampled))
                return _json(versions.stamp(answer, sampled))
            messages = body.get("messages") or []
            if not threads.may_continue(trial, messages) and not await self._take_up(threads, trial, messages):
                # a first call, a side call or an edited history
                answer, sampled = await self._one_hop(base, await self._fit(base, endpoint.id, raw, body), body)
                turn_end = await self._turn_end(base, endpoint.id, body.get("model"))
                prompt = answer.get("prompt_token_ids") or []
                edited = threads.starts_like(trial, messages, body.get("tools"))
                self._remember(threads, trial, call_id, prompt, Plan(prompt=prompt, segment="history_edited" if edited else None),
                               body, answer, eos_stop=ended_on_turn_end(answer, turn_end), sampled=sampled)
                return _json(versions.stamp(answer, sampled))
            answer, sampled = await self._spliced(threads, base, trial, call_id, body, endpoint.id)
            return _json(versions.stamp(answer, sampled))
        except UpstreamError as exc:
            return web.Response(status=exc.status, body=exc.body, content_type="application/json")
        except aiohttp.ClientConnectorError as exc:
            return _error(502, f"replica {endpoint.id}: connection refused ({exc})")
        except (aiohttp.ClientError, TimeoutError) as exc:
            return _error(504, f"replica {endpoint.id}: {type(exc).__name__} {exc}")
        except (ValueError, KeyError, TypeError) as exc:  # an answer not shaped as vLLM's: say so, never a bare 500
            log.exception("replica %s: unexpected answer", endpoint.id)
            return _error(502, f"replica {endpoint.id}: unexpected answer ({type(exc).__name__}: {exc})")

    async def _take_up(self, threads: ThreadTable, trial: str, messages: list) -> bool:
        """Take up the heads other processes logged for the trial since the last look; does the call
        continue one of them now?"""
        if self.thread_log is None or trial in threads.ended:
            return False
        by_policy = await asyncio.to_thread(self.thread_log.new_heads_by_policy, trial, self.view.default_policy)
        adopted = sum(self._threads(policy).adopt(trial, heads) for policy, heads in by_policy.items())
        if not adopted:
            return False
        log.info("trial %s: took up %d thread head(s) from other proxy processes' records", trial, adopted)
        if self.adopted is not None:
            self.adopted(adopted)
        return threads.may_continue(trial, messages)

    async def _fit(self, base: str, replica_id: str, raw: bytes, body: dict[str, Any]) -> bytes:
        """A call's output limit cut to what the context leaves after its prompt, counted exactly
        (a render) only when its bytes alone cannot rule out an overflow: the edge cannot count a
        Responses call's prompt, which becomes chat messages only inside LiteLLM's bridge."""
        field = "max_completion_tokens" if body.get("max_completion_tokens") is not None else "max_tokens"
        limit = body.get(field)
        context = self.view.max_model_len.get(replica_id, self.view.default_context)
        if not isinstance(limit, int) or limit + len(raw) + 256 <= context:
            return raw
        prompt = len((await self._post(f"{base}/v1/chat/completions/render", raw))["token_ids"])
        if prompt >= context:
            raise UpstreamError(400, orjson.dumps({"error": {
                "message": f"messages: prompt is {prompt} tokens; the context holds {context}",
                "type": "BadRequestError", "param": "messages", "code": 400}}))
        if limit <= context - prompt:
            return raw
        body[field] = context - prompt
        return dumps(body)

    async def _one_hop(self, base: str, raw: bytes, body: dict[str, Any]) -> tuple[dict, list[list[int] | None]]:
        """``/v1/chat/completions`` as sent, and per choice the versions that sampled it: the adapter's
        under LoRA, else the replica's label read before and after the call."""
        adapter = versions.of_adapter(body.get("model"))
        before = adapter if adapter is not None else await self._label(base)
        answer = await self._post(f"{base}/v1/chat/completions", raw)
        sampled = [adapter] if adapter is not None else versions.bracketed(before, await self._label(base))
        return answer, [sampled] * len(answer.get("choices") or [])

    async def _label(self, base: str) -> int | None:
        """The replica's current weight-version label (vLLM's ``/weight_info``); None if it has none."""
        try:
            return versions.label((await self._get(f"{base}/weight_info")).get("weight_version"))
        except UpstreamError as exc:  # a vLLM without the RL routes: the call goes on, its versions unknown
            log.debug("no weight-version label from %s: %s", base, exc)
            return None

    async def _spliced(self, threads: ThreadTable, base: str, trial: str, call_id: str | None, body: dict[str, Any],
                       replica_id: str) -> tuple[dict, list[list[int] | None]]:
        rendered = await self._post(f"{base}/v1/chat/completions/render", dumps(body))
        ids = rendered["token_ids"]
        turn_end = await self._turn_end(base, replica_id, body.get("model"))
        messages = body.get("messages") or []
        plan = threads.plan(trial, ids, messages, turn_end)
        if plan.unclosed is not None:  # the reply renders with no end of turn: render the history through it
            through = await self._post(f"{base}/v1/chat/completions/render", dumps(
                {**body, "messages": messages[:plan.unclosed.messages_len + 1], "add_generation_prompt": False}))
            plan = threads.splice_through(plan.unclosed, ids, through["token_ids"], turn_end)
        params = rendered["sampling_params"]
        room = self.view.max_model_len.get(replica_id, self.view.default_context) - len(plan.prompt)
        if room < 1:
            raise UpstreamError(400, orjson.dumps({"error": {
                "message": f"messages: prompt is {len(plan.prompt)} tokens; the context holds {len(plan.prompt) + room}",
                "type": "BadRequestError", "param": "messages", "code": 400}}))
        if params.get("max_tokens") is None or params["max_tokens"] > room:
            params["max_tokens"] = room
        generated = await self._post(f"{base}/inference/v1/generate", dumps({**rendered, "token_ids": plan.prompt}))
        answer = await self._post(f"{base}/v1/chat/completions/derender", dumps(
            {"model": body.get("model"), "generate_response": without_turn_end(generated, turn_end), "prompt_token_ids": plan.prompt,
             "chat_request": body}))
        answer["prompt_token_ids"] = plan.prompt
        for choice, raw_choice in zip(answer.get("choices") or [], generated.get("choices") or [], strict=False):
            choice["token_ids"] = raw_choice.get("token_ids")
        # Derender is not told the prompt (vLLM 0.32 then counts 0 prompt tokens) and counts the reply without
        # the end of turn we cut for its text: the usage is the ids sent and generated.
        completion = sum(len(c.get("token_ids") or []) for c in generated.get("choices") or [])
        answer["usage"] = {**(answer.get("usage") or {}), "prompt_tokens": len(plan.prompt), "completion_tokens": completion,
                           "total_tokens": len(plan.prompt) + completion}
        adapter = versions.of_adapter(body.get("model"))
        sampled = [[adapter] if adapter is not None else versions.from_spans(c.get("weight_versions"))
                   for c in generated.get("choices") or []]
        self._remember(threads, trial, call_id, ids, plan, body, answer, eos_stop=ended_on_turn_end(generated, turn_end),
                       sampled=sampled)
        return answer, sampled

    def _note(self, call_id: str | None, outcome: CallOutcome) -> None:
        if call_id:
            self.outcomes[call_id] = outcome
            while len(self.outcomes) > MAX_OUTCOMES:
                self.outcomes.popitem(last=False)

    def _remember(self, threads: ThreadTable, trial: str, call_id: str | None, rendered: list[int], plan: Plan, body: dict,
                  answer: dict, eos_stop: bool, sampled: list[list[int] | None]) -> None:
        choices = answer.get("choices") or []
        if not choices or not rendered:
            self._note(call_id, CallOutcome(None, None, versions=sampled))
            return
        choice = choices[0]
        head = threads.record(trial, str(answer.get("id") or call_id), rendered, plan, choice.get("token_ids") or [],
                            choice.get("finish_reason"), eos_stop, messages=body.get("messages") or [],
                            reply=choice.get("message") or {}, tools=body.get("tools"))
        self._note(call_id, CallOutcome(plan.splice, plan.segment, head, versions=sampled))

    async def _turn_end(self, base: str, replica_id: str, model: str | None) -> int | None:
        if replica_id not in self.turn_ends:
            self.turn_ends[replica_id] = await self._probe_turn_end(base, model)
        return self.turn_ends[replica_id]

    async def _probe_turn_end(self, base: str, model: str | None) -> int | None:
        """The id the template puts right after an assistant reply: the end of a turn.

        Rendered once per replica: the same turn answered "x" and answered "y"; the two renderings
        differ at the reply alone, and the id after it closes the turn (``turn_end.turn_end_after_reply``).
        Not read off the generation prompt: Qwen3's template renders an empty think block into the
        last assistant turn that its generation prompt (thinking on) does not have."""
        user = [{"role": "user", "content": "x"}]
        try:
            x, y = [await self._post(f"{base}/v1/chat/completions/render", dumps(
                {"model": model, "messages": [*user, {"role": "assistant", "content": reply}], "add_generation_prompt": False}))
                for reply in ("x", "y")]
        except UpstreamError as exc:
            log.warning("could not probe the chat template's end of turn: %s", exc)
            return None
        turn_end = turn_end_after_reply(x["token_ids"], y["token_ids"])
        if turn_end is None:
            log.warning("the chat template renders no end of turn after a reply: cut replies are not spliced")
        return turn_end

    async def _stream(self, request: web.Request, base: str, data: bytes, body: dict[str, Any],
                      call_id: str | None) -> web.StreamResponse:
        """vLLM's events as they come, bracketed by the replica's label like a one-hop call. The last
        chunk is held until the label after it is read, so the outcome is there before LiteLLM,
        seeing the stream end, logs the call."""
        assert self.session is not None
        adapter = versions.of_adapter(body.get("model"))
        before = adapter if adapter is not None else await self._label(base)
        async with self.session.post(f"{base}/v1/chat/completions", data=data, headers=self.replica_headers) as reply:
            if reply.status != 200:
                raise UpstreamError(reply.status, await reply.read())
            response = web.StreamResponse(status=200, headers={"content-type": reply.headers.get("content-type", "text/event-stream")})
            await response.prepare(request)
            held = b""
            async for chunk in reply.content.iter_any():
                if held:
                    await response.write(held)
                held = chunk
            sampled = [adapter] if adapter is not None else versions.bracketed(before, await self._label(base))
            self._note(call_id, CallOutcome(None, None, versions=[sampled] * max(1, body.get("n") or 1)))
            if held:
                await response.write(held)
            await response.write_eof()
            return response

    async def _get(self, url: str) -> dict:
        return await self._call("GET", url, None)

    async def _post(self, url: str, data: bytes) -> dict:
        return await self._call("POST", url, data)

    async def _call(self, method: str, url: str, data: bytes | None) -> dict:
        assert self.session is not None
        for attempt in (1, 2):
            try:
                async with self.session.request(method, url, data=data, headers=self.replica_headers) as reply:
                    payload = await reply.read()
            except STALE_CONNECTION:
                if attempt == 2:
                    raise
                log.debug("%s %s: pooled connection closed by the replica; sending again", method, url)
                continue
            if reply.status != 200:
                raise UpstreamError(reply.status, payload)
            return loads(payload)
        raise AssertionError("unreachable")


def _json(payload: dict) -> web.Response:
    return web.Response(status=200, body=dumps(payload), content_type="application/json")


def _error(status: int, message: str) -> web.Response:
    body = orjson.dumps({"error": {"message": message, "type": "upstream_error", "code": status}})
    return web.Response(status=status, body=body, content_type="application/json")
