"""The Atropos trajectory API's wire types (atroposlib 0.4.0), plus our optional ``weight_version``,
``sampling_versions`` and ``trials``.

Field names and shapes match atroposlib's server so its ``BaseEnv`` and trainers work
unchanged; unknown fields are ignored, nulls accepted in every optional field. Type checks
happen here; cross-field checks (row lengths, trained positions) live in the batcher's
validation module so they can report the exact offending field.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, Strict, field_validator, model_validator

from rlstack.common.names import POLICY_NAME

MASKED = -100
"""A ``masks`` entry for a position that is not trained (prompt, tool output): Atropos's convention."""

# Atropos clients send extra keys we don't know; ignoring them is the compatible choice.
_lenient = ConfigDict(extra="ignore")

MAX_ABS_VALUE = 1e9
"""Largest |score|, |advantage| or |logprob| stored: the trainer's float32 group statistics of
values this large stay finite (1e308 passes ``isfinite`` but its square does not)."""
MAX_ID = 2**31 - 1
SAVED_STEP_HEADER = "X-Rlstack-Saved-Step"
"""rlstack extension on ``GET /batch``: the step the trainer's latest checkpoint holds (``replay_unsaved``)."""
GROUP_NAME_KEY = "rlstack_group"
"""rlstack extension in ``group_overrides``: the env's own name of a group (agent envs: ``<run>-<env>-g<n>``,
its trials ``<group>-t<i>``), carried to the trainer's step records."""


def group_name(group: dict[str, Any]) -> str | None:
    """A group's ``GROUP_NAME_KEY`` as the wire carries it, if its env named it."""
    overrides = group.get("group_overrides")
    name = overrides.get(GROUP_NAME_KEY) if isinstance(overrides, dict) else None
    return name if isinstance(name, str) else None


# A group that arrived alone is served back to trainers as the client's own bytes, so what is
# stored must already be what a trainer can use: no coercion of "5", 5.0 or true into 5.
TokenId = Annotated[int, Strict(), Field(ge=0, le=MAX_ID)]
MaskValue = Annotated[int, Strict(), Field(ge=-100, le=MAX_ID)]
Value = Annotated[float, Strict(), Field(ge=-MAX_ABS_VALUE, le=MAX_ABS_VALUE, allow_inf_nan=False)]


class TrainerRegistration(BaseModel):
    """``POST /register``: the trainer announces its batch shape."""

    model_config = _lenient
    wandb_group: str = ""
    wandb_project: str = ""
    batch_size: int = Field(ge=1, le=MAX_ID)
    max_token_len: int = Field(ge=1, le=MAX_ID)
    checkpoint_dir: str = ""
    save_checkpoint_interval: int = -1
    starting_step: int = Field(default=0, ge=0, le=MAX_ID)
    num_steps: int = -1
    vocab_size: int | None = Field(default=None, ge=1, le=MAX_ID)
    """rlstack extension: the policy's vocabulary; the batcher then refuses token ids at or above it."""
    policy: str | None = Field(default=None, pattern=POLICY_NAME)
    """rlstack extension: the policy this trainer trains (its queue in the batcher); absent: the first."""
    batch_fill: Literal["exact", "at_least"] = "exact"
    """rlstack extension: ``exact`` (Atropos's rule) hands out whole groups summing to exactly
    ``batch_size`` sequences; ``at_least`` hands out the oldest whole groups once they reach it
    (fewer than one group's rows over), so groups whose trials bring several sequences (side calls,
    sub-agents, compacted segments) never wait for an exact fit. rlstack's trainer asks for it."""
    replay_unsaved: bool = False
    """rlstack extension: keep each served batch until the trainer's checkpoint holds its step (the
    trainer says so in ``X-Rlstack-Saved-Step`` on ``GET /batch``), and when the trainer registers
    again from an earlier ``starting_step`` (killed and resumed), serve those batches again, in
    order. Without it a trainer killed between checkpoints drops the groups of the steps it lost:
    they were trained into weights that died with it, and the resumed trainer gets new ones."""


class EnvRegistration(BaseModel):
    """``POST /register-env``: an environment server joins."""

    model_config = _lenient
    max_token_length: int = Field(ge=1, le=MAX_ID)
    desired_name: str = Field(min_length=1, max_length=256)
    weight: float = Field(default=1.0, ge=0.0, le=1e6, allow_inf_nan=False)
    group_size: int = Field(ge=1, le=MAX_ID)
    min_batch_allocation: float | None = Field(default=None, ge=0.0, le=1.0)


class EnvIdentifier(BaseModel):
    """Body of ``/disconnect-env`` and of the GET-with-body ``/status-env``."""

    model_config = _lenient
    env_id: int = Field(ge=0, le=MAX_ID)


HoldReason = Literal["backlog", "staleness"]
"""Why an env starts no new work: enough of its own groups wait (``backlog``), or the policy has
not caught up with what it already started (``staleness``)."""


class EnvStatusQuery(EnvIdentifier):
    """``/status-env``'s body as rlstack's env servers send it: every poll renews the env's lease."""

    holding_back: HoldReason | None = None
    """rlstack extension: whether, and why, the env held back at its last decision; the batcher
    names such envs when the trainer starves (Atropos clients leave it out)."""


