"""The episode: system + instruction, then model call, tool calls, observations, until done.

The messages sent back are exactly the assistant messages the server returned (content and
``tool_calls`` untouched), so the chat template re-renders each turn as it was generated and
the trial's calls chain into one token sequence (see ``rlstack.episodes.assemble``).

Exit codes: 0 the episode ended (``submit``, an answer without tool calls, or the turn
limit: the verifier judges the workspace); 2 no instruction; 3 a model call kept failing
(connection, 5xx); 4 the server refused a call (4xx, e.g. the context is full). Only 0 lets
a trial be scored: a failed call is never a wrong answer.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from pathlib import Path

import httpx
from pydantic import ValidationError

from rlstack.agent.config import AgentSettings
from rlstack.agent.tools import Workspace, tool_schemas
from rlstack.common.auth import bearer

log = logging.getLogger("rlstack.agent")

SYSTEM_PROMPT = "You are an agent in a Linux sandbox. Work in /app with the tools, then call submit."

EXIT_OK, EXIT_USAGE, EXIT_CALL_FAILED, EXIT_REFUSED = 0, 2, 3, 4


class CallFailed(Exception):
    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def complete(client: httpx.Client, s: AgentSettings, messages: list[dict]) -> dict:
    """One chat completion; retried on transport errors and 5xx, never on 4xx."""
    body = {"model": s.model, "messages": messages, "tools": tool_schemas(), "tool_choice": "auto",
            "max_tokens": s.max_tokens, "temperature": s.temperature}
    problem = ""
    for attempt in range(s.request_attempts):
        if attempt:
            time.sleep(min(8.0, 0.5 * 2**attempt))
        try:
            r = client.post("/chat/completions", json=body)
        except httpx.HTTPError as exc:
            problem = f"{type(exc).__name__}: {exc}"
            continue
        if r.status_code >= 500 or r.status_code == 429:
            problem = f"{r.status_code}: {r.text[:300]}"
            continue
        if r.status_code >= 400:
            raise CallFailed(f"model call refused: {r.status_code}: {r.text[:500]}", EXIT_REFUSED)
        return r.json()["choices"][0]["message"]
    raise CallFailed(f"model call failed {s.request_attempts} times; last: {problem}", EXIT_CALL_FAILED)


def run_episode(s: AgentSettings, client: httpx.Client, transcript: Path | None) -> str:
    """Returns how the episode ended: ``submitted``, ``answered`` or ``turn_limit``."""
    instruction = s.instruction if s.instruction is not None else s.instruction_file.read_text()
    workspace = Workspace(s.workdir, s.command_timeout_seconds, s.max_observation_chars)
    messages: list[dict] = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": instruction}]
    for turn in range(1, s.max_turns + 1):
        reply = complete(client, s, messages)
        calls = reply.get("tool_calls") or []
        messages.append({"role": "assistant", "content": reply.get("content"), **({"tool_calls": calls} if calls else {})})
        observations = []
        done = not calls
        for call in calls:
            observation, submitted = workspace.call(call["function"]["name"], call["function"].get("arguments") or "{}")
            observations.append({"role": "tool", "tool_call_id": call.get("id", ""), "content": observation})
            done = done or submitted
        messages.extend(observations)
        _record(transcript, {"turn": turn, "assistant": messages[-1 - len(observations)], "observations": observations})
        log.info("turn %d: %s", turn, ", ".join(c["function"]["name"] for c in calls) or "no tool call")
        if done:
            return "submitted" if calls else "answered"
    return "turn_limit"


def _record(path: Path | None, line: dict) -> None:
    if path is not None:
        with path.open("a") as f:
            f.write(json.dumps(line) + "\n")


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s", stream=sys.stderr)
    try:
        s = AgentSettings(_cli_parse_args=list(sys.argv[1:] if argv is None else argv))
    except ValidationError as exc:
        print(f"rlstack.agent: bad settings: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if s.instruction is None and not s.instruction_file.is_file():
        print(f"rlstack.agent: no instruction: {s.instruction_file} does not exist and --instruction is unset",
              file=sys.stderr)
        return EXIT_USAGE
    transcript = s.transcript or (s.instruction_file.parent / "agent.jsonl" if s.instruction_file.parent.is_dir() else None)
    headers = bearer(s.api_key.get_secret_value())
    with httpx.Client(base_url=s.base_url.rstrip("/"), headers=headers, timeout=600) as client:
        try:
            ending = run_episode(s, client, transcript)
        except CallFailed as exc:
            log.error("%s", exc)
            return exc.exit_code
    log.info("episode over: %s", ending)
    return EXIT_OK
