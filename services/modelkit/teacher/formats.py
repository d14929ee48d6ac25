"""How the scripted teacher reads a call back from the prompt a family's template rendered, and
writes its answer in the tokens that family's models generate (``forcing``).

One format per way of writing turns: ChatML (the demo and tiny models, Qwen2.5, Qwen3: turns as
``<|im_start|>role`` blocks, tools one JSON object per line inside ``<tools>``), harmony (gpt-oss:
``<|start|>role<|channel|>...<|message|>`` messages, tools as a TypeScript namespace in the
developer message) and DeepSeek V3 (``<｜User｜>``/``<｜Assistant｜>`` markers, tool calls between
``<｜tool▁calls▁begin｜>`` and ``<｜tool▁calls▁end｜>``).

DeepSeek V3's shipped template renders no tool list, so a model served with it never sees which
tools the agent offers, and renders an earlier tool call only when the message's content is None,
which vLLM never passes it: a DeepSeek model served with it sees its tool results but not its
calls. The teacher takes the tools the prompt still tells of (``DeepSeekV3.tools_told``) and counts the
calls made by their results.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from typing import Any, Protocol

from rlstack.episodes.agents import SUB_AGENT
from rlstack.modelkit.teacher.scripted import SHELL_TOOLS, SUB_AGENT_TOOL, Conversation

REASONING = "The task needs a shell command; I run it, then look at what it printed."
"""The teacher's thinking, where the prompt asks the model to think (a family whose template takes
``enable_thinking``, served with it on; gpt-oss always): it rides through each dialect's reasoning
field and back."""


class PromptFormat(Protocol):
    def read(self, prompt: str) -> Conversation: ...

    def answer(self, tokenizer: Any, message: dict[str, Any], prompt: str) -> list[int]:
        """The teacher's ``message`` as the ids a model of the family generates, through its end of turn."""
        ...


def _conversation(turns: list[tuple[str, str]], offered: set[str], tool_calls_made: int) -> Conversation:
    return Conversation(users="\n".join(text for role, text in turns if role == "user"),
                        transcript="\n".join(text for _, text in turns), offered=offered, tool_calls_made=tool_calls_made)


class ChatML:
    TURN_START, TURN_END = "<|im_start|>", "<|im_end|>"
    TOOLS = re.compile(r"<tools>\n(.*?)</tools>", re.S)

    def read(self, prompt: str) -> Conversation:
        turns = []
        for block in prompt.split(self.TURN_START)[1:]:
            role, _, body = block.partition("\n")
            turns.append((role, body.split(self.TURN_END)[0]))
        tools = self.TOOLS.search(turns[0][1]) if turns and turns[0][0] == "system" else None
        offered = {json.loads(line).get("function", {}).get("name") for line in tools.group(1).splitlines() if line.strip()} if tools else set()
        return _conversation(turns, offered, sum(1 for role, text in turns if role == "assistant" and "<tool_call>" in text))

    def answer(self, tokenizer: Any, message: dict[str, Any], prompt: str) -> list[int]:
        message = {**message, "content": message.get("content") or ""}  # Qwen3's template reads a call's content as a string
        kwargs = template_kwargs(tokenizer, prompt)
        if "enable_thinking" in (tokenizer.chat_template or "") and not kwargs:
            message = {**message, "reasoning_content": REASONING}
        head = [{"role": "user", "content": "."}]
        before = tokenizer.apply_chat_template(head, add_generation_prompt=True, tokenize=False, **kwargs)
        turn = tokenizer.apply_chat_template([*head, message], tokenize=False, **kwargs)[len(before):]
        return tokenizer(turn[:turn.index(self.TURN_END) + len(self.TURN_END)], add_special_tokens=False)["input_ids"]


def template_kwargs(tokenizer: Any, prompt: str) -> dict[str, bool]:
    """The chat-template switches the prompt was rendered with, told from its generation prompt:
    a template that takes ``enable_thinking`` ends a no-thinking prompt with an empty think block."""
    candidates: list[dict[str, bool]] = [{}]
    if "enable_thinking" in (tokenizer.chat_template or ""):
        candidates.append({"enable_thinking": False})
    head = [{"role": "user", "content": "."}]

    def generation_prompt(kwargs: dict[str, bool]) -> str:
        full = tokenizer.apply_chat_template(head, add_generation_prompt=True, tokenize=False, **kwargs)
        return full[len(tokenizer.apply_chat_template(head, tokenize=False, **kwargs)):]

    matching = [k for k in candidates if prompt.endswith(generation_prompt(k))]
    return max(matching, key=lambda k: len(generation_prompt(k)), default={})


