"""Build a CLI agent's demo policy (claude-code's, codex's, or one for both): tokenizer and tiny
model made here, warm-started on what the real CLI sent while the scripted teacher solved
generated tasks.

1. capture (``capture.py``): the agent, the proxy and the teacher on generated
   tasks of a seed disjoint from the training tasks; skipped when the capture exists;
2. the tokenizer is trained on the usual corpus plus the rendered conversations, so claude-code's
   system prompt and tool schemas take few tokens; or, for a model family (``--model-family``),
   the family's own tokenizer and template on a tiny model of its architecture;
3. supervised warm start on the conversations, each call rendered as vLLM renders it
   (``corpus.py``): prompts masked, the teacher's turns trained.
"""

from __future__ import annotations

import json
import logging
import random
import shutil
import time
from pathlib import Path

import torch
from pydantic import BaseModel, Field

from rlstack.episodes.harbor.make_tasks import FAMILIES, generate
from rlstack.modelkit.agent_demo.builtin import _batch
from rlstack.modelkit.agent_demo.capture import Agent, CaptureSpec, capture
from rlstack.modelkit.agent_demo.corpus import (
    TEMPLATE,
    conversations,
    encode,
    load_exchanges,
    render_prompt,
    tokenizer_text,
)
from rlstack.modelkit.teacher.scripted import FINAL_TEXT, SUB_TASK, message_text
from rlstack.modelkit.tiny import TinyModelSpec, build_tiny_model
from rlstack.modelkit.warm_start import sft_steps

log = logging.getLogger(__name__)
RECORD = "rlstack-claude-code-warm-start.json"
"""Its name from when claude-code was the only CLI agent: kept, so built demo models stay built."""


FAMILY_STEPS = 400
"""Warm-start steps for a tiny policy on a model family's tokenizer (``--model-family``): with
Qwen3's 151,936 ids, claude-code's policy wrote garbled calls after 70 steps (loss 0.78) and
solved a sum-numbers task with its own two calls after 400 (loss 0.03; docs/model-families.md)."""
DEFAULT_STEPS = {"claude-code": 70, "codex": 120, "opencode": 70}
"""Warm-start steps that leave a policy sometimes right on new tasks, where GRPO has signal.
codex needs more: its tool output starts with a random chunk id and a wall time, and after 70
steps its second command came out garbled in most trials (`make run-agent AGENT=codex`,
mean reward 0.03 over its first 9 steps)."""
TEAM_STEPS = {"lead": 300, "helper": 70}
"""Warm-start steps of the claude-code team's two policies (``build_team_demo``). The lead's calls are
longer to get right (an ``Agent`` call carrying the task, after a ``Bash`` look): after 70 steps its loss
was 0.15 and in the first team run 39 of 40 trials never reached the helper (garbled calls); after 150,
46 % of its trials handed the worker the task word for word, and the worker, rewarded on the team's
outcome, was punished for doing faithfully the wrong sub-task it was given: both fell (docs/policies.md).
The worker's two calls are the single demo's kind, loss 0.025 after 70, sometimes right: where GRPO has
signal."""


