"""The agents an agent env can run, as ``AgentSpec``s, and the environment that points each at
its trial's proxy URL with its trial key.

The shipped agents are installed before any trial starts (the built-in one is this package;
claude-code, codex and opencode are pinned npm installs, ``make setup-claude-code setup-codex
setup-opencode``, or the image): a trial never downloads. In a task's image each runs from the
agent bundle at /opt/rlstack (``image_command``; ``rlstack.episodes.bundle``), whatever the image has. Any other scaffold runs by command (``--agent-command``), installed by whoever runs it.
"""

from __future__ import annotations

import json
import re
import shlex
import sys
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from rlstack.common.trial_keys import agent_env
from rlstack.episodes.bundle import paths as bundle
from rlstack.episodes.bundle.sources import (  # noqa: F401 - where the CLIs are installed, named here too
    CLAUDE_CODE_BIN,
    CLAUDE_CODE_VERSION,
    CODEX_BIN,
    CODEX_VERSION,
    OPENCODE_BIN,
    OPENCODE_VERSION,
)
from rlstack.episodes.trials.records import INSTRUCTION_PLACEHOLDER, AgentSpec


def agent_argv(command: str) -> list[str]:
    """``agent_command`` split as a POSIX shell would (no shell runs it); ``{instruction}`` must be a word of its own."""
    try:
        argv = shlex.split(command)
    except ValueError as exc:
        raise ValueError(f"agent_command: {exc} in {command!r}") from None
    if not argv:
        raise ValueError("agent_command: empty command")
    inside = [a for a in argv if INSTRUCTION_PLACEHOLDER in a and a != INSTRUCTION_PLACEHOLDER]
    if inside:
        raise ValueError(f"agent_command: {INSTRUCTION_PLACEHOLDER} must be a word of its own (quote nothing around it), "
                         f"not part of {inside[0]!r}; the instruction is also in $RLSTACK_INSTRUCTION_FILE")
    return argv


class AgentLimits(BaseModel):
    model_config = ConfigDict(frozen=True)

    max_turns: int = 8
    max_tokens: int = 256
    temperature: float = 1.0


def builtin_agent(limits: AgentLimits, python: str = sys.executable) -> AgentSpec:
    return AgentSpec(name="builtin", command=[python, "-m", "rlstack.agent"], image_command=list(bundle.BUILTIN_AGENT_ARGV),
                     env={"RLSTACK_AGENT_MAX_TURNS": str(limits.max_turns),
                          "RLSTACK_AGENT_MAX_TOKENS": str(limits.max_tokens),
                          "RLSTACK_AGENT_TEMPERATURE": str(limits.temperature)})


CLAUDE_CODE_TOOLS = "Bash,Read,Edit"
"""claude-code's built-in tools in a trial: shell, read, edit. Under ``--bare`` these are all of
its file tools (``Write`` is not offered there), each with a one-line description."""
CLAUDE_CODE_SYSTEM_PROMPT = "You are a coding agent working in /app. Use the tools to do the task, then say Done."
"""Replaces claude-code's default system prompt (about 10k tokens in the demo tokenizer)."""


SUB_AGENT = "worker"
"""The sub-agent type the sub-agent preset defines (``--agents``): one line of prompt and ``Bash``,
where claude-code's own ``general-purpose`` type brings a 20 kB prompt and every tool."""
SUB_AGENT_MODEL = "claude-haiku-4-5"
"""What claude-code asks for on its haiku slot in a trial (``ANTHROPIC_DEFAULT_HAIKU_MODEL``): the model of a
sub-agent defined with ``model: haiku``, which a run of several policies routes to the sub-agent's own."""
SUB_AGENTS = {SUB_AGENT: {"description": "Runs a sub-task with shell commands and reports the result.",
                          "prompt": "You are a worker in /app. Use Bash to do the sub-task, then say Done.", "tools": ["Bash"]}}