class ScoredData(BaseModel):
    """One scored group: ``len(tokens)`` sequences of one prompt, with their rewards."""

    model_config = ConfigDict(extra="ignore", allow_inf_nan=False)

    tokens: list[list[TokenId]]
    masks: list[list[MaskValue]]
    """-100 (not trained) or the token id, as Atropos envs send them; never booleans."""
    scores: list[Value]
    advantages: list[list[Value]] | None = None
    ref_logprobs: list[list[Value]] | None = None
    messages: list[list[dict[str, Any]]] | None = None
    generation_params: dict[str, Any] | None = None
    inference_logprobs: list[list[Value]] | None = None
    """vLLM's logprob of each token; when absent the trainer takes the step on-policy (its own logprobs)."""
    overrides: list[dict[str, Any]] | None = None
    group_overrides: dict[str, Any] | None = None
    images: Any | None = None
    env_id: int | None = Field(default=None, ge=0, le=MAX_ID)
    distill_token_ids: list[list[list[TokenId]]] | None = None
    distill_logprobs: list[list[list[Value]]] | None = None
    weight_version: int | None = Field(default=None, ge=0, le=MAX_ID)
    """rlstack extension: the oldest policy version that sampled any of the group's tokens (the
    staleness filter's number). With ``sampling_versions`` it is their minimum, set if left out."""
    sampling_versions: list[list[Annotated[int, Strict(), Field(ge=0, le=MAX_ID)]]] | None = None
    """rlstack extension: per sequence, the weight versions that sampled its trained tokens, oldest
    first, as the replica labelled them (vLLM's per-token version spans, or its label before and after
    a call): one entry, the row was sampled by one version; several, its tokens span a sync (the
    trainer's mismatch check leaves such rows out and counts them)."""
    trials: list[Annotated[int, Strict(), Field(ge=0, le=MAX_ID)]] | None = None
    """rlstack extension: which member of the group (an agent trial) each row belongs to, 0..n-1.
    A trial may bring several sequences (its main thread, side calls, sub-agents, the segments
    after a compaction), all carrying its score; the group then has ``n`` = its env's
    ``group_size`` members and may have more rows, and advantages are computed over members,
    not rows. Absent: every row is its own member (Atropos)."""

    policy: str | None = Field(default=None, pattern=POLICY_NAME)
    """rlstack extension: the policy whose trainer takes this group (a run training two policies
    posts each its own rows); absent: the batcher's first policy (Atropos)."""

    @property
    def members(self) -> int:
        return len(set(self.trials)) if self.trials is not None else len(self.tokens)

    @field_validator("sampling_versions")
    @classmethod
    def _versions_are_sorted_sets(cls, value: list[list[int]] | None):
        for row in value or ():
            if not row or any(a >= b for a, b in zip(row, row[1:])):
                raise ValueError("each row lists the versions that sampled it: at least one, strictly increasing")
        return value

    @model_validator(mode="after")
    def _weight_version_is_the_oldest_sampling_version(self) -> ScoredData:
        if self.sampling_versions:
            oldest = min(row[0] for row in self.sampling_versions)
            if self.weight_version is None:
                self.weight_version = oldest
            elif self.weight_version != oldest:
                raise ValueError(f"weight_version: {self.weight_version}, but the oldest of sampling_versions is {oldest}")
        return self

    @field_validator("messages")
    @classmethod
    def _messages_have_role_and_content(cls, value: list[list[dict[str, Any]]] | None):
        for row in value or ():
            for message in row:
                if "role" not in message or "content" not in message:
                    raise ValueError("every message needs 'role' and 'content'")
        return value


class RegisterResponse(BaseModel):
    uuid: int


class RegisterEnvResponse(BaseModel):
    status: str
    env_id: int | None = None
    wandb_name: str | None = None
    checkpoint_dir: str | None = None
    starting_step: int | None = None
    checkpoint_interval: int | None = None
    num_steps: int | None = None


class Status(BaseModel):
    current_step: int
    queue_size: int


class PolicyStatus(BaseModel):
    """One policy's part of ``/status-env``."""

    model_config = _lenient
    current_step: int
    queue_size: int
    self_queue_size: int
    trainer_waiting: bool = False
    batch_size: int | None = None
    trainer_done: bool = False
    """Its trainer has taken every step it registered for (``num_steps``): its versions grow no more,
    so an env's staleness gate and backlog stop waiting on it while the other policies train on."""


class EnvStatus(BaseModel):
    current_step: int
    queue_size: int
    unallocated_fraction: float
    self_queue_size: int
    max_group_size: int
    env_weight: float
    """This env's share among the envs whose lease is live (a killed env stops counting once its
    lease runs out, so the live envs' weights sum to 1)."""
    trainer_waiting: bool = False
    """rlstack extension: the trainer asked for a batch and the queue could not give one. An env
    never holds back while this is true: no share rule may keep the queue below a batch."""
    policies: dict[str, PolicyStatus] | None = None
    """rlstack extension, with several policies: each one's queue as this env sees it (the numbers
    above are the first's)."""