class CliAgentDemoSpec(BaseModel):
    capture_tasks: int = Field(default=84, ge=1)
    """Generated tasks claude-code solves with the teacher (all families in turn)."""
    capture_seed: int = 1000
    """Disjoint from the seed of the training tasks."""
    capture_families: tuple[str, ...] = FAMILIES
    """The task families captured (all of them by default; the team's leaves out ``fix``, whose
    solution needs the file the lead looked at, which its delegation does not pass on)."""
    capture_concurrency: int = Field(default=4, ge=1)
    tokenizer_prose_bytes: int = Field(default=4_000_000, ge=0)
    """Standard-library prose in the tokenizer's corpus (the demo's 4 MB; a test's model needs less)."""
    tokenizer_weight: int = Field(default=10, ge=0)
    """How often each captured conversation is repeated in the tokenizer's corpus."""
    max_position_embeddings: int = Field(default=4096, ge=512)
    """claude-code's conversations are ~1k tokens in this tokenizer; vLLM serves this context."""
    steps: int = Field(default=70, ge=0)
    """Short on purpose: measured on this corpus, 60 steps solve no task of the four training families and
    150 solve nearly all; in between the policy is sometimes right, which is where GRPO has signal."""
    batch_size: int = Field(default=8, ge=1)
    lr: float = Field(default=1e-3, gt=0)
    lr_end: float = Field(default=1.0, gt=0, le=1)
    """The learning rate at the last step, as a share of ``lr`` (linear after the warm-up). The demos
    keep it constant (1.0): their step counts were chosen for a policy that is only sometimes right.
    A policy learnt by heart (the scaffold matrix's) decays it, so it does not end on a noisy step."""
    max_seconds: float = Field(default=1800, gt=0)
    """A bound for a stuck machine only: 70 steps take ~30 s on two quiet cores, ~10 min on two cores shared
    by six engineers (measured); a warm start cut short by time is a different, weaker policy."""
    seed: int = 0
    model_family: str = "demo"
    """``demo``: the tokenizer is trained here and the template is the compact one (``TEMPLATE``);
    another family: its real tokenizer and template on a tiny model of its architecture
    (``family_model``), whose prompts carry claude-code's full JSON tool schemas."""


def is_built(out: Path, model_family: str = "demo", steps: int | None = None) -> bool:
    """A current demo model in ``out``; with ``steps``, warm-started for exactly that many steps, as set and
    as taken (a changed setting, or a warm start its time guard cut short, rebuilds it rather than
    training on the old one)."""
    if steps is not None:
        record = json.loads((out / RECORD).read_text()) if (out / RECORD).exists() else {}
        if record.get("spec", {}).get("steps") != steps or record.get("steps", steps) != steps:
            return False
    if model_family != "demo":
        from rlstack.common.model_families import get_family
        from rlstack.modelkit.family_model import is_built as family_built

        return family_built(out, get_family(model_family)) and (out / RECORD).exists()
    from rlstack.modelkit.tiny import is_current

    return is_current(out, TEMPLATE) and (out / RECORD).exists()


def complete(threads: list[list[dict]]) -> list[list[dict]]:
    """Conversations that ended with the teacher's final answer (a trial cut short is left out)."""
    return [t for t in threads if t[-1]["response"].get("content") == FINAL_TEXT]


def captured_threads(captures: dict[Agent, Path], spec: CliAgentDemoSpec) -> list[list[dict]]:
    """Every complete conversation of each agent's capture (captured first where the directory has none)."""
    threads = []
    for agent, capture_dir in captures.items():
        if not (capture_dir / "exchanges.jsonl").exists():
            result = capture(generate(spec.capture_tasks, spec.capture_seed, spec.capture_families), capture_dir,
                             CaptureSpec(concurrency=spec.capture_concurrency, agent=agent))
            log.info("captured %d calls of %s on %d tasks (%d solved) in %.0fs", result.exchanges, agent, result.trials,
                     result.solved, result.seconds)
        captured = complete(conversations(load_exchanges(capture_dir / "exchanges.jsonl")))
        if not captured:
            raise RuntimeError(f"{capture_dir}: no complete {agent} conversation was captured")
        threads += captured
    return threads


def _base_model(out: Path, threads: list[list[dict]], spec: CliAgentDemoSpec) -> None:
    """The tokenizer (the demo's, trained on the conversations too; or a family's) and the untrained tiny model."""
    if spec.model_family == "demo":
        build_tiny_model(out, TinyModelSpec(max_position_embeddings=spec.max_position_embeddings, seed=spec.seed),
                         extra_text=list(tokenizer_text([t[-1] for t in threads])) * spec.tokenizer_weight, template=TEMPLATE,
                         prose_bytes=spec.tokenizer_prose_bytes)
    else:
        from rlstack.common.model_families import get_family
        from rlstack.modelkit.family_model import FamilyTinySpec, build_family_tiny_model

        build_family_tiny_model(out, get_family(spec.model_family),
                                FamilyTinySpec(max_position_embeddings=spec.max_position_embeddings, seed=spec.seed))


