"""Trainer settings (env prefix ``RLSTACK_TRAINER_``, or the same fields as flags)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated, ClassVar, Literal

from pydantic import (
    BaseModel,
    Field,
    HttpUrl,
    SecretStr,
    TypeAdapter,
    field_validator,
    model_validator,
)
from pydantic_settings import SettingsConfigDict

from rlstack.common.names import POLICY_NAME
from rlstack.common.settings import PolicySettings
from rlstack.trainer.loss_config import GRPOLossConfig
from rlstack.trainer.verify_config import Tolerance

log = logging.getLogger(__name__)

SyncMode = Literal["filesystem", "broadcast", "lora", "ipc", "none"]


class FilesystemSync(BaseModel):
    """Safetensors written to a shared directory; replicas reload them in place."""

    mode: Literal["filesystem"] = "filesystem"
    weights_dir: Path


class BroadcastSync(BaseModel):
    """Tensors streamed over a gloo (CPU) or NCCL (GPU) group the replicas join; no disk."""

    mode: Literal["broadcast"] = "broadcast"
    host: str


class LoraSync(BaseModel):
    """Only a peft adapter is written; replicas load it as a new named adapter."""

    mode: Literal["lora"] = "lora"
    weights_dir: Path
    rank: int


class IpcSync(BaseModel):
    """CUDA IPC handles to the trainer's own GPU tensors (trainer and replica on one GPU)."""

    mode: Literal["ipc"] = "ipc"


class NoSync(BaseModel):
    """Train without publishing (benchmarks, offline runs)."""

    mode: Literal["none"] = "none"


SyncSpec = Annotated[FilesystemSync | BroadcastSync | LoraSync | IpcSync | NoSync, Field(discriminator="mode")]
"""How new weights reach the replicas, as one typed value: each mode carries only its own fields."""
_SYNC_SPEC: TypeAdapter[FilesystemSync | BroadcastSync | LoraSync | IpcSync | NoSync] = TypeAdapter(SyncSpec)


class PackingSettings(BaseModel):
    """How a batch's sequences are laid into rows for forward and backward."""

    micro_batch_size: int = Field(default=32, ge=1)
    """Padded rows per forward/backward (when ``row_tokens`` is unset)."""
    row_tokens: int | None = Field(default=None, ge=16)
    """Pack sequences into rows of at most this many tokens (position ids restart per sequence, no
    attention across sequences; a longer sequence gets its own row) instead of padding
    ``micro_batch_size`` rows: no compute is spent on padding."""
    share_prefix: int | None = Field(default=64, ge=1)
    """With ``row_tokens`` and attention varlen: sequences of a micro-batch that begin with at least this
    many identical token ids (a group's prompt, a trial's earlier turns) are laid out as prefix trees,
    the prefix computed once per row; rows with nothing to share are packed as before. null: off
    (0, the old spelling, still turns it off, with a warning)."""
    attention: Literal["varlen", "sdpa", "eager"] = "varlen"
    """Attention kernel of the policy. varlen: packed rows by their sequence bounds (torch's flash
    varlen kernel on GPUs, causal SDPA per sequence on CPUs), padded rows by causal SDPA; no
    T x T mask is ever built. sdpa/eager: transformers' own, which builds a dense block mask for
    packed rows (kept for comparison; docs/trainer.md)."""
    logprob_chunk: int = Field(default=4096, ge=1)
    """Trained tokens projected onto the vocabulary at once: bounds the float32 logits of a long
    sequence to ``logprob_chunk x vocab`` in forward and backward."""

    @field_validator("share_prefix", mode="before")
    @classmethod
    def _zero_was_off(cls, value: object) -> object:
        """Off was spelled 0 before every setting's off became null; 0 still means off, for a release."""
        if value in (0, "0"):
            log.warning("share_prefix 0: off is spelled null now (--packing.share-prefix null, "
                        "RLSTACK_TRAINER_PACKING__SHARE_PREFIX=null)")
            return None
        return value

    @property
    def prefix_trees(self) -> int | None:
        """The one place prefix sharing is turned on or off: the shortest prefix laid out as a tree, or None
        when off (``share_prefix`` null, no ``row_tokens``, or attention other than varlen)."""
        return self.share_prefix if self.share_prefix is not None and self.row_tokens and self.attention == "varlen" else None


