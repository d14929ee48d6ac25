"""The agent's settings: the standard OpenAI variables, the trial's instruction file, its limits.

``OPENAI_BASE_URL``/``OPENAI_API_KEY`` are read as any OpenAI client reads them, so the trial
runner points this agent at the proxy exactly as it points any other agent.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import AliasChoices, Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from rlstack.common.names import SERVED_MODEL_NAME


class AgentSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="RLSTACK_AGENT_", extra="ignore", cli_kebab_case=True,
                                      cli_implicit_flags=True, cli_prog_name="rlstack.agent",
                                      use_attribute_docstrings=True, populate_by_name=True)

    base_url: str = Field(default="http://127.0.0.1:4000/v1",
                          validation_alias=AliasChoices("base_url", "RLSTACK_AGENT_BASE_URL", "OPENAI_BASE_URL"))
    """OpenAI-compatible endpoint, ending in /v1 (the proxy's ``/trials/<run>/<trial>/v1``)."""
    api_key: SecretStr = Field(default=SecretStr("none"),
                               validation_alias=AliasChoices("api_key", "RLSTACK_AGENT_API_KEY", "OPENAI_API_KEY"))
    """Sent as the bearer token: the trial key."""
    model: str = Field(default=SERVED_MODEL_NAME, validation_alias=AliasChoices("model", "RLSTACK_AGENT_MODEL", "OPENAI_MODEL"))
    instruction: str | None = None
    """The task; unset reads ``instruction_file``."""
    instruction_file: Path = Field(default=Path("/logs/agent/instruction.md"),
                                   validation_alias=AliasChoices("instruction_file", "RLSTACK_AGENT_INSTRUCTION_FILE",
                                                                 "RLSTACK_INSTRUCTION_FILE"))
    workdir: Path = Path("/app")
    """Where commands run and relative paths point."""
    max_turns: int = Field(default=8, ge=1, le=1000)
    """Model calls at most; the episode then ends and the verifier judges what is there."""
    max_tokens: int = Field(default=256, ge=1)
    """Per call."""
    temperature: float = Field(default=1.0, ge=0)
    command_timeout_seconds: float = Field(default=30.0, gt=0)
    max_observation_chars: int = Field(default=2000, ge=64)
    """Tool output beyond this is cut (head and tail kept) so prompts stay within the context."""
    request_attempts: int = Field(default=3, ge=1, le=20)
    """Tries per model call on connection errors and 5xx before the agent gives up (exit 3)."""
    transcript: Path | None = None
    """Append one JSON line per turn here (default: ``agent.jsonl`` next to the instruction file)."""