def _warm_start(out: Path, threads: list[list[dict]], spec: CliAgentDemoSpec, label: str, progress: bool) -> dict:
    """Supervised steps on the conversations' calls, each rendered as vLLM renders it; saved into ``out``."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(spec.seed)
    rng = random.Random(spec.seed)
    tokenizer = AutoTokenizer.from_pretrained(out)
    model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
    rows, breaks = [], 0
    for thread in threads:
        thread_rows, thread_breaks = encode(tokenizer, thread)
        rows += thread_rows
        breaks += thread_breaks
    first_prompt = len(tokenizer(render_prompt(tokenizer, threads[0][0]["request"]), add_special_tokens=False)["input_ids"])
    longest = max(len(ids) for ids, _ in rows)
    if longest > spec.max_position_embeddings:
        raise ValueError(f"a captured conversation is {longest} tokens; max_position_embeddings is {spec.max_position_embeddings}")
    sft_start = time.monotonic()
    steps, loss = sft_steps(model, lambda: _batch(rng.sample(rows, min(spec.batch_size, len(rows))), tokenizer.pad_token_id),
                            spec.steps, spec.lr, spec.max_seconds, f"{label} warm start", progress, lr_end=spec.lr_end)
    model.save_pretrained(out, safe_serialization=True)
    return {"spec": spec.model_dump(), "conversations": len(threads), "rows": len(rows), "thread_breaks": breaks,
            "first_prompt_tokens": first_prompt, "mean_tokens": sum(len(r[0]) for r in rows) / len(rows),
            "longest_tokens": longest, "steps": steps, "loss": loss, "sft_seconds": time.monotonic() - sft_start}


def build_cli_agent_demo(out: Path, captures: dict[Agent, Path], spec: CliAgentDemoSpec, progress: bool = True) -> dict:
    """One policy for every agent in ``captures`` (agent -> its capture directory, captured when empty)."""
    started = time.monotonic()
    threads = captured_threads(captures, spec)
    _base_model(out, threads, spec)
    record = _warm_start(out, threads, spec, " + ".join(captures), progress)
    record |= {"seconds": time.monotonic() - started, "captures": {agent: str(d) for agent, d in captures.items()}}
    (out / RECORD).write_text(json.dumps(record, indent=2))
    log.info("%s demo: %s", " + ".join(captures), record)
    return record


def is_sub_agent(thread: list[dict]) -> bool:
    """A sub-agent's conversation: its user turns carry the teacher's delegated prompt (after claude-code's
    reminders), as the teacher itself tells the threads apart."""
    return any(SUB_TASK in message_text(m) for m in thread[0]["request"]["messages"] if m.get("role") == "user")


def build_team_demo(lead: Path, helper: Path, capture_dir: Path, spec: CliAgentDemoSpec, progress: bool = True,
                    steps: dict[str, int] | None = None) -> dict:
    """Two policies from one capture of claude-code with a sub-agent (``claude-code-team``): the lead's
    conversations warm-start ``lead``, the sub-agent's ``helper``. One tokenizer for both, trained on
    both, so each policy reads the other's words (the lead's delegated prompt is the helper's task).
    ``steps``: each role's warm-start steps (``lead``, ``helper``); unset, ``spec.steps`` for both."""
    started = time.monotonic()
    threads = captured_threads({"claude-code-team": capture_dir}, spec)
    helper_threads = [t for t in threads if is_sub_agent(t)]
    lead_threads = [t for t in threads if not is_sub_agent(t)]
    if not helper_threads or not lead_threads:
        raise RuntimeError(f"{capture_dir}: {len(lead_threads)} lead and {len(helper_threads)} sub-agent conversations; "
                           "a team needs both")
    _base_model(lead, threads, spec)
    if helper.exists():
        shutil.rmtree(helper)
    shutil.copytree(lead, helper)  # the same tokenizer and starting weights
    records = {}
    for name, out, own in (("lead", lead, lead_threads), ("helper", helper, helper_threads)):
        role = spec.model_copy(update={"steps": steps[name]}) if steps else spec
        records[name] = _warm_start(out, own, role, f"claude-code team {name}", progress)
        records[name] |= {"role": name, "seconds": time.monotonic() - started, "captures": {"claude-code-team": str(capture_dir)}}
        (out / RECORD).write_text(json.dumps(records[name], indent=2))
    log.info("claude-code team demo: %s", records)
    return records