class OptimisationSettings(BaseModel):
    """How a step's gradients are computed and applied."""

    lr: float = Field(default=1e-4, gt=0)
    weight_decay: float = Field(default=0.0, ge=0)
    max_grad_norm: float = Field(default=1.0, gt=0)
    mixed_precision: Literal["auto", "bf16", "off"] = "auto"
    """bf16: bf16 compute over float32 master weights and optimiser state: bf16 autocast in a plain
    process (GPU or CPU), FSDP2's MixedPrecisionPolicy under torchrun (bf16 parameters, float32
    gradient reduction). off: float32 throughout. auto: bf16 on GPUs, off on CPUs: a CPU without
    native bf16 (AVX512_BF16 or AMX) runs bf16 matmuls several times slower than float32, and the
    default should not depend on which CPU a run lands on (docs/trainer.md#precision)."""
    activation_checkpointing: bool = False
    """Recompute each decoder layer's activations in backward instead of keeping them: long
    sequences fit in a fraction of the memory for about a third more compute."""
    cpu_offload: bool = False
    """Under torchrun: keep the sharded parameters, gradients and optimiser state in CPU memory
    (FSDP2's CPUOffloadPolicy; the optimiser step runs on the CPU). Fits larger models, slower."""


class LoraSettings(BaseModel):
    """A peft LoRA adapter trained instead of every weight."""

    rank: int | None = Field(default=None, ge=1, le=256)
    """The adapter's rank; null: train every weight. Required by sync mode lora."""
    alpha: int = Field(default=32, ge=1)
    base_dtype: Literal["auto", "float32", "bfloat16"] = "auto"
    """dtype of the frozen base under the adapter; auto is bf16 on GPUs (half the memory: 7B
    LoRA at 32k tokens on one 80 GB GPU) and float32 on CPUs. The adapter trains in float32."""
    target_modules: list[str] = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    """Modules the adapter wraps (all attention and MLP projections by default)."""


class SyncSettings(BaseModel):
    """How and how often new weights reach the replicas, and how their arrival is checked."""

    mode: SyncMode = "filesystem"
    every: int = Field(default=1, ge=1)
    """Publish new weights every this many steps (and after the last)."""
    weights_dir: Path | None = None
    """Shared directory the replicas read published weights from; <run_dir>/weights when unset."""
    broadcast_host: str = "127.0.0.1"
    """broadcast: the address replicas reach this trainer's rendezvous on (the pod IP in a cluster)."""
    verify: bool = True
    """After every sync, check that each replica serves the weights it was sent (its logprobs of a
    fixed probe against the trainer's); one that does not is reported and quarantined."""
    verify_tolerance: Tolerance | None = None
    """Probe gap allowed for every replica; by default it follows each replica's dtype."""
    verify_wait_seconds: float = Field(default=300.0, ge=0.0, le=3600.0)
    """When no replica passed the served-weights check because one did not answer (killed mid-check),
    how long to wait for it to come back, then publish and check again, before the sync fails."""


class EvaluationSettings(BaseModel):
    """The held-out score: which env server gives it, and how often."""

    url: HttpUrl | None = None
    """An env server whose POST /evaluate gives its held-out score (greedy accuracy; an agent env's
    pass rate) before the first and after the last step."""
    token: SecretStr | None = None
    """Bearer token of that env server's POST /evaluate (its --auth-token); ``rlstack up`` sets it."""
    every: int | None = Field(default=None, ge=1)
    """Also evaluate every this many steps (on the weights just published), into evals.jsonl."""


TRAINER_RENAMED = {
    "micro_batch_size": "packing.micro_batch_size", "pack_tokens": "packing.row_tokens", "share_prefix": "packing.share_prefix",
    "attention": "packing.attention", "logprob_chunk": "packing.logprob_chunk",
    "lr": "optimisation.lr", "weight_decay": "optimisation.weight_decay", "max_grad_norm": "optimisation.max_grad_norm",
    "mixed_precision": "optimisation.mixed_precision", "activation_checkpointing": "optimisation.activation_checkpointing",
    "cpu_offload": "optimisation.cpu_offload",
    "lora_rank": "lora.rank", "lora_alpha": "lora.alpha", "lora_base_dtype": "lora.base_dtype",
    "lora_target_modules": "lora.target_modules",
    "sync_mode": "sync.mode", "sync_every": "sync.every", "weights_dir": "sync.weights_dir", "broadcast_host": "sync.broadcast_host",
    "verify_sync": "sync.verify", "verify_tolerance": "sync.verify_tolerance", "verify_wait_seconds": "sync.verify_wait_seconds",
    "eval_url": "evaluation.url", "eval_token": "evaluation.token", "eval_every": "evaluation.every",
}
"""The trainer's flat settings before they were grouped, and where each lives now."""