class Harmony:
    """gpt-oss: vLLM renders the prompt with ``openai_harmony``; the model answers in channels,
    thinking in ``analysis`` first, a tool call in ``commentary`` addressed ``to=functions.NAME``
    and closed by ``<|call|>``, a final answer in ``final`` closed by ``<|return|>``."""

    MESSAGE = re.compile(r"<\|start\|>(.*?)<\|message\|>(.*?)(?:<\|end\|>|<\|call\|>|<\|return\|>|$)", re.S)
    TOOL = re.compile(r"^type (\w+) = ", re.M)

    def read(self, prompt: str) -> Conversation:
        turns, offered, calls = [], set(), 0
        for header, body in self.MESSAGE.findall(prompt):
            role = re.split(r"[\s<]", header, maxsplit=1)[0]
            if role == "developer" and "namespace functions" in body:
                offered |= set(self.TOOL.findall(body.split("namespace functions", 1)[1]))
            calls += role == "assistant" and "to=functions." in header
            turns.append((role, body))
        return _conversation(turns, offered, calls)

    def answer(self, tokenizer: Any, message: dict[str, Any], prompt: str) -> list[int]:
        text = f"<|channel|>analysis<|message|>{REASONING}<|end|><|start|>assistant"
        calls = message.get("tool_calls") or []
        if calls:
            function = calls[0]["function"]
            text += f"<|channel|>commentary to=functions.{function['name']} <|constrain|>json<|message|>{function['arguments']}<|call|>"
        else:
            text += f"<|channel|>final<|message|>{message.get('content') or ''}<|return|>"
        return tokenizer(text, add_special_tokens=False)["input_ids"]


BUILTIN_SHELL = "bash"
"""The built-in agent's shell tool, which its system prompt does not name."""
CLAUDE_CODE_SYSTEM, CLAUDE_CODE_SHELL = "Claude Agent SDK", "Bash"
"""claude-code's system prompt (``--bare``) names its SDK, not its shell tool."""


class DeepSeekV3:
    USER, ASSISTANT = "<｜User｜>", "<｜Assistant｜>"
    CALL, OUTPUT = "<｜tool▁call▁begin｜>", "<｜tool▁output▁begin｜>"
    MARKER = re.compile(r"<｜[^｜]*｜>")

    def read(self, prompt: str) -> Conversation:
        system, _, rest = prompt.partition(self.USER)
        system = self.MARKER.sub("", system)
        turns = [("system", system)]
        for block in rest.split(self.USER):
            user, _, after = block.partition(self.ASSISTANT)
            turns += [("user", user), ("assistant", self.MARKER.sub("\n", after))]
        seen = _conversation(turns, set(), prompt.count(self.OUTPUT))
        return replace(seen, offered=self.tools_told(system, seen.users))

    @staticmethod
    def tools_told(system: str, users: str) -> set[str]:
        """The tools a prompt with no tool list still tells of: a shell tool the system prompt names
        (claude-code's names only its SDK: ``Bash``; the built-in agent's names none: ``bash``), and
        claude-code's ``Agent`` where the user turn lists the sub-agents it can start."""
        told = {name for name in SHELL_TOOLS if re.search(rf"\b{name}\b", system)}
        if not told:
            told = {CLAUDE_CODE_SHELL if CLAUDE_CODE_SYSTEM in system else BUILTIN_SHELL}
        if f"- {SUB_AGENT}: " in users:
            told.add(SUB_AGENT_TOOL)
        return told

    def answer(self, tokenizer: Any, message: dict[str, Any], prompt: str) -> list[int]:
        calls = message.get("tool_calls") or []
        if calls:
            text = "<｜tool▁calls▁begin｜>" + "".join(
                f"{self.CALL}function<｜tool▁sep｜>{c['function']['name']}\n```json\n{c['function']['arguments']}\n```<｜tool▁call▁end｜>"
                for c in calls) + "<｜tool▁calls▁end｜>"
        else:
            text = message.get("content") or ""
        return tokenizer(text + "<｜end▁of▁sentence｜>", add_special_tokens=False)["input_ids"]


FORMATS: dict[str, PromptFormat] = {"chatml": ChatML(), "harmony": Harmony(), "deepseek-v3": DeepSeekV3()}
FAMILY_FORMAT = {"demo": "chatml", "qwen2.5": "chatml", "qwen3": "chatml", "smollm2": "chatml",
                 "gpt-oss": "harmony", "deepseek-v3": "deepseek-v3"}
"""The format each family's template writes; a family without one has no tool format to teach."""
