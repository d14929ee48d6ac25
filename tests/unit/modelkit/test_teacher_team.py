"""The scripted teacher's team mode (the two-policy demo's capture): the lead looks at the input itself,
then delegates the task; the sub-agent solves it; each does part of the task, so each policy's actions
decide the reward."""

from __future__ import annotations

import json

from rlstack.episodes.harbor.make_tasks import generate
from rlstack.modelkit.teacher import (
    FINAL_TEXT,
    SUB_AGENT_TOOL,
    SUB_TASK,
    Conversation,
    next_message,
    reference_commands,
)


def seen(users: str, offered: set[str], calls: int) -> Conversation:
    return Conversation(users=users, transcript=users, offered=offered, tool_calls_made=calls)


def command(message: dict) -> dict:
    call = message["tool_calls"][0]["function"]
    return {"name": call["name"], **json.loads(call["arguments"])}


def test_the_lead_looks_then_delegates_and_the_sub_agent_solves():
    [spec] = generate(1, 7, ("sum-numbers",))
    look, solve = reference_commands(spec, "")
    lead = spec.instruction
    assert command(next_message(spec, seen(lead, {"Bash", SUB_AGENT_TOOL}, 0), team=True)) == {"name": "Bash", "command": look}
    delegated = command(next_message(spec, seen(lead, {"Bash", SUB_AGENT_TOOL}, 1), team=True))
    assert delegated["name"] == SUB_AGENT_TOOL and delegated["prompt"] == SUB_TASK + spec.instruction.strip()
    assert next_message(spec, seen(lead, {"Bash", SUB_AGENT_TOOL}, 2), team=True)["content"] == FINAL_TEXT
    worker = SUB_TASK + spec.instruction
    assert command(next_message(spec, seen(worker, {"Bash"}, 0), team=True)) == {"name": "Bash", "command": solve}
    assert next_message(spec, seen(worker, {"Bash"}, 1), team=True)["content"] == FINAL_TEXT
    # without team mode the lead delegates at once and the sub-agent does all of it, as before
    assert command(next_message(spec, seen(lead, {"Bash", SUB_AGENT_TOOL}, 0)))["name"] == SUB_AGENT_TOOL
    assert command(next_message(spec, seen(worker, {"Bash"}, 0))) == {"name": "Bash", "command": look}