class TrainerSettings(PolicySettings):
    model_config = SettingsConfigDict(env_prefix="RLSTACK_TRAINER_", cli_prog_name="rlstack.trainer")
    renamed: ClassVar[dict[str, str]] = TRAINER_RENAMED

    port: int = Field(default=8400, ge=0, le=65535)
    model: str = "models/demo"
    """Hugging Face model directory the replicas started from (the policy at version 0)."""
    batcher_url: HttpUrl = HttpUrl("http://127.0.0.1:8000")
    batcher_token: SecretStr | None = None
    batcher_policy: str | None = Field(default=None, pattern=POLICY_NAME)
    """With a batcher of several policies: the one whose queue this trainer takes (its replicas'
    served name); unset: the batcher's first, as with any Atropos trainer."""
    batcher_outage_seconds: float = Field(default=600.0, gt=0)
    """How long the batch poll waits out a batcher it cannot reach (restarting, rolled by an
    upgrade: it replays its log and comes back) before the trainer gives up and exits."""
    registry_url: HttpUrl | None = None
    """Where the replicas to sync are found; required unless sync.mode is none."""
    replica_api_key: SecretStr | None = None
    """vLLM's --api-key, for the weight-sync routes."""
    run_dir: Path = Path("runs/trainer")
    """Checkpoints, metrics.jsonl, summary.json and reward.png go here."""
    trials_dir: Path | None = None
    """The proxy's trajectory directory, counted into summary.json."""
    steps: int = Field(default=60, ge=1)
    batch_size: int = Field(default=64, ge=1)
    """Sequences per optimiser step (the batcher's batch size)."""
    max_token_len: int = Field(default=2048, ge=16)
    device: Literal["auto", "cpu", "cuda"] = "auto"
    """Where the policy trains; auto takes this rank's GPU when CUDA is present."""
    loss: GRPOLossConfig = GRPOLossConfig()
    packing: PackingSettings = PackingSettings()
    optimisation: OptimisationSettings = OptimisationSettings()
    lora: LoraSettings = LoraSettings()
    sync: SyncSettings = SyncSettings()
    evaluation: EvaluationSettings = EvaluationSettings()
    mismatch_versions: int = Field(default=3, ge=0, le=64)
    """Published versions whose trainable weights are kept in host memory, so rows sampled by them
    are checked for training–inference mismatch under their own weights; set it to the batcher's
    ``max_staleness`` + 1 to cover every row that can arrive. 0 checks only current-version rows."""
    mismatch_sample: int = Field(default=8, ge=0)
    """Rows of older versions scored per step under their own weights (a no-grad forward each)."""
    checkpoint_every: int = Field(default=10, ge=1)
    keep_checkpoints: int = Field(default=2, ge=1)
    torch_threads: int | None = Field(default=None, ge=1)
    """CPU threads for torch; leave cores to vLLM when both share a machine."""
    seed: int = 0
    exit_when_done: bool = False
    """Stop the process after the last step (a local run); a Deployment keeps serving /status instead."""
    wandb_project: str | None = None
    """Log steps, evals and the summary to this Weights & Biases project (WANDB_API_KEY, WANDB_MODE apply)."""
    wandb_entity: str | None = None
    wandb_run_name: str | None = None
    """Defaults to the run directory's name."""

    @model_validator(mode="after")
    def _sync_mode_matches_training(self) -> TrainerSettings:
        mode, rank = self.sync.mode, self.lora.rank
        if mode == "lora" and rank is None:
            raise ValueError("sync.mode=lora trains an adapter: set lora.rank")
        if mode in ("filesystem", "broadcast", "ipc") and rank is not None:
            raise ValueError(f"sync.mode={mode} publishes full weights; with lora.rank use sync.mode=lora")
        # broadcast_host and weights_dir are placement the chart sets for every mode: not refused elsewhere.
        return self

    @model_validator(mode="after")
    def _one_policy(self) -> TrainerSettings:
        """The queue it trains from and the replicas it syncs are one policy's: a policy's name is its served name."""
        if self.batcher_policy is not None and self.batcher_policy != self.served_model_name:
            raise ValueError(f"batcher_policy {self.batcher_policy!r} is not served_model_name {self.served_model_name!r}: a "
                             "trainer takes the batches of the policy whose replicas it syncs (set both to the policy's name)")
        return self

    @property
    def policy(self) -> str:
        """The policy this trainer trains: its replicas' served name (its batcher queue's name)."""
        return self.served_model_name

    @property
    def sync_spec(self) -> FilesystemSync | BroadcastSync | LoraSync | IpcSync | NoSync:
        """The sync mode and its own settings, validated as a discriminated union."""
        weights_dir = self.sync.weights_dir or self.run_dir / "weights"
        fields = {"filesystem": {"weights_dir": weights_dir}, "broadcast": {"host": self.sync.broadcast_host},
                  "lora": {"weights_dir": weights_dir, "rank": self.lora.rank}}.get(self.sync.mode, {})
        return _SYNC_SPEC.validate_python({"mode": self.sync.mode, **fields})