CLAUDE_CODE_QUIET = ("CLAUDE_CODE_DISABLE_ATTACHMENTS", "CLAUDE_CODE_DISABLE_CLAUDE_MDS", "CLAUDE_CODE_DISABLE_AUTO_MEMORY",
                     "CLAUDE_CODE_DISABLE_BUNDLED_SKILLS", "CLAUDE_CODE_DISABLE_GIT_INSTRUCTIONS")
"""What ``--bare`` turns off, asked for one by one where ``--bare`` cannot be given."""


def claude_code_agent(binary: Path = CLAUDE_CODE_BIN, subagents: bool = False, sub_agent_model: str | None = None, on_host: bool = True) -> AgentSpec:
    """claude-code in print mode with a prompt a tiny CPU policy can take: 26,885 tokens of first
    request shrink to about 1,300 in the demo tokenizer (measured, docs/agent-trials.md).

    ``--bare`` drops the environment, skills, agents and deferred-tool reminders and gives the
    tools short descriptions; ``--tools`` keeps three tools of twelve; ``--system-prompt``
    replaces the default one; ``CLAUDE_CODE_ATTRIBUTION_HEADER=0`` drops a billing line whose
    hash changes from call to call (it would end every prefix-cache hit at the first line).

    ``sub_agent_model`` (with ``subagents``): the worker's ``model`` in its definition, the way
    claude-code users give a sub-agent a smaller model (``haiku``: resolved through
    ``ANTHROPIC_DEFAULT_HAIKU_MODEL``); unset, the worker inherits the lead's.
    """
    if on_host and not binary.exists():  # in a pod the bundle's own binary runs (``image_command``)
        raise FileNotFoundError(f"claude-code is not installed at {binary}: run `make setup-claude-code` "
                                f"(npm @anthropic-ai/claude-code@{CLAUDE_CODE_VERSION})")
    env = {"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_AUTOUPDATER": "1",
           "DISABLE_TELEMETRY": "1", "IS_SANDBOX": "1", "CLAUDE_CODE_ATTRIBUTION_HEADER": "0"}
    if subagents:
        # --bare offers no Agent tool: without it, the flags and variables --bare implied cut what they can.
        command = [str(binary.resolve()), "-p", INSTRUCTION_PLACEHOLDER, "--dangerously-skip-permissions",
                   "--tools", f"{CLAUDE_CODE_TOOLS},Agent", "--system-prompt", CLAUDE_CODE_SYSTEM_PROMPT,
                   "--disable-slash-commands", "--strict-mcp-config", "--setting-sources", "",
                   "--agents", json.dumps({name: {**spec, "model": sub_agent_model} if sub_agent_model else spec
                                           for name, spec in SUB_AGENTS.items()})]
        env |= {name: "1" for name in CLAUDE_CODE_QUIET}
        return AgentSpec(name="claude-code-subagents", command=command, env=env, image_command=[bundle.CLAUDE, *command[1:]])
    command = [str(binary.resolve()), "-p", INSTRUCTION_PLACEHOLDER, "--dangerously-skip-permissions", "--bare",
               "--tools", CLAUDE_CODE_TOOLS, "--system-prompt", CLAUDE_CODE_SYSTEM_PROMPT]
    return AgentSpec(name="claude-code", command=command, env=env, image_command=[bundle.CLAUDE, *command[1:]])


