"""The shape of the model calls the proxy takes, checked before LiteLLM sees them.

LiteLLM's translation code assumes well-formed requests: a message that is a list, a tool
without ``input_schema`` or a ``tool_choice`` without ``type`` raised inside it and came back as a
500. These models check the types of the fields LiteLLM, token-in and vLLM read, so such a call is
a 400 naming the field instead. They are loose where clients are loose: every object allows
fields not named here (SDKs add new ones), and unknown block and content-part types pass with a
``type`` alone. Types are strict (``"4"`` is not a number, ``true`` is not an integer).
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

INT64 = 2**63
"""vLLM's seeds and counts are 64-bit; a larger integer raised there."""


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)


def _need(obj: BaseModel, kind: str, *names: str) -> None:
    missing = [n for n in names if getattr(obj, n, None) is None]
    if missing:
        raise ValueError(f"a {kind} needs {', '.join(missing)}")


# OpenAI chat completions --------------------------------------------------------------------------

class ContentPart(_Open):
    type: str
    text: str | None = None

    @model_validator(mode="after")
    def _typed(self) -> ContentPart:
        if self.type == "text":
            _need(self, "text part", "text")
        return self


class FunctionCall(_Open):
    name: str
    arguments: str | dict[str, Any] | None = None


class ToolCall(_Open):
    id: str | None = None
    type: str = "function"
    function: FunctionCall


class ChatMessage(_Open):
    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: str | list[ContentPart] | None = None
    name: str | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None


class FunctionDef(_Open):
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None


class ChatTool(_Open):
    type: str
    function: FunctionDef | None = None

    @model_validator(mode="after")
    def _typed(self) -> ChatTool:
        if self.type == "function":
            _need(self, "function tool", "function")
        return self


class StreamOptions(_Open):
    include_usage: bool | None = None


class ChatRequest(_Open):
    model: str
    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = None
    top_p: float | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    n: int | None = Field(default=None, ge=1, le=256)
    """At most the env server's largest group_size: one call is never a million sequences."""
    seed: int | None = Field(default=None, ge=-INT64, lt=INT64)
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    stop: str | list[str] | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    logit_bias: dict[str, float] | None = None
    tools: list[ChatTool] | None = None
    tool_choice: str | dict[str, Any] | None = None
    response_format: dict[str, Any] | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    user: str | None = None


# Anthropic messages -------------------------------------------------------------------------------

class Block(_Open):
    type: str
    text: str | None = None
    id: str | None = None
    name: str | None = None
    input: dict[str, Any] | None = None
    tool_use_id: str | None = None
    content: str | list[Block] | None = None
    thinking: str | None = None
    signature: str | None = None
    source: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _typed(self) -> Block:
        needs = {"text": ("text",), "tool_use": ("id", "name", "input"), "tool_result": ("tool_use_id",),
                 "thinking": ("thinking",), "image": ("source",), "document": ("source",)}
        _need(self, f"{self.type} block", *needs.get(self.type, ()))
        return self


class AnthropicMessage(_Open):
    role: Literal["user", "assistant"]
    content: str | list[Block]


class AnthropicTool(_Open):
    name: str
    type: str | None = None
    description: str | None = None
    input_schema: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _typed(self) -> AnthropicTool:
        if self.type in (None, "custom"):  # server tools (web_search_...) carry a type and no schema
            _need(self, "custom tool", "input_schema")
        return self


class ToolChoice(_Open):
    type: Literal["auto", "any", "tool", "none"]
    name: str | None = None

    @model_validator(mode="after")
    def _typed(self) -> ToolChoice:
        if self.type == "tool":
            _need(self, "tool choice of type tool", "name")
        return self


class Thinking(_Open):
    type: str
    budget_tokens: int | None = Field(default=None, ge=0, lt=INT64)


class CountTokensRequest(_Open):
    model: str
    messages: list[AnthropicMessage] = Field(min_length=1)
    system: str | list[Block] | None = None
    tools: list[AnthropicTool] | None = None
    tool_choice: ToolChoice | None = None
    thinking: Thinking | None = None


class MessagesRequest(CountTokensRequest):
    max_tokens: int = Field(ge=1)
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = Field(default=None, ge=-1, lt=INT64)
    stream: bool | None = None
    stop_sequences: list[str] | None = None
    metadata: dict[str, Any] | None = None


