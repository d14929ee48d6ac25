"""A short supervised warm start on the arithmetic task, so RL starts from a policy with signal.

A random 3.5M-parameter model never samples a right answer, and GRPO learns nothing from a
group whose rewards are all zero. A few hundred SFT steps on the env's own prompts (never the
held-out set) leave a policy that is right some of the time and unsure: the regime where RL's
improvement is visible. The step budget is deliberately small, and it is the contract: the RL
demos are tuned to the policy those steps leave. ``max_seconds`` is only a guard for a stuck
machine; a time budget would leave a weaker policy on a slower or busier machine (measured: 27
agent warm-start steps instead of 60 in 480 s while a run shared the 2 cores) and make runs
differ from machine to machine.
"""

from __future__ import annotations

import json
import logging
import time
from itertools import islice
from pathlib import Path

import torch
from pydantic import BaseModel, Field

from rlstack.common.contracts.atropos import MASKED
from rlstack.envs.tasks.arithmetic import (
    ArithmeticConfig,
    heldout,
    messages,
    parse_answer,
    problems,
)

log = logging.getLogger(__name__)


class WarmStartSpec(BaseModel):
    task: ArithmeticConfig = ArithmeticConfig(heldout_size=64)
    steps: int = Field(default=300, ge=0)
    batch_size: int = Field(default=64, ge=1)
    lr: float = Field(default=1e-3, gt=0)
    max_seconds: float = Field(default=1800, gt=0)
    seed: int = 0


def encode(tokenizer, problem, with_answer: bool) -> tuple[list[int], int]:  # noqa: ANN001 - a HF tokenizer
    """Token ids of the chat prompt (plus the answer and end-of-turn), and where the answer starts."""
    prompt = tokenizer.apply_chat_template(messages(problem), add_generation_prompt=True, tokenize=False)
    prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    if not with_answer:
        return prompt_ids, len(prompt_ids)
    answer_ids = tokenizer(str(problem.answer), add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    return prompt_ids + answer_ids, len(prompt_ids)


def sft_batch(tokenizer, batch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:  # noqa: ANN001
    rows = [encode(tokenizer, p, with_answer=True) for p in batch]
    width = max(len(ids) for ids, _ in rows)
    input_ids = torch.full((len(rows), width), tokenizer.pad_token_id, dtype=torch.long)
    labels = torch.full((len(rows), width), -100, dtype=torch.long)
    attention = torch.zeros((len(rows), width), dtype=torch.long)
    for i, (ids, start) in enumerate(rows):
        input_ids[i, : len(ids)] = torch.tensor(ids)
        labels[i, start : len(ids)] = torch.tensor(ids[start:])
        attention[i, : len(ids)] = 1
    return input_ids, labels, attention


def answer_loss(model, input_ids: torch.Tensor, attention: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:  # noqa: ANN001
    """Cross-entropy on the answer tokens only, projecting just those positions onto the vocabulary.

    The prompt is most of every row and the vocabulary projection most of the compute, so
    skipping the prompt's logits makes each step about twice as fast.
    """
    hidden = model.model(input_ids=input_ids, attention_mask=attention).last_hidden_state[:, :-1]
    targets = labels[:, 1:]
    keep = targets != MASKED
    logits = model.lm_head(hidden[keep])
    return torch.nn.functional.cross_entropy(logits.float(), targets[keep])


WARMUP_STEPS = 20


def lr_share(step: int, steps: int, lr_end: float) -> float:
    """The share of the peak learning rate at ``step`` of ``steps``: the warm-up, then linear to ``lr_end``."""
    if step < WARMUP_STEPS:
        return (step + 1) / WARMUP_STEPS
    return 1.0 - (1.0 - lr_end) * (step - WARMUP_STEPS) / max(1, steps - 1 - WARMUP_STEPS)


def sft_steps(model, next_batch, steps: int, lr: float, max_seconds: float, desc: str,  # noqa: ANN001
              progress: bool, lr_end: float = 1.0) -> tuple[int, float]:
    """AdamW with a 20-step warm-up on ``next_batch()``'s (input_ids, labels, attention), then linear
    to ``lr_end * lr`` at the last step (1.0: constant), up to ``steps`` or ``max_seconds``; returns
    the steps taken and the last loss."""
    from tqdm import tqdm

    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: lr_share(step, steps, lr_end))
    start, loss_value, done = time.monotonic(), float("nan"), 0
    bar = tqdm(range(steps), desc=desc, disable=not progress, unit="step")
    for done in bar:
        if time.monotonic() - start > max_seconds:
            log.warning("%s stopped at its time bound after %d of %d steps: the policy is weaker than specified",
                        desc, done, steps)
            return done, loss_value
        input_ids, labels, attention = next_batch()
        loss = answer_loss(model, input_ids, attention, labels)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad(set_to_none=True)
        loss_value = loss.item()
        bar.set_postfix(loss=f"{loss_value:.3f}")
    return steps, loss_value


@torch.no_grad()
def greedy_accuracy(model, tokenizer, batch, max_new_tokens: int = 6) -> float:  # noqa: ANN001
    """Greedy answers of the local model (a quick check; the run measures through vLLM)."""
    model.eval()
    right = 0
    for problem in batch:
        ids, _ = encode(tokenizer, problem, with_answer=False)
        out = model.generate(torch.tensor([ids]), max_new_tokens=max_new_tokens, do_sample=False,
                             eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
        right += parse_answer(tokenizer.decode(out[0, len(ids):], skip_special_tokens=True)) == problem.answer
    model.train()
    return right / max(1, len(batch))


def warm_start(model_dir: Path, spec: WarmStartSpec, progress: bool = True) -> dict[str, float]:
    """Fine-tune ``model_dir`` in place; returns step count, final loss and held-out greedy accuracy."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(spec.seed)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    stream = problems(spec.task.model_copy(update={"seed": spec.seed}))
    start = time.monotonic()
    steps, loss_value = sft_steps(model, lambda: sft_batch(tokenizer, list(islice(stream, spec.batch_size))),
                                  spec.steps, spec.lr, spec.max_seconds, "warm start", progress)
    accuracy = greedy_accuracy(model, tokenizer, heldout(spec.task))
    model.save_pretrained(model_dir, safe_serialization=True)
    result = {"steps": steps, "loss": loss_value, "heldout_greedy_accuracy": accuracy, "seconds": time.monotonic() - start}
    (model_dir / "rlstack-warm-start.json").write_text(json.dumps({"spec": spec.model_dump(), **result}, indent=2))
    log.info("warm start: %s", result)
    return result
