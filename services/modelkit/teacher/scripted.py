"""A scripted teacher: an OpenAI-compatible upstream that answers generated tasks with their
reference tool calls, so a real agent CLI runs its real loop through the real proxy.

It stands where a vLLM replica stands (the registry lists it, LiteLLM in the proxy routes to it),
so what claude-code sends reaches it in exactly the OpenAI form vLLM would be asked to render:
LiteLLM turns the teacher's ``tool_calls`` into ``tool_use`` blocks, claude-code executes them
and sends back ``tool_result``s. Every request and answer is recorded: that record is the
claude-code warm-start corpus (``agent_demo.corpus``). Not a stand-in for vLLM in tests of
vLLM: it has no tokens and no logprobs.
"""

from __future__ import annotations

import json
import re
import secrets
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from rlstack.common.names import SERVED_MODEL_NAME
from rlstack.episodes.agents import SUB_AGENT
from rlstack.episodes.harbor.make_tasks import BUGS, TaskSpec

FINAL_TEXT = "Done."
"""The teacher's last turn: a plain answer with no tool call, which ends the agent's loop."""
SUB_AGENT_TOOL = "Agent"
"""claude-code's tool that opens a sub-agent thread (``Task`` in its older releases)."""
SUB_TASK = "Sub-task: "
"""How the teacher's delegated prompt starts, so the sub-agent's thread is told from the main one."""
SHELL_TOOLS = {"Bash": "command", "exec_command": "cmd", "bash": "command"}
"""Each agent's shell tool and the argument holding the command line: claude-code's, codex's, the built-in agent's."""


def _family(spec: TaskSpec) -> str:
    return spec.name.rsplit("-s", 1)[0]


INPUT_FILE = {"sum-numbers": "numbers.txt", "count-lines": "words.txt", "uppercase": "input.txt",
              "json-port": "config.json", "fix": "calc.py"}
OUTPUT_FILE = {"multiply": "answer.txt", "write-greeting": "greeting.txt"}


def reference_commands(spec: TaskSpec, transcript: str) -> list[str]:
    """Two bash commands per task: look at the input, then solve (or solve, then check the output).

    For ``fix`` the second command depends on what the first showed (``transcript``: the
    conversation's text so far), as a teacher reading its observations would.
    """
    family = _family(spec)
    if family == "multiply":
        a, b = re.search(r"Compute (\d+) \* (\d+)", spec.instruction).groups()
        return [f"echo $(({a} * {b})) > /app/answer.txt", "cat /app/answer.txt"]
    if family in OUTPUT_FILE:
        return [spec.solve.strip(), f"cat /app/{OUTPUT_FILE[family]}"]
    look = f"cat /app/{INPUT_FILE[family]}"
    if family == "fix":
        seen = [(b, f) for _, b, f, _ in BUGS if b in transcript]
        if not seen:
            return [look, look]  # the file was not shown yet: look again
        buggy, fixed = seen[-1]
        return [look, f"sed -i 's/{buggy}/{fixed}/' /app/calc.py"]
    return [look, spec.solve.strip()]


def sub_agent_type(users: str) -> str:
    """The sub-agent type to delegate to: the preset's own (``SUB_AGENT``) when claude-code lists it
    among the agent types (a reminder in the first user turn; ``users``: the user turns' text)."""
    return SUB_AGENT if f"- {SUB_AGENT}: " in users else "general-purpose"


@dataclass(frozen=True)
class Conversation:
    """What the teacher reads of a call, whether it came as OpenAI messages or as the prompt a
    template rendered (``forcing``)."""

    users: str
    """The user turns' text."""
    transcript: str
    """Every turn's text."""
    offered: set[str]
    """The names of the tools the call offers."""
    tool_calls_made: int
    """Assistant turns so far that called a tool."""


