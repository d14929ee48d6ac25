"""Cross-field checks on scored groups, each failure naming the exact field and row.

Atropos accepts ragged or empty groups and they fail later inside the trainer; here they are a
422 at the door. Errors use FastAPI's shape: ``{"loc": [...], "msg": ..., "type": ...}``.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from rlstack.common.contracts.atropos import MASKED, ScoredData

Loc = tuple[str | int, ...]


class GroupRejected(Exception):
    """Raised with FastAPI-shaped error details; the API turns it into a response."""

    def __init__(self, status_code: int, errors: list[dict[str, Any]], reason: str) -> None:
        super().__init__(errors[0]["msg"] if errors else reason)
        self.status_code = status_code
        self.errors = errors
        self.reason = reason


def error(loc: Loc, msg: str, kind: str = "value_error") -> dict[str, Any]:
    return {"loc": ["body", *loc], "msg": msg, "type": kind}


def from_pydantic(exc: ValidationError, prefix: Loc = ()) -> GroupRejected:
    errors = [error((*prefix, *e["loc"]), e["msg"], e["type"]) for e in exc.errors(include_url=False)]
    return GroupRejected(422, errors, "schema")


def check_shapes(group: ScoredData, loc: Loc = ()) -> list[dict[str, Any]]:
    """Row counts and lengths agree, every sequence trains on something."""
    problems: list[dict[str, Any]] = []
    size = len(group.tokens)
    if size == 0:
        return [error((*loc, "tokens"), "group has no sequences")]
    for name in ("masks", "scores"):
        rows = len(getattr(group, name))
        if rows != size:
            problems.append(error((*loc, name), f"has {rows} rows, tokens has {size}"))
    for name in ("advantages", "ref_logprobs", "inference_logprobs", "messages", "overrides",
                 "distill_token_ids", "distill_logprobs", "sampling_versions"):
        value = getattr(group, name)
        if value is not None and len(value) != size:
            problems.append(error((*loc, name), f"has {len(value)} rows, tokens has {size}"))
    if problems:
        return problems

    for i, (tokens, masks) in enumerate(zip(group.tokens, group.masks)):
        if not tokens:
            problems.append(error((*loc, "tokens", i), "sequence is empty"))
            continue
        if len(masks) != len(tokens):
            problems.append(error((*loc, "masks", i), f"has {len(masks)} positions, tokens has {len(tokens)}"))
        elif masks.count(MASKED) == len(masks):
            problems.append(error((*loc, "masks", i), "no trained position (every mask is -100)"))
        for name in ("advantages", "ref_logprobs", "inference_logprobs", "distill_token_ids", "distill_logprobs"):
            rows = getattr(group, name)
            if rows is None:
                continue
            row = rows[i]
            # Advantages may be one per sequence or one per token.
            if name == "advantages" and len(row) == 1:
                continue
            if len(row) != len(tokens):
                problems.append(error((*loc, name, i), f"has {len(row)} positions, tokens has {len(tokens)}"))
    if group.distill_token_ids is not None and group.distill_logprobs is not None:
        for i, (ids_row, lp_row) in enumerate(zip(group.distill_token_ids, group.distill_logprobs)):
            for p, (ids, lps) in enumerate(zip(ids_row, lp_row)):
                if len(ids) != len(lps):
                    problems.append(error((*loc, "distill_logprobs", i, p), "top-k width differs from distill_token_ids"))
                    break
    return problems


def check_vocab(group: ScoredData, vocab_size: int, loc: Loc = ()) -> list[dict[str, Any]]:
    """Every token id (and distillation id) below the trainer's vocabulary: an embedding lookup
    past it fails the step on a GPU (device assert) or trains on garbage."""
    problems: list[dict[str, Any]] = []
    for i, row in enumerate(group.tokens):
        if row and max(row) >= vocab_size:
            position = next(p for p, t in enumerate(row) if t >= vocab_size)
            problems.append(error((*loc, "tokens", i, position), f"token id {row[position]} is outside the vocabulary ({vocab_size})"))
    for i, row in enumerate(group.distill_token_ids or ()):
        if any(t >= vocab_size for ids in row for t in ids):
            problems.append(error((*loc, "distill_token_ids", i), f"a token id is outside the vocabulary ({vocab_size})"))
    return problems


def check_trials(group: ScoredData, loc: Loc = ()) -> list[dict[str, Any]]:
    """``trials`` (one member index per row) must cover 0..n-1 and give a member's rows one score."""
    if group.trials is None:
        return []
    if len(group.trials) != len(group.tokens):
        return [error((*loc, "trials"), f"has {len(group.trials)} entries for {len(group.tokens)} sequences")]
    members = sorted(set(group.trials))
    if members != list(range(len(members))):
        return [error((*loc, "trials"), f"member indices must be 0..n-1 with none missing, got {members[:20]}")]
    score: dict[int, float] = {}
    for row, member in enumerate(group.trials):
        if score.setdefault(member, group.scores[row]) != group.scores[row]:
            return [error((*loc, "scores", row), f"member {member}'s sequences carry different scores")]
    return []
