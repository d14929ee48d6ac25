"""The policy, its optimiser and what is done with them (step, checkpoint, export, probe), on one rank.

Under torchrun, rank 0 runs the service (HTTP app, batch pulling, weight sync) and every other
rank runs ``Engine.serve``: rank 0 broadcasts each operation with its arguments (a batch's
groups, a checkpoint directory) over the gloo control group, then all ranks run it together.
A batch's token lists are a few MB at most, next to a step of seconds; one process talking to
the batcher keeps the Atropos contract (one trainer, one step counter) and one sender per sync.
In a plain process ``call`` just runs the operation.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from rlstack.trainer import attention, checkpoint
from rlstack.trainer.batch import to_tensors
from rlstack.trainer.config import TrainerSettings
from rlstack.trainer.distributed import DistContext, broadcast_object, init_distributed, shard
from rlstack.trainer.logprobs import PolicyLogprobs
from rlstack.trainer.mismatch import MismatchAccumulator
from rlstack.trainer.step import StepStats, grpo_step
from rlstack.trainer.versions import VersionStore, pick_rows, score_sample

log = logging.getLogger(__name__)


def base_dtype(settings: TrainerSettings, device: torch.device) -> torch.dtype:
    """Full fine-tuning keeps float32 master weights (FSDP computes in bf16 on GPUs); a LoRA base is
    frozen, so on a GPU it is held in bf16 (half the memory) unless float32 is asked for."""
    if settings.lora.rank is None or settings.lora.base_dtype == "float32":
        return torch.float32
    if settings.lora.base_dtype == "bfloat16":
        return torch.bfloat16
    return torch.bfloat16 if device.type == "cuda" else torch.float32


def computes_in_bf16(settings: TrainerSettings, device: torch.device) -> bool:
    """``mixed_precision`` resolved for the device the policy trains on (auto: bf16 on GPUs only)."""
    if settings.optimisation.mixed_precision == "auto":
        return device.type == "cuda"
    return settings.optimisation.mixed_precision == "bf16"


def attn_implementation(settings: TrainerSettings) -> str:
    """The transformers ``attn_implementation`` for ``settings.packing.attention`` (ours is registered first)."""
    return attention.register() if settings.packing.attention == "varlen" else settings.packing.attention


def load_policy(settings: TrainerSettings, resume: Path | None, dtype: torch.dtype = torch.float32,  # noqa: ANN201 - a transformers or peft model
                base: torch.nn.Module | None = None):
    """The base model, with a trainable LoRA adapter when ``lora_rank`` is set (resumed from
    ``resume`` when given: full weights, or the adapter over the base; a sharded checkpoint is
    loaded later, over the base). ``base``: a model already built (a benchmark's random weights)
    instead of ``settings.model``'s."""
    from transformers import AutoModelForCausalLM

    attn = attn_implementation(settings)
    hf_resume = resume if resume is not None and checkpoint.kind(resume) == "hf" else None
    if base is not None:
        base.set_attn_implementation(attn)
    if settings.lora.rank is None:
        if base is not None and hf_resume is None:
            return base
        return AutoModelForCausalLM.from_pretrained(hf_resume or settings.model, dtype=torch.float32, attn_implementation=attn)
    from peft import LoraConfig, PeftModel, get_peft_model

    if base is None:
        base = AutoModelForCausalLM.from_pretrained(settings.model, dtype=dtype, attn_implementation=attn)
    if hf_resume is not None:
        return PeftModel.from_pretrained(base, hf_resume, is_trainable=True)
    config = LoraConfig(r=settings.lora.rank, lora_alpha=settings.lora.alpha, target_modules=settings.lora.target_modules,
                        lora_dropout=0.0, task_type="CAUSAL_LM")
    return get_peft_model(base, config)  # adapter weights stay float32 over a bf16 base (peft's default)


class Engine:
    def __init__(self, settings: TrainerSettings, ctx: DistContext | None = None) -> None:
        self.s = settings
        self.ctx = ctx or init_distributed(settings.device)
        self.model: Any = None
        """The transformers (or peft) model: what checkpoints and publishers see."""
        self.policy: PolicyLogprobs | None = None
        """The module the step runs (FSDP2-sharded under torchrun)."""
        self.optimizer: torch.optim.Optimizer | None = None
        self.consumer: Callable[[str, dict[str, torch.Tensor]], None] | None = None
        """Rank 0's receiver of gathered layers during ``stream`` (the broadcast publisher's)."""
        self.ipc_sender: Callable[[str, Any], None] | None = None
        self.ipc_finisher: Callable[[], None] | None = None
        """Rank 0's receivers of every rank's handles to each layer, and of the end, during ``share``."""
        self.ipc_source: Any = None
        """This rank's ``sync.ipc.IpcSource`` (its GPU); set before ``load`` to share another way (tests on CPU)."""
        self.versions = VersionStore(settings.mismatch_versions)
        """The trainable weights of recent published versions (this rank's shard), for the mismatch of older rows."""
        self._lock = threading.Lock()

    # -- rank 0 drives, every other rank follows --------------------------------------------
    def call(self, op: str, *args: Any) -> Any:
        """Run ``op`` on every rank (rank 0 only calls this); its result on rank 0."""
        with self._lock:
            broadcast_object(self.ctx, (op, args))
            return getattr(self, op)(*args)

    def serve(self) -> None:
        """A follower rank: run what rank 0 sends until it says stop."""
        while True:
            op, args = broadcast_object(self.ctx)
            if op == "stop":
                return
            getattr(self, op)(*args)

    def stop(self) -> None:
        """Release the followers (rank 0 calls ``call("stop")``; this runs on rank 0 only)."""

    # -- operations ---------------------------------------------------------------------------
    def load(self, resume: Path | None, base: torch.nn.Module | None = None) -> None:
        """``base``: an already built model to train instead of loading ``settings.model`` (benchmarks)."""
        ctx, s = self.ctx, self.s
        if s.sync.mode == "ipc" and self.ipc_source is None:
            from rlstack.trainer.sync.ipc import cuda_source

            self.ipc_source = cuda_source(ctx.device)  # refuses without CUDA: ipc shares GPU memory
        model = load_policy(s, resume, base_dtype(s, ctx.device), base)
        if s.optimisation.activation_checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        policy = PolicyLogprobs(model, s.packing.logprob_chunk)
        if ctx.launched:
            shard(policy, model, ctx, mixed_precision=computes_in_bf16(s, ctx.device), cpu_offload=s.optimisation.cpu_offload)
            if not s.optimisation.cpu_offload:
                policy.to(ctx.device)
        elif ctx.device.type == "cuda":
            policy.cuda()
        self.model, self.policy = model, policy
        trainable = [p for p in policy.parameters() if p.requires_grad]
        # One fused kernel per step on GPUs instead of foreach's few per parameter group.
        fused = ctx.device.type == "cuda" and not s.optimisation.cpu_offload
        self.optimizer = torch.optim.AdamW(trainable, lr=s.optimisation.lr, weight_decay=s.optimisation.weight_decay, fused=fused)
        if resume is not None:
            checkpoint.load_training_state(resume, policy, self.optimizer, sharded=ctx.launched)

    def step(self, groups: list[dict], version: int) -> StepStats:
        """One GRPO step; first, a sample of rows from older kept versions is scored under their own
        weights, so the step's mismatch covers more than the current version's rows."""
        batch = to_tensors(groups)
        mismatch = MismatchAccumulator()
        rows = pick_rows(batch, version, self.versions, self.s.mismatch_sample, seed=version)
        bf16 = computes_in_bf16(self.s, self.ctx.device)
        score_sample(self.policy, batch, rows, self.versions, mismatch, self.s.packing.micro_batch_size, self.ctx, bf16=bf16)
        return grpo_step(self.policy, self.optimizer, batch, self.s.loss, self.s.packing.micro_batch_size, self.s.optimisation.max_grad_norm,
                         version, pack_tokens=self.s.packing.row_tokens, ctx=self.ctx, mismatch=mismatch,
                         share_prefix=self.s.packing.prefix_trees, bf16=bf16)

    def remember(self, version: int) -> None:
        """Keep the current weights as ``version`` (called when they are published)."""
        self.versions.remember(version, [p for p in self.policy.parameters() if p.requires_grad])

    def save(self, directory: Path, state: checkpoint.CheckpointState, keep: int) -> Path:
        if self.ctx.launched:
            return checkpoint.save_sharded(directory, self.policy, self.optimizer, state, keep, self.ctx)
        return checkpoint.save(directory, self.model, self.optimizer, state, keep)

    def export(self, path: Path) -> None:
        """A Hugging Face directory of the current weights for the replicas, gathered layer by layer."""
        from rlstack.trainer.sync.gather import save_gathered

        save_gathered(self.model, path, self.ctx)

    def stream(self) -> None:
        """Every rank gathers one layer at a time; rank 0 hands each to ``consumer`` and drops it.

        A consumer error must not stop rank 0 early (the other ranks would wait in the next
        all-gather forever): it is kept, the gathering finishes, then it is raised.
        """
        from rlstack.trainer.sync.gather import gathered

        error: BaseException | None = None
        for unit, tensors in gathered(self.model):
            if self.ctx.is_main and self.consumer is not None and error is None:
                try:
                    self.consumer(unit, tensors)
                except Exception as exc:  # noqa: BLE001 - re-raised once every rank is done
                    error = exc
        if error is not None:
            raise error

    def share(self) -> None:
        """``ipc``: every rank gathers one layer onto its own device and makes handles to it; rank 0
        hands every rank's handles to ``ipc_sender``, then all ranks wait for it before dropping the
        layer. The last layer stays alive through ``ipc_finisher`` (a replica may still hold it).

        As in ``stream``, an error on rank 0 is kept until every rank has finished gathering.
        """
        from rlstack.trainer.distributed import barrier, gather_object
        from rlstack.trainer.sync.gather import gathered, unit_count
        from rlstack.trainer.sync.ipc import merge
        from rlstack.trainer.sync.ipc import share as share_tensors

        if self.ipc_source is None:
            raise RuntimeError("no ipc source on this rank: the trainer was not started with sync_mode=ipc")
        error: BaseException | None = None
        held: dict[str, torch.Tensor] = {}

        def on_main(fn: Callable[..., None], *args: Any) -> None:
            nonlocal error
            if self.ctx.is_main and fn is not None and error is None:
                try:
                    fn(*args)
                except Exception as exc:  # noqa: BLE001 - re-raised once every rank is done
                    error = exc

        last = unit_count(self.model) - 1
        for i, (unit, tensors) in enumerate(gathered(self.model, device=self.ctx.device)):
            units = gather_object(self.ctx, share_tensors(tensors, self.ipc_source))
            on_main(self.ipc_sender, unit, merge(units) if units else None)
            barrier(self.ctx)  # the replicas have copied this layer: it may go before the next is gathered
            if i == last:
                held = tensors
            del tensors
        on_main(self.ipc_finisher)
        barrier(self.ctx)
        del held
        if self.ctx.device.type == "cuda":
            torch.cuda.ipc_collect()  # free what the replicas have released
        if error is not None:
            raise error

    def probe(self, tokens: list[int]) -> list[float]:
        """log p(token t+1 | tokens <= t) in float32 (the served-weights check), computed by every rank."""
        device = self.ctx.device
        was_training = self.policy.training
        self.policy.eval()
        try:
            with torch.no_grad():
                ids = torch.tensor([tokens[:-1]], device=device)
                lp = self.policy(ids, torch.tensor([tokens[1:]], device=device), attention_mask=torch.ones_like(ids))
        finally:
            self.policy.train(was_training)
        return lp[0].float().tolist()


class ShardedPolicy:
    """What a weight publisher on rank 0 needs from a policy sharded over ranks: every call is an
    ``Engine`` operation the other ranks join. Used instead of the model when torchrun launched us."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.config = engine.model.config

    def save_pretrained(self, path: Path, safe_serialization: bool = True) -> None:  # noqa: ARG002 - always safetensors
        self.engine.call("export", Path(path))

    def probe_logprobs(self, tokens: list[int]) -> list[float]:
        return self.engine.call("probe", tokens)

    def weight_layout(self) -> list[tuple[str, torch.dtype, list[int]]]:
        from rlstack.trainer.sync.gather import layout

        return layout(self.engine.model)

    def share_weights(self, send: Callable[[str, Any], None], finish: Callable[[], None]) -> None:
        """``ipc``: every rank shares each gathered layer from its own GPU; ``send`` gets all ranks' handles, then ``finish``."""
        self.engine.ipc_sender, self.engine.ipc_finisher = send, finish
        try:
            self.engine.call("share")
        finally:
            self.engine.ipc_sender = self.engine.ipc_finisher = None

    def stream_weights(self, consume: Callable[[str, dict[str, torch.Tensor]], None]) -> None:
        """Full weights layer by layer into ``consume`` on this rank, every rank gathering with it."""
        self.engine.consumer = consume
        try:
            self.engine.call("stream")
        finally:
            self.engine.consumer = None


def follow(settings: TrainerSettings) -> None:
    """A rank other than 0: hold a shard of the policy and run what rank 0 sends, then exit."""
    engine = Engine(settings)
    if settings.torch_threads:
        torch.set_num_threads(settings.torch_threads)
    torch.manual_seed(settings.seed)
    log.info("rank %d of %d follows rank 0", engine.ctx.rank, engine.ctx.world_size)
    try:
        engine.serve()
    finally:
        from rlstack.trainer.distributed import shutdown

        shutdown(engine.ctx)
