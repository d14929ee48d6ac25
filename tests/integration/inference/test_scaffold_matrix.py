"""The scaffold matrix: every agent we ship, in each API dialect and streaming mode it speaks, on
one demo policy served by a real vLLM replica behind a real proxy, each cell a real trial.

The policy is a small model built here the way ``rlstack make-cli-agent-demo`` builds one (each
agent captured with the scripted teacher, tokenizer and warm start on all captures). It makes its
tool calls in its own template, vLLM's hermes parser returns them, LiteLLM turns them into each
dialect's form (chat ``tool_calls``, Anthropic ``tool_use`` blocks, Responses ``function_call``
items), the agent runs them in the sandbox and sends back their output. Every cell asserts: the
trial is ``ok``, at least two tool calls ran and their ids came back as tool results, every
continued call was spliced onto its thread (0 thread breaks, one sequence on vLLM's ids), and the
reward is the one the task's verifier wrote. Every trial runs in its task's own image (Debian with
python3 from Debian, no node), each agent from the agent bundle at /opt/rlstack. ``FORCED_CELLS`` run the same checks on the tiny model
with the scripted teacher's turns forced in vLLM's sampler: scenarios the demo policy was not taught
(claude-code's sub-agents). ``docs/agent-trials.md`` opens with both as a table (``python -m
tests.integration.inference.test_scaffold_matrix`` prints it).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from itertools import product
from pathlib import Path

import httpx
import pytest
from transformers import AutoTokenizer

from rlstack.common.contracts.atropos import MASKED
from rlstack.common.contracts.trajectory import TrajectoryRecord, read_trajectory
from rlstack.episodes.agents import (
    AgentLimits,
    builtin_agent,
    claude_code_agent,
    codex_agent,
    opencode_agent,
    trial_env,
)
from rlstack.episodes.assemble import Assembly, assemble
from rlstack.episodes.harbor.dataset import load_dataset
from rlstack.episodes.harbor.make_tasks import generate, write_task
from rlstack.episodes.images.base import build_base_image
from rlstack.episodes.sandboxes import build_sandbox
from rlstack.episodes.sandboxes.config import LocalSandboxConfig
from rlstack.episodes.trials.records import AgentSpec, TrialSpec
from rlstack.episodes.trials.run import run_trial
from rlstack.modelkit.agent_demo.corpus import load_exchanges, render_prompt
from rlstack.modelkit.teacher.forcing import TASKS_ENV, TURN_END, write_tasks
from tests.conftest import PROXY_PYTHON, REPO, start_service
from tests.helpers.prebuild import SESSION
from tests.helpers.task_images import image_settings
from tests.integration.inference.conftest import ReplicaHandle, start_replica
from tests.integration.inference.scaffold_demo import AGENTS

pytestmark = pytest.mark.prebuilt("scaffold-demo")

SERVED = "cc-demo"
"""Its own served name: the session's shared proxy never routes to this replica."""
FORCED_SERVED = "teacher-forced"
FORCING = "rlstack.modelkit.teacher.forcing:TeacherForcing"
MATRIX_TASKS = generate(4, 1000)[:3]
ROUNDS = 2
"""Times a cell goes over the tasks for a trial that runs two tool calls. The demo policy samples at
temperature 1.0 and its warm start lands differently each time (the captures' tool-call ids and
codex's chunk ids are random): in one CI run on 2026-11-26 its codex made one call or garbled
JSON on all three tasks, a policy whose claude-code also garbled two. Every trial on the way is
checked for the whole chain all the same."""


@pytest.fixture(scope="module")
def demo_model(claude_bin, codex_bin, opencode_bin) -> tuple[Path, list[Path]]:
    """The demo policy ``scaffold_demo`` built in the background (``tests/helpers/prebuild.py``)."""
    root = SESSION.wait("scaffold-demo").out
    record = json.loads((root / "record.json").read_text())
    assert record["conversations"] == 16 and record["thread_breaks"] == 0
    return root / "model", [root / agent for agent in AGENTS]


@pytest.fixture(scope="module")
def demo_replica(registry, demo_model, stack_logs) -> Iterator[ReplicaHandle]:
    handle = start_replica(registry.url, demo_model[0], stack_logs, "replica-cc-demo", served_model_name=SERVED)
    yield handle
    handle.sidecar.terminate(grace=60)


@pytest.fixture(scope="module")
def demo_proxy(registry, demo_replica, stack_logs, tmp_path_factory):
    trials = tmp_path_factory.mktemp("cc-trials")
    svc = start_service("proxy", ["--registry-url", registry.url, "--trials-dir", str(trials), "--served-model-name", SERVED,
                                  "--max-tokens-cap", "128", "--watch-timeout-seconds", "2"],
                        stack_logs, python=PROXY_PYTHON, ready_timeout=180)
    yield svc, trials
    svc.terminate()