CODEX_MODEL = "gpt-5-codex"
"""The name codex asks for: the proxy maps OpenAI names onto the policy on its Responses route only."""
CODEX_INSTRUCTIONS = CLAUDE_CODE_SYSTEM_PROMPT
"""Replaces codex's base instructions (~4k tokens of its own product's manual)."""
CODEX_DISABLED_FEATURES = ("plugins", "apps", "multi_agent", "goals", "view_image", "image_generation", "skill_search")
"""Tools and prompt sections a trial has no use for: together with the flags below they take
codex's first request from 39 kB (12 tools) to 3 kB (``exec_command``, ``write_stdin``)."""
CODEX_LAUNCH = (
    # codex has no environment variable for a provider's base URL, and a trial's URL is known
    # only in the sandbox's environment: a shell expands it; the instructions file is written
    # where the trial's HOME is (codex reads base instructions only from a file).
    'printf "%s\\n" "$RLSTACK_CODEX_INSTRUCTIONS" > "$HOME/rlstack-codex-instructions.md" && '
    'exec "$0" exec --skip-git-repo-check --dangerously-bypass-approvals-and-sandbox --ephemeral --color never '
    '-m "$RLSTACK_CODEX_MODEL" -c model_provider=rlstack -c model_providers.rlstack.name=rlstack '
    '-c "model_providers.rlstack.base_url=$OPENAI_BASE_URL" -c model_providers.rlstack.env_key=OPENAI_API_KEY '
    '-c model_providers.rlstack.wire_api=responses -c "model_instructions_file=$HOME/rlstack-codex-instructions.md" '
    '-c include_permissions_instructions=false -c include_environment_context=false '
    '-c skills.include_instructions=false -c tools.experimental_request_user_input.enabled=false '
    '-c tools.update_plan.enabled=false $RLSTACK_CODEX_DISABLE -- "$1"'
)


def codex_agent(binary: Path = CODEX_BIN, on_host: bool = True) -> AgentSpec:
    """codex in ``exec`` mode on its Responses API, through the trial's proxy prefix.

    A custom provider (``wire_api=responses``) points it at the proxy with the trial key; the
    flags drop the tools and prompt sections a trial never uses (measured in docs/agent-trials.md);
    ``--dangerously-bypass-approvals-and-sandbox`` because the trial's sandbox is the sandbox
    (codex's own landlock/seccomp layer cannot nest in it); ``--ephemeral`` keeps no session files.
    """
    if on_host and not binary.exists():  # in a pod the bundle's own binary runs (``image_command``)
        raise FileNotFoundError(f"codex is not installed at {binary}: run `make setup-codex` "
                                f"(npm @openai/codex@{CODEX_VERSION})")
    disable = " ".join(f"--disable {feature}" for feature in CODEX_DISABLED_FEATURES)
    return AgentSpec(name="codex", command=["/bin/sh", "-c", CODEX_LAUNCH, str(binary.resolve()), INSTRUCTION_PLACEHOLDER],
                     image_command=["/bin/sh", "-c", CODEX_LAUNCH, bundle.CODEX, INSTRUCTION_PLACEHOLDER],
                     env={"RLSTACK_CODEX_INSTRUCTIONS": CODEX_INSTRUCTIONS, "RLSTACK_CODEX_MODEL": CODEX_MODEL,
                          "RLSTACK_CODEX_DISABLE": disable, "NO_COLOR": "1"})


OPENCODE_TOOLS_OFF = ("glob", "grep", "list", "skill", "task", "todowrite", "todoread", "webfetch", "websearch",
                      "codesearch", "question", "write")
"""Tools a trial has no use for. ``write`` stays offered all the same: opencode ties it to ``edit``."""
OPENCODE_QUIET = ("OPENCODE_DISABLE_MODELS_FETCH", "OPENCODE_DISABLE_AUTOUPDATE", "OPENCODE_DISABLE_SHARE",
                  "OPENCODE_DISABLE_LSP_DOWNLOAD", "OPENCODE_DISABLE_DEFAULT_PLUGINS", "OPENCODE_DISABLE_PROJECT_CONFIG",
                  "OPENCODE_DISABLE_CLAUDE_CODE", "OPENCODE_DISABLE_EXTERNAL_SKILLS", "OPENCODE_DISABLE_AUTOCOMPACT",
                  "OPENCODE_DISABLE_PRUNE")
"""No network beyond the proxy (models.dev, updates, sharing, LSP downloads); no config, skills or
CLAUDE.md read from the task's files; and nothing that rewrites earlier turns (compaction, pruning
old tool output), which would end a thread's token-in splicing at every rewrite."""