# OpenAI responses --------------------------------------------------------------------------------

RESPONSES_ITEMS = ("message", "function_call", "function_call_output", "custom_tool_call", "custom_tool_call_output",
                   "reasoning")
"""The input items LiteLLM's bridge turns into chat messages (the Responses API's conversation state
as codex and the OpenAI SDKs send it, ``store: false``); others would reach the model as nothing."""


class ResponsesPart(_Open):
    type: str
    text: str | None = None

    @model_validator(mode="after")
    def _typed(self) -> ResponsesPart:
        if self.type in ("input_text", "output_text"):
            _need(self, f"{self.type} part", "text")
        return self


class ResponsesItem(_Open):
    type: str | None = None
    """Absent on the short form of a message (``{"role", "content"}``)."""
    role: Literal["user", "assistant", "system", "developer"] | None = None
    content: str | list[ResponsesPart] | None = None
    call_id: str | None = None
    name: str | None = None
    arguments: str | None = None
    input: str | None = None
    output: str | list[ResponsesPart] | None = None

    @field_validator("type")
    @classmethod
    def _known(cls, value: str | None) -> str | None:
        if value is not None and value not in RESPONSES_ITEMS:
            raise ValueError(f"unknown input item type {value!r}; this proxy takes {', '.join(RESPONSES_ITEMS)}")
        return value

    @model_validator(mode="after")
    def _typed(self) -> ResponsesItem:
        needs = {"message": ("role", "content"), "function_call": ("call_id", "name", "arguments"),
                 "function_call_output": ("call_id", "output"), "custom_tool_call": ("call_id", "name", "input"),
                 "custom_tool_call_output": ("call_id", "output")}
        kind = self.type or "message"
        _need(self, f"{kind} item", *needs.get(kind, ()))
        return self


class ResponsesTool(_Open):
    type: str
    name: str | None = None
    parameters: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _typed(self) -> ResponsesTool:
        if self.type in ("function", "custom"):
            _need(self, f"{self.type} tool", "name")
        return self


class ResponsesRequest(_Open):
    model: str
    input: str | list[ResponsesItem] = Field(min_length=1)
    instructions: str | None = None
    tools: list[ResponsesTool] | None = None
    tool_choice: str | dict[str, Any] | None = None
    max_output_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = None
    top_p: float | None = None
    stream: bool | None = None
    store: bool | None = None
    previous_response_id: None = None
    """Refused: the proxy keeps no responses (it has no store to read them back from); a client sends
    the conversation in ``input`` instead, as codex does."""
    reasoning: dict[str, Any] | None = None
    include: list[str] | None = None
    parallel_tool_calls: bool | None = None

    @field_validator("previous_response_id", mode="before")
    @classmethod
    def _stateless(cls, value: Any) -> None:
        if value is not None:
            raise ValueError("this proxy keeps no responses: send the whole conversation in input (and store: false)")
        return value


def problem(body: dict[str, Any], kind: Literal["chat", "messages", "count_tokens", "responses"]) -> tuple[str, str] | None:
    """None for a body of the right shape, else (the first bad field's dotted path, what is wrong)."""
    model = {"chat": ChatRequest, "messages": MessagesRequest, "count_tokens": CountTokensRequest, "responses": ResponsesRequest}[kind]
    try:
        model.model_validate(body)
    except ValidationError as exc:
        errors = [(_where(e["loc"]), len(e["loc"]), _OBJECT.sub("an object", e["msg"]))
                  for e in exc.errors(include_url=False, include_input=False)]
        where = max(errors, key=lambda e: e[1])[0]  # the deepest: the most specific of a union's branches
        said = list(dict.fromkeys(msg for at, _, msg in errors if at == where))  # a union's branches at one place
        text = said[0] + "".join(f" or {m.removeprefix('Input should be ')}" for m in said[1:])
        return where, f"{where}: {text}"
    return None


_OBJECT = re.compile(r"a valid dictionary or instance of \w+")


def _where(loc: tuple) -> str:
    return ".".join(str(part) for part in loc if not _branch(part)) or "body"


def _branch(part: int | str) -> bool:
    """A union member's tag in an error's location (``str``, ``list[Block]``), not a field."""
    return isinstance(part, str) and ("[" in part or part in ("str", "int", "float", "bool", "list", "dict", "none"))