def test_the_warm_start_renders_each_clis_requests_as_vllm_does(demo_model, demo_replica):
    model, captures = demo_model
    tokenizer = AutoTokenizer.from_pretrained(model)
    for exchange in [e for capture in captures for e in load_exchanges(capture / "exchanges.jsonl") if e["task"]]:
        request = exchange["request"]
        ours = tokenizer(render_prompt(tokenizer, request), add_special_tokens=False)["input_ids"]
        body = {"model": SERVED, "messages": request["messages"], "tools": request["tools"], "add_generation_prompt": True}
        theirs = httpx.post(f"{demo_replica.vllm_url}/tokenize", json=body, timeout=60).json()["tokens"]
        assert ours == theirs


def chat_results(request: dict) -> list[str]:
    return [m["tool_call_id"] for m in request["messages"] if m.get("role") == "tool"]


def anthropic_results(request: dict) -> list[str]:
    return [block["tool_use_id"] for m in request["messages"] if isinstance(m.get("content"), list)
            for block in m["content"] if block.get("type") == "tool_result"]


def responses_results(request: dict) -> list[str]:
    return [item["call_id"] for item in request["input"] if item.get("type") == "function_call_output"]


@dataclass(frozen=True)
class Cell:
    agent: str
    run_as: str
    """How the preset runs it, for the table."""
    api: str
    """The dialect its calls are recorded under (``TrajectoryRecord.api``)."""
    streamed: bool
    make: Callable[[], AgentSpec]
    results: Callable[[dict], list[str]]
    """The tool-call ids a request sends back as tool results, in its dialect."""
    segments: dict[str, int] = field(default_factory=lambda: {"main": 1})
    """The trial's trained sequences by kind."""
    policy: str = "demo"
    """What samples its tokens: ``demo``, the warm-started demo policy; ``teacher-forced``, the tiny
    model with the scripted teacher's turns forced in vLLM (``modelkit.teacher.forcing``)."""


CELLS = [
    Cell("builtin", "`python -m rlstack.agent` (`--agent.name builtin`)", "openai", False,
         lambda: builtin_agent(AgentLimits()), chat_results),
    Cell("claude-code", "`claude -p --bare --tools Bash,Read,Edit` (`--agent.name claude-code`)", "anthropic", True,
         lambda: claude_code_agent(), anthropic_results),
    Cell("codex", "`codex exec` on a `wire_api=responses` provider (`--agent.name codex`)", "responses", True,
         lambda: codex_agent(), responses_results),
    Cell("opencode", "`opencode run --auto --pure` on an OpenAI-compatible provider (`--agent.name opencode`)", "openai", True,
         lambda: opencode_agent(), chat_results),
]
FORCED_CELLS = [
    Cell("claude-code + sub-agents", "`claude -p --tools Bash,Read,Edit,Agent --agents <worker>` (`claude_code_agent(subagents=True)`)",
         "anthropic", True, lambda: claude_code_agent(subagents=True), anthropic_results,
         segments={"main": 1, "sub_agent": 1}, policy="teacher-forced"),
]
"""Cells whose scenario a warm-started demo policy would cost minutes to learn (measured for the
sub-agents: the suite's warm start went from 237 s to 435 s, docs/agent-trials.md): the scripted
teacher's turns are sampled by vLLM itself, so their ids and logprobs are still vLLM's."""