def next_message(spec: TaskSpec | None, seen: Conversation, team: bool = False) -> dict[str, Any]:
    """The teacher's answer: the next reference tool call, a delegation to a sub-agent, or the final text.

    ``team``: the lead and its sub-agent each do part of the task (two policies, each learning its own
    part): the lead runs the first reference command itself (looks at the input), then delegates the
    task; the sub-agent runs the rest (solves) and reports. Without it the lead delegates at once and
    the sub-agent does all of it."""
    if spec is None or not seen.offered:
        return {"role": "assistant", "content": "ok"}  # a side call (title, ping)
    done = seen.tool_calls_made
    commands = reference_commands(spec, seen.transcript)
    shell = next((name for name in SHELL_TOOLS if name in seen.offered), None)
    if SUB_AGENT_TOOL in seen.offered and SUB_TASK not in seen.users:
        own = 1 if team and shell is not None else 0  # the lead's own commands before it delegates
        if done < own:
            return tool_call(shell, {SHELL_TOOLS[shell]: commands[done]})
        if done > own:  # the sub-agent's result is back
            return {"role": "assistant", "content": FINAL_TEXT}
        # the main thread hands the task to a sub-agent, then reports its result
        arguments = {"description": "Do the task", "prompt": SUB_TASK + spec.instruction.strip(),
                     "subagent_type": sub_agent_type(seen.users), "run_in_background": False}
        return tool_call(SUB_AGENT_TOOL, arguments)
    if team and SUB_TASK in seen.users:
        commands = commands[1:]  # the lead has looked already
    if shell is not None and done < len(commands):
        return tool_call(shell, {SHELL_TOOLS[shell]: commands[done]})
    return {"role": "assistant", "content": FINAL_TEXT}


def tool_call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    call = {"id": f"chatcmpl-tool-{secrets.token_hex(8)}", "type": "function",
            "function": {"name": name, "arguments": json.dumps(arguments, ensure_ascii=False)}}
    return {"role": "assistant", "content": None, "tool_calls": [call]}


def message_text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


@dataclass
class Exchange:
    """One call as the teacher saw it: the OpenAI request body and the assistant message it answered."""

    request: dict[str, Any]
    response: dict[str, Any]
    task: str | None
    received_at: float = field(default_factory=time.time)

    def to_json(self) -> dict[str, Any]:
        return {"task": self.task, "received_at": self.received_at, "request": self.request, "response": self.response}


class Teacher:
    """Answers each call from the task whose instruction appears in the conversation."""

    def __init__(self, tasks: list[TaskSpec], served_model_name: str = SERVED_MODEL_NAME, max_model_len: int = 1_000_000,
                 team: bool = False) -> None:
        self.tasks = {spec.instruction.strip(): spec for spec in tasks}
        self.team = team
        """The lead and its sub-agent each do part of a task (``next_message``)."""
        self.served_model_name, self.max_model_len = served_model_name, max_model_len
        self.exchanges: list[Exchange] = []
        self._lock = threading.Lock()

    def find_task(self, users: str) -> TaskSpec | None:
        """The task whose instruction the user turns (``users``: their text) carry; the longest, since
        one greeting's instruction can be the start of another's."""
        return max((spec for text, spec in self.tasks.items() if text in users), key=lambda s: len(s.instruction), default=None)

    def answer(self, body: dict[str, Any]) -> dict[str, Any]:
        """The next assistant message: the next reference tool call, or the final text."""
        messages = body.get("messages") or []
        seen = Conversation(
            users="\n".join(message_text(m) for m in messages if m.get("role") == "user"),
            transcript="\n".join(message_text(m) for m in messages),
            offered={t.get("function", {}).get("name") for t in body.get("tools") or []},
            tool_calls_made=sum(1 for m in messages if m.get("role") == "assistant" and m.get("tool_calls")))
        spec = self.find_task(seen.users)
        message = next_message(spec, seen, self.team)
        with self._lock:
            self.exchanges.append(Exchange(body, message, spec.name if spec else None))
        return message

    def app(self) -> Starlette:
        async def models(request: Request) -> JSONResponse:
            return JSONResponse({"object": "list", "data": [{"id": self.served_model_name, "object": "model",
                                                             "owned_by": "rlstack-teacher", "max_model_len": self.max_model_len}]})

        async def health(request: Request) -> JSONResponse:
            return JSONResponse({"ok": True})

        async def chat(request: Request) -> JSONResponse:
            try:
                body = await request.json()
            except json.JSONDecodeError:
                return JSONResponse({"error": {"message": "body: not valid JSON", "param": None}}, status_code=400)
            if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
                return JSONResponse({"error": {"message": "messages: required (a list)", "param": "messages"}}, status_code=400)
            message = self.answer(body)
            return JSONResponse({
                "id": f"chatcmpl-{secrets.token_hex(8)}", "object": "chat.completion", "created": int(time.time()),
                "model": body.get("model") or self.served_model_name,
                "choices": [{"index": 0, "message": message, "logprobs": None,
                             "finish_reason": "tool_calls" if message.get("tool_calls") else "stop"}],
                "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}})

        return Starlette(routes=[Route("/v1/models", models), Route("/health", health),
                                 Route("/v1/chat/completions", chat, methods=["POST"])])

    def dump(self) -> list[dict[str, Any]]:
        with self._lock:
            return [e.to_json() for e in self.exchanges]