def opencode_config(context_tokens: int = 32_768, output_tokens: int = 1_024) -> dict:
    """opencode's config for a trial: one OpenAI-compatible provider on the trial's proxy prefix.

    opencode expands ``{env:NAME}`` in its config text, so the trial's URL, key and model name are
    read in the sandbox; the ``build`` agent's prompt replaces opencode's 9.7 kB system prompt, and
    the title call (a side call per session) is off.
    """
    model = {"name": "{env:OPENAI_MODEL}", "limit": {"context": context_tokens, "output": output_tokens}}
    return {"provider": {"rlstack": {"npm": "@ai-sdk/openai-compatible", "name": "rlstack",
                                     "options": {"baseURL": "{env:OPENAI_BASE_URL}", "apiKey": "{env:OPENAI_API_KEY}"},
                                     "models": {"{env:OPENAI_MODEL}": model}}},
            "model": "rlstack/{env:OPENAI_MODEL}", "small_model": "rlstack/{env:OPENAI_MODEL}",
            "share": "disabled", "autoupdate": False, "compaction": {"auto": False, "prune": False},
            "agent": {"build": {"prompt": CLAUDE_CODE_SYSTEM_PROMPT}, "title": {"disable": True}},
            "tools": dict.fromkeys(OPENCODE_TOOLS_OFF, False)}


OPENCODE_LAUNCH = 'exec "$0" run --auto --pure < "$RLSTACK_INSTRUCTION_FILE"'
"""The instruction goes in on stdin: opencode quotes a message given as arguments (``"..."``, inner
quotes escaped), and the policy would learn tasks in a form no user writes."""


def opencode_agent(binary: Path = OPENCODE_BIN, on_host: bool = True) -> AgentSpec:
    """opencode in ``run`` mode on an OpenAI-compatible provider (chat completions, streamed).

    ``--auto`` approves every tool call (the trial's sandbox is the boundary); ``--pure`` loads no
    external plugins. The config (``opencode_config``) rides in ``OPENCODE_CONFIG_CONTENT``.
    """
    if on_host and not binary.exists():  # in a pod the bundle's own binary runs (``image_command``)
        raise FileNotFoundError(f"opencode is not installed at {binary}: run `make setup-opencode` "
                                f"(npm opencode-ai@{OPENCODE_VERSION})")
    env = {"OPENCODE_CONFIG_CONTENT": json.dumps(opencode_config()), "NO_COLOR": "1"}
    env |= {name: "1" for name in OPENCODE_QUIET}
    return AgentSpec(name="opencode", command=["/bin/sh", "-c", OPENCODE_LAUNCH, str(binary.resolve())], env=env,
                     image_command=["/bin/sh", "-c", OPENCODE_LAUNCH, bundle.OPENCODE])


ENV_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


def command_agent(command: str) -> AgentSpec:
    """Any scaffold as a command line (``--agent-command``). A relative program path
    (``.venv-mini/bin/mini``) is made absolute here, since the agent runs in /app; the agent is
    named after its program (the first word after ``env VAR=...``)."""
    argv = agent_argv(command)
    if "/" in argv[0] and not Path(argv[0]).is_absolute():
        argv[0] = str(Path(argv[0]).resolve())
    program = next((a for a in argv if a != "env" and not ENV_ASSIGNMENT.match(a)), argv[0])
    return AgentSpec(name=Path(program).name or "command", command=argv)


def trial_env(agent: AgentSpec, proxy_url: str, run: str, trial: str, key: str, model: str,
              haiku_model: str | None = None) -> dict[str, str]:
    """Where the agent finds the policy: the trial's prefix on the proxy (both API dialects), its key, the model.
    ``haiku_model``: the name claude-code's haiku slot (a sub-agent's ``model: haiku``) asks for."""
    env = {**agent_env(proxy_url, run, trial, key), "OPENAI_MODEL": model}
    if agent.name != "builtin":  # an Anthropic client needs a model name: any claude-* maps onto the policy
        env["ANTHROPIC_MODEL"] = "claude-sonnet-4-5"
    if haiku_model is not None:
        env["ANTHROPIC_DEFAULT_HAIKU_MODEL"] = haiku_model
    return env
