"""The scripted teacher's team mode (the two-policy demo's capture): the lead looks at the input itself,
then delegates the task; the sub-agent solves it; each does part of the task, so each policy's actions
decide the reward."""

from __future__ import annotations

import json

from rlstack.episodes.harbor.make_tasks import generate
from rlstack.modelkit.teacher.scripted import (
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


def test_a_team_model_warm_started_for_other_steps_is_not_taken_as_built(tmp_path):
    """Changing ``TEAM_STEPS`` rebuilds the team's models (``make run-agent ... POLICIES=``) rather than
    training on the ones an earlier setting left in ``models/``."""
    from rlstack.modelkit.agent_demo.cli import RECORD, TEAM_STEPS, TEMPLATE, is_built

    (tmp_path / "model.safetensors").write_bytes(b"")  # what is_current looks for, beside today's template
    (tmp_path / "chat_template.jinja").write_text(TEMPLATE.read_text())
    (tmp_path / RECORD).write_text(json.dumps({"spec": {"steps": TEAM_STEPS["lead"]}}))
    assert is_built(tmp_path) and is_built(tmp_path, steps=TEAM_STEPS["lead"])
    assert not is_built(tmp_path, steps=TEAM_STEPS["lead"] // 2)
    # the warm start's time guard stopped it early (a machine too busy): not the policy the steps define
    (tmp_path / RECORD).write_text(json.dumps({"spec": {"steps": TEAM_STEPS["lead"]}, "steps": TEAM_STEPS["lead"] - 1}))
    assert not is_built(tmp_path, steps=TEAM_STEPS["lead"])