def matrix_table() -> str:
    rows = ["| agent | run as | dialect | streamed | policy | segments trained | trial `ok` | tool calls run (>= 2) | continued calls spliced, 0 thread breaks | reward = verifier's |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    dialects = {"openai": "chat completions", "anthropic": "Anthropic messages", "responses": "Responses"}
    policies = {"demo": "demo (warm-started)", "teacher-forced": "tiny model, teacher-forced"}
    rows += [f"| {c.agent} | {c.run_as} | {dialects[c.api]} | {'yes' if c.streamed else 'no'} | {policies[c.policy]} | {', '.join(f'{k} {v}' for k, v in c.segments.items())} | yes | yes | yes | yes |"
             for c in CELLS + FORCED_CELLS]
    return "\n".join(rows)


@pytest.mark.parametrize("cell", CELLS, ids=[c.agent.replace(" + ", "+") for c in CELLS])
def test_a_scaffold_runs_the_policys_tool_calls_token_exact(cell, demo_model, demo_proxy, claude_bin, codex_bin, opencode_bin,
                                                             tmp_path):
    """Learnt tasks in turn until one trial runs two tool calls: the policy samples at temperature 1.0
    and codex's chunk ids are new to it, so some trials stop after one call or garble a call
    (``ROUNDS``); every trial, whatever the policy did, is checked for the chain."""
    run_cell(cell, *demo_proxy, SERVED, tmp_path)


@pytest.fixture(scope="module")
def forced_proxy(registry, tiny_model, stack_logs, tmp_path_factory):
    """The tiny model with the teacher's turns forced, on the matrix's tasks, behind a proxy of its own."""
    root = tmp_path_factory.mktemp("forced")
    tasks = write_tasks(MATRIX_TASKS, root / "tasks.json")
    replica = start_replica(registry.url, tiny_model, stack_logs, "replica-forced", served_model_name=FORCED_SERVED,
                            extra_args=[f"--extra-vllm-args={json.dumps(['--logits-processors', FORCING])}"],
                            env={TASKS_ENV: str(tasks)})
    try:
        svc = start_service("proxy", ["--registry-url", registry.url, "--trials-dir", str(root / "trials"),
                                      "--served-model-name", FORCED_SERVED, "--max-tokens-cap", "256", "--watch-timeout-seconds", "2"],
                            stack_logs, python=PROXY_PYTHON, ready_timeout=180)
        yield svc, root / "trials", FORCED_SERVED
        svc.terminate()
    finally:
        replica.sidecar.terminate(grace=60)


@pytest.mark.parametrize("cell", FORCED_CELLS, ids=[c.agent.replace(" + ", "+") for c in FORCED_CELLS])
def test_a_scaffold_runs_the_teachers_forced_tool_calls_token_exact(cell, forced_proxy, claude_bin, tmp_path):
    """The same chain and the same checks, with the teacher choosing each token vLLM samples:
    claude-code's main thread delegates to its ``worker`` sub-agent, whose own thread runs the task's
    two commands; both threads are trained, on vLLM's ids, with the verifier's reward."""
    run_cell(cell, *forced_proxy, tmp_path)


@pytest.mark.prebuilt("task-images")
def test_claude_code_runs_the_policys_tool_calls_in_a_trial_pod_of_its_tasks_image(demo_model, demo_proxy, claude_bin,
                                                                                   kube_api, tmp_path):
    """The same chain on the cluster's path: the kubernetes backend against the API emulator, a
    FakeKubelet running the pod's containers in their images (the bundle's copy, then the task's
    image, with no node in it, under the bundle's PID-1 driver)."""
    from rlstack.episodes.bundle.image import bundle_image_ref
    from rlstack.episodes.images.dataset import build_dataset
    from rlstack.episodes.sandboxes import KubernetesSandboxConfig
    from rlstack.episodes.sandboxes.pods import SandboxManager, SandboxPodSecurity
    from rlstack.kube.connection import connect
    from tests.helpers.fake_kubelet import FakeKubelet
    from tests.helpers.task_images import BUNDLE

    SESSION.wait("task-images")  # the bundle's image
    proxy, trials_dir = demo_proxy
    served = SERVED
    write_tasks_of_the_matrix(tmp_path)
    assert build_dataset(tmp_path / "tasks", image_settings(), progress=False).ok
    manager = SandboxManager(connect(kube_api.url, "rl"), "rl", "matrix", pod_security=SandboxPodSecurity(level="baseline"))
    config = KubernetesSandboxConfig(bundle_image=bundle_image_ref(BUNDLE), claim_name="shared", trials_dir=trials_dir,
                                     trials_subpath=trials_dir.name, image_pull_policy="Never")
    with FakeKubelet(kube_api, trials_dir.parent, "rl") as kubelet:
        run_cell(CELLS[1], proxy, trials_dir, served, tmp_path, sandbox=build_sandbox(config, manager), prefix="pod-")
    assert {name.split("/")[1] for name in kubelet.images} == {"bundle", "trial"} and "host" not in kubelet.images.values()


def write_tasks_of_the_matrix(tmp_path: Path) -> None:
    for spec in MATRIX_TASKS:
        write_task(spec, tmp_path / "tasks")


def run_cell(cell: Cell, proxy, trials_dir: Path, served: str, tmp_path: Path,  # noqa: ANN001 - a ServiceProcess
             turn_end: str = TURN_END, sandbox=None, prefix: str = "") -> tuple[list[TrajectoryRecord], Assembly]:  # noqa: ANN001
    """Trials of the matrix's tasks in turn (``ROUNDS`` times over) until one runs two of the policy's
    tool calls in the cell's segments; each trial on the way is checked for the whole chain. Returns
    that trial's calls and what the env would post of them. ``sandbox``: the local one in each task's
    image unless given. ``prefix`` keeps a second run of a cell, sharing the proxy's trials directory,
    off the first one's trial ids."""
    write_tasks_of_the_matrix(tmp_path)
    agent = cell.make()
    tasks = sorted(load_dataset(tmp_path / "tasks").tasks, key=lambda t: "sum-numbers" not in t.name)
    build_base_image(image_settings())  # at once when the session's task-images job made it
    if sandbox is None:
        sandbox = build_sandbox(LocalSandboxConfig(images=image_settings()))  # each trial in its task's image
    loop = asyncio.Runner()  # one loop for every trial of the cell: a kubernetes sandbox serves one
    try:
        return _run_cell_trials(cell, proxy, trials_dir, served, tmp_path, turn_end, sandbox, prefix, agent, tasks, loop)
    finally:
        loop.close()


def _run_cell_trials(cell: Cell, proxy, trials_dir: Path, served: str, tmp_path: Path, turn_end: str, sandbox,  # noqa: ANN001, PLR0913
                     prefix: str, agent, tasks, loop: asyncio.Runner) -> tuple[list[TrajectoryRecord], Assembly]:  # noqa: ANN001
    for round_, task in product(range(ROUNDS), tasks):
        trial = prefix + f"{cell.agent.replace(' + ', '-').replace(' ', '-')}-{task.short_name}" + (f"-r{round_ + 1}" if round_ else "")
        env = trial_env(agent, proxy.url, "matrix", trial, "open", served)
        spec = TrialSpec(run="matrix", trial=trial, task=task, agent=agent, env=env, agent_timeout_sec=180,
                         private_paths=[tmp_path / "tasks"])
        result = loop.run(run_trial(spec, sandbox, trials_dir))
        root = trials_dir / "matrix" / trial
        assert result.status == "ok", (result.error, (root / "agent" / "stdout.txt").read_text()[-2000:])
        assert result.image and result.image.startswith(f"localhost/rlstack-task/{task.short_name}:"), result.image
        assert result.reward == float((root / "verifier" / "reward.txt").read_text())

        calls = sorted(read_trajectory(root), key=lambda r: r.started_at)
        assert calls and all(c.api == cell.api and c.status == "ok" for c in calls)
        assert all(c.streamed == cell.streamed for c in calls)
        for n, call in enumerate(calls[:-1]):  # each call id the policy made comes back as a tool result
            ids = [tc["id"] for tc in call.choices[0].message.get("tool_calls") or []]
            assert set(ids) <= {i for later in calls[n + 1:] for i in cell.results(later.request)}
        assembly = assert_exact_sequences(calls)
        # the end-of-turn token is an id, never text, whether a call went one hop or was spliced
        assert not any(turn_end in str(c.choices[0].message.get("content") or "") for c in calls)
        ran = sum(len(c.choices[0].message.get("tool_calls") or []) for c in calls)
        if ran >= 2 and assembly.segments == cell.segments:
            return calls, assembly
    pytest.fail(f"no {cell.agent} trial ran two of the policy's tool calls in segments {cell.segments}")


def test_the_docs_show_the_matrix():
    text = (REPO / "docs" / "agent-trials.md").read_text()
    section = text.split("\n## Which agents are token-exact: the scaffold matrix\n")[1].split("\n## ")[0]
    assert matrix_table() in section, "docs/agent-trials.md: regenerate its matrix from CELLS"


def assert_exact_sequences(calls: list[TrajectoryRecord]) -> Assembly:
    """What the env posts is vLLM's ids exactly: every call that continued a thread was sent on its
    ids (token-in), so each thread is one sequence, its last call's prompt + completion, whose
    trained tokens are the completions the policy generated in it, in order."""
    assert all(c.prompt_token_ids and c.choices[0].completion_token_ids for c in calls)
    assembly = assemble(calls)
    assert assembly.thread_breaks == 0
    assert assembly.spliced_calls == assembly.merged_calls == len(calls) - len(assembly.sequences)
    by_id = {c.request_id: c for c in calls}
    for sequence in assembly.sequences:
        last = next(c for c in calls if c.prompt_token_ids + c.choices[0].completion_token_ids == sequence.tokens)
        thread = [last]
        while thread[0].splice is not None:
            thread.insert(0, by_id[thread[0].splice.onto])
        generated = [t for c in thread for t in c.choices[0].completion_token_ids]
        assert [t for t, m in zip(sequence.tokens, sequence.masks, strict=True) if m != MASKED] == generated
    return assembly


if __name__ == "__main__":
    print(matrix_table())
