"""`make run-agent` in miniature: the shipped agent config started by `rlstack up` (registry,
batcher, vLLM, LiteLLM proxy, trainer, agent env server with bubblewrap sandboxes), on a
freshly built agent demo model, two GRPO steps on multi-turn trials of the built-in agent, each
trial in its generated task's own image (built by the env server before its first trial), the
agent from the agent bundle.

The model is the real warm-started demo policy, so trials have several calls: their calls
must merge into single sequences whose trained tokens are exactly the policy's completions,
and the trainer's logprobs on those sequences must match vLLM's (the mismatch KL).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from rlstack.common.contracts.atropos import MASKED
from rlstack.common.contracts.trajectory import read_trajectory
from rlstack.episodes.assemble import assemble
from rlstack.episodes.images.base import build_base_image
from tests.conftest import REPO
from tests.helpers.prebuild import SESSION
from tests.helpers.task_images import BASE_MAP, image_settings

STEPS = 2
pytestmark = pytest.mark.prebuilt("agent-demo")


@pytest.fixture(scope="module")
def agent_demo() -> tuple[Path, Path]:
    """``rlstack make-agent-demo --tasks 16``, run in the background from the session's start
    (``tests/helpers/prebuild.py``)."""
    root = SESSION.wait("agent-demo").out
    return root / "model", root / "tasks"


def set_flag(args: list[str], flag: str, value: str) -> None:
    args[args.index(flag) + 1] = value


def test_agent_run_trains_on_merged_multi_turn_trials(agent_demo, tmp_path):
    model, tasks = agent_demo
    config = yaml.safe_load((REPO / "examples" / "local-agent.yaml").read_text())
    config["runs_dir"] = str(tmp_path / "runs")
    services = {s["name"]: s for s in config["services"]}
    for name in ("inference", "trainer"):
        set_flag(services[name]["args"], "--model", str(model))
    set_flag(services["trainer"]["args"], "--steps", str(STEPS))
    set_flag(services["trainer"]["args"], "--batch-size", "16")  # the suite's cost; the demo's 32 is measured in docs
    set_flag(services["env"]["args"], "--tasks-dir", str(tasks))
    set_flag(services["env"]["args"], "--heldout-size", "4")  # of the 16 generated tasks
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(config))

    build_base_image(image_settings())  # at once when the session's task-images job made it
    env = {**os.environ, "RLSTACK_TASKS_BASE_MAP": json.dumps(BASE_MAP)}  # what `make run-agent` exports
    done = subprocess.run([sys.executable, "-m", "rlstack.cli", "up", str(path)], cwd=REPO, capture_output=True,
                          text=True, timeout=1800, env=env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    run_dir = (tmp_path / "runs" / "latest").resolve()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["steps"] == STEPS and summary["weight_version"] == STEPS
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert records[0]["mismatch"]["tokens"] > 0 and summary["mismatch_kl_max"] < 0.05  # multi-turn rows line up

    # Held-out evaluation before and after training: one trial per held-out task, the pass rate in the summary.
    assert [(e["phase"], e["step"], e["problems"]) for e in summary["evals"]] == [("before", 0, 4), ("after", STEPS, 4)]
    assert all(0 <= e["accuracy"] <= 1 and sum(e["statuses"].values()) == e["trials"] >= 4 for e in summary["evals"])
    every = [json.loads(p.read_text()) for p in (run_dir / "trials" / "agent").glob("*/result.json")]
    assert sum("-eval-" in r["trial"] for r in every) == sum(e["trials"] for e in summary["evals"])
    results = [r for r in every if "-eval-" not in r["trial"]]
    assert all(r["image"].startswith("localhost/rlstack-task/") for r in every if r["status"] == "ok")
    assert summary["agent"] == "builtin"
    stats = summary["trial_stats"]
    assert stats["continued_calls"] == stats["merged_calls"] + stats["thread_breaks"] > 0
    assert summary["merge_share"] == stats["merged_calls"] / stats["continued_calls"]
    assert sum(r["status"] == "ok" for r in results) >= 16
    assert all(r["status"] == "ok" or r["error"] == "cancelled while running" for r in results)  # or stopped with the run
    merged = [r for r in results if (r["trajectory"] or {}).get("merged_calls", 0) >= 1]  # None: stopped mid-assembly
    assert merged, "no trial made a second call that extended its first"
    # A trial with a break has a sequence that starts at the break, its earlier calls masked as
    # prompt (they are trained in the sequence before it): look at one thread without breaks.
    merged = [r for r in merged if r["trajectory"]["thread_breaks"] == 0]
    assert merged, "every merged trial also broke its thread"
    trial = run_dir / "trials" / "agent" / merged[0]["trial"]
    calls = read_trajectory(trial)
    main = max(assemble(calls).sequences, key=lambda s: s.trained_tokens)

    def whole(c) -> list[int]:  # noqa: ANN001 - a logged call: its prompt and completion both lie in the thread
        return c.prompt_token_ids + c.choices[0].completion_token_ids

    in_thread = [c for c in calls if main.tokens[: len(whole(c))] == whole(c)]
    assert len(in_thread) >= 2
    completions = [t for c in in_thread for t in c.choices[0].completion_token_ids]
    assert [t for t, m in zip(main.tokens, main.masks) if m != MASKED] == completions  # only the policy's tokens
    assert json.loads((trial / "agent" / "trajectory.json").read_text())["agent"]["name"] == "builtin"
    assert "stopped: env=0, trainer=0, proxy=0, inference=0, batcher=0, registry=0" in done.stderr + done.stdout
