"""``rlstack dryrun``: catch a bad run before anything starts.

Reads a run config (``examples/*.yaml``) or a Helm values file, loads only the model's
``config.json`` (no weights), and checks what otherwise fails minutes into a start-up on
GPUs: a decoder-only causal LM, tensor parallelism dividing the head counts, the memory a GPU
needs for the chosen sync mode, ``ipc`` only on a shared GPU with TP=1, the LoRA rank within
the replicas' ``--max-lora-rank``, and ports and service addresses that resolve.
"""

from __future__ import annotations

import string
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, Field, ValidationError

from rlstack.ops.chart_model import ChartModel, chart_model

GIB = 1024**3
BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}


class TrainerShape(BaseModel):
    """What decides the trainer's memory besides the model (the trainer's own settings)."""

    gpus: int = Field(default=1, ge=1)
    """Ranks FSDP2 shards the weights, gradients and optimiser state over (torchrun processes in all)."""
    tokens_per_micro_batch: int = Field(default=65536, ge=1)
    """pack_tokens, or micro_batch_size x max_token_len for padded rows."""
    activation_checkpointing: bool = False
    cpu_offload: bool = False
    logprob_chunk: int = Field(default=4096, ge=1)
    lora_rank: int | None = None
    lora_base_bytes: int = 2
    """Bytes per frozen base weight under LoRA (bf16 on GPUs)."""
    share_prefix: int | None = None
    """Prefix trees in packed rows: the least shared prefix held once (None: off, padded rows, or not varlen).
    A row holds at most ``tokens_per_micro_batch`` tokens either way, so the estimate stands."""


class Plan(BaseModel):
    """What a run will do, resolved from either config shape."""

    source: str
    model: str
    model_revision: str | None = None
    """The Hub revision when ``model`` is a repo id (a values file's ``model.source.hub``)."""
    model_hint: str = ""
    """The fix shown when ``model`` cannot be read (a values file's model lives on the chart's volume)."""
    device: str = "cuda"
    tensor_parallel_size: int = 1
    sync_mode: str = "filesystem"
    lora_rank: int | None = None
    max_lora_rank: int = 16
    gpu_memory_gib: float = 80.0
    shared_gpu: bool = False
    """Trainer and replica on one GPU (what ipc needs)."""
    trainer: TrainerShape = Field(default_factory=lambda: TrainerShape())
    ports: dict[str, int] = Field(default_factory=dict)


class Finding(BaseModel):
    check: str
    ok: bool
    detail: str


def trainer_shape(settings: Any, gpus: int = 1) -> TrainerShape:  # noqa: ANN401 - a TrainerSettings
    """The trainer's memory-relevant settings."""
    tokens = settings.packing.row_tokens or settings.packing.micro_batch_size * settings.max_token_len
    return TrainerShape(gpus=gpus, tokens_per_micro_batch=tokens, activation_checkpointing=settings.optimisation.activation_checkpointing,
                        cpu_offload=settings.optimisation.cpu_offload, logprob_chunk=settings.packing.logprob_chunk,
                        lora_base_bytes=4 if settings.lora.base_dtype == "float32" else 2,
                        share_prefix=settings.packing.prefix_trees)


def plan_from_run_config(path: Path, data: dict) -> tuple[Plan, list[Finding]]:
    from rlstack.common.model_families import ModelFamilyError
    from rlstack.launcher.config import RunConfig
    from rlstack.launcher.policies import PolicyConfigError, expand
    from rlstack.launcher.service_settings import (
        SETTINGS,
        ServiceSettingsError,
        resolve,
        stand_in_addresses,
    )

    config = RunConfig.model_validate(data)
    findings = []
    if config.policies:
        try:
            config = expand(config)  # each policy's replicas and trainer get its model from the block: they agree
            findings.append(Finding(check="policies", ok=True, detail="; ".join(
                f"{p.name}: {p.model}, replicas {[s.name for s in config.services if s.policy == p.name and s.module == 'rlstack.inference']}"
                for p in config.policies)))
        except (PolicyConfigError, ModelFamilyError) as exc:
            findings.append(Finding(check="policies", ok=False, detail=str(exc)))
    by_name = {s.name: s for s in config.services}
    for spec in config.services:
        for text in [*spec.args, *spec.env.values(), *(v for v in spec.settings.values() if isinstance(v, str))]:
            for _, field, _, _ in string.Formatter().parse(text):
                if not field:
                    continue
                head, _, attr = field.partition(".")
                known = head == "run_dir" or (head in by_name and attr in {"url", "port", *by_name[head].extra_ports})
                if not known:
                    findings.append(Finding(check="addresses", ok=False, detail=f"{spec.name}: {{{field}}} names no service address"))
    fixed = [s.port for s in config.services if s.port]
    if len(fixed) != len(set(fixed)):
        findings.append(Finding(check="addresses", ok=False, detail=f"two services share a fixed port: {sorted(fixed)}"))
    resolved: dict[str, Any] = {}
    if all(f.ok for f in findings):  # a passed check (the policies block) does not stop the settings being read
        addresses = stand_in_addresses(config.services)
        for spec in config.services:
            if spec.module not in SETTINGS:
                continue
            try:
                resolved[spec.module] = resolve(spec, addresses)
            except ServiceSettingsError as exc:
                findings.append(Finding(check="settings", ok=False, detail=str(exc)))
        if not any(f.check == "settings" for f in findings):
            findings.append(Finding(check="settings", ok=True, detail=f"{len(resolved)} service(s) resolve through their settings models"))
    inference, trainer = resolved.get("rlstack.inference"), resolved.get("rlstack.trainer")
    plan = Plan(source=str(path), model=(trainer.model if trainer else None) or (inference.model if inference else None) or "models/tiny",
                device=inference.device if inference else "cpu", tensor_parallel_size=inference.tensor_parallel_size if inference else 1,
                sync_mode=trainer.sync.mode if trainer else "filesystem", lora_rank=trainer.lora.rank if trainer else None,
                max_lora_rank=inference.max_lora_rank if inference else 16, shared_gpu=True,
                ports={s.name: s.port for s in config.services if s.port}, trainer=trainer_shape(trainer) if trainer else TrainerShape())
    if inference and trainer and inference.model != trainer.model:
        findings.append(Finding(check="model", ok=False, detail=f"replica serves {inference.model} but the trainer trains {trainer.model}"))
    return plan, findings


def plan_from_values(path: Path, data: dict, model_dir: str | None) -> tuple[Plan, list[Finding]]:
    """The values read as the chart will pass them (``chart_settings``), through each service's own settings."""
    from rlstack.launcher.service_settings import problems, resolve_settings
    from rlstack.ops.chart_settings import service_env

    inference, trainer = data.get("inference", {}), data.get("trainer", {})
    ports = {name: data.get(name, {}).get("port") for name in ("registry", "batcher", "proxy", "trainer")}
    ports["inference"] = inference.get("port")
    ports["vllm"] = inference.get("vllmPort")
    for e in data.get("envs", []):
        ports[f"env-{e['name']}"] = e.get("port")
    ports = {k: int(v) for k, v in ports.items() if v is not None}
    findings = []
    resolved: dict[str, Any] = {}
    for module in ("rlstack.trainer", "rlstack.inference"):
        try:
            resolved[module] = resolve_settings(module, [], service_env(data, module))
        except ValidationError as exc:
            findings.append(Finding(check="settings", ok=False, detail=f"{module.removeprefix('rlstack.')}: {problems(exc)}"))
            resolved[module] = resolve_settings(module, [], {})
    trainer_settings, inference_settings = resolved["rlstack.trainer"], resolved["rlstack.inference"]
    where = ChartModel(model=model_dir) if model_dir else chart_model(data)
    plan = Plan(source=str(path), model=where.model, model_revision=where.revision, model_hint=where.hint,
                device=inference_settings.device if "device" in inference else "cuda",  # the chart's default
                tensor_parallel_size=inference_settings.tensor_parallel_size, sync_mode=trainer_settings.sync.mode,
                lora_rank=trainer_settings.lora.rank, max_lora_rank=inference_settings.max_lora_rank,
                gpu_memory_gib=float(data.get("gpuMemoryGiB", 80)), shared_gpu=False, ports=ports,
                trainer=trainer_shape(trainer_settings,
                                      gpus=int(trainer.get("gpus", 1) or 1) * int(trainer.get("nodes", 1) or 1)))
    if data.get("policies"):
        findings.append(values_policies(data["policies"]))
    # Services each have their own pod IP, but the replica's two ports share one pod.
    if ports.get("inference") is not None and ports.get("inference") == ports.get("vllm"):
        findings.append(Finding(check="addresses", ok=False, detail=f"sidecar and vLLM both on port {ports['vllm']}"))
    if any(not 0 < p < 65536 for p in ports.values()):
        findings.append(Finding(check="addresses", ok=False, detail=f"port out of range: {ports}"))
    return plan, findings


def values_policies(entries: list[dict]) -> Finding:
    """The chart's ``policies:`` as the proxy and env servers will read them: claims that overlap by a
    prefix (``claude-*`` and ``claude-haiku-*``), which the chart cannot see, are refused here before an
    install rather than by the pods at start."""
    from rlstack.common.policies import PolicyRoute, PolicyTable

    try:
        table = PolicyTable(tuple(PolicyRoute(name=e.get("name", ""), served_names=tuple(e.get("servedNames") or ()),
                                              responses_names=tuple(e.get("responsesNames") or ())) for e in entries))
    except ValidationError as exc:
        from rlstack.launcher.service_settings import problems

        return Finding(check="policies", ok=False, detail=problems(exc))
    return Finding(check="policies", ok=True, detail="; ".join(f"{name}: {', '.join(claims)}"
                                                               for name, claims in table.served("messages").items()))


def merge(base: dict, override: dict) -> dict:
    """Helm's values merge: maps merge key by key, everything else is replaced."""
    out = dict(base)
    for key, value in override.items():
        out[key] = merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def estimate_params(cfg: Any) -> int:
    """Parameters of a Llama/Qwen-shaped decoder from its config alone."""
    h, layers, vocab = cfg.hidden_size, cfg.num_hidden_layers, cfg.vocab_size
    heads = cfg.num_attention_heads
    kv = getattr(cfg, "num_key_value_heads", None) or heads
    head_dim = getattr(cfg, "head_dim", None) or h // heads
    inter = getattr(cfg, "intermediate_size", 4 * h)
    attention = h * heads * head_dim * 2 + h * kv * head_dim * 2
    mlp = 3 * h * inter
    embeddings = vocab * h * (1 if getattr(cfg, "tie_word_embeddings", False) else 2)
    return layers * (attention + mlp) + embeddings


def lora_params(cfg: Any, rank: int) -> int:
    """Adapter parameters on every attention and MLP projection of every layer."""
    h, layers, heads = cfg.hidden_size, cfg.num_hidden_layers, cfg.num_attention_heads
    kv = getattr(cfg, "num_key_value_heads", None) or heads
    head_dim = getattr(cfg, "head_dim", None) or h // heads
    inter = getattr(cfg, "intermediate_size", 4 * h)
    dims = [(h, heads * head_dim), (h, kv * head_dim), (h, kv * head_dim), (heads * head_dim, h), (h, inter), (h, inter), (inter, h)]
    return layers * rank * sum(i + o for i, o in dims)


def trainer_memory(cfg: Any, shape: TrainerShape) -> dict[str, float]:
    """Bytes per GPU of one trainer rank, by part (and ``total``).

    States: full fine-tuning keeps float32 weights, gradients and two AdamW moments (16 bytes per
    parameter) sharded over the ranks, or on the CPU with offload; LoRA keeps the frozen base
    (bf16, sharded) and 16 bytes per adapter parameter. Gathered: FSDP holds the root (embeddings,
    head) and two decoder layers (one computing, one prefetched) unsharded in bf16. Activations
    per token and layer, bf16: ~10 hidden-sized and 4 intermediate-sized tensors kept for
    backward (attention by a fused kernel keeps no T x T scores); with activation checkpointing
    only each layer's input, plus one layer recomputed at a time. Logits: ``logprob_chunk``
    tokens of float32 vocabulary at a time, three such buffers (logits, softmax, gradient).
    """
    params = estimate_params(cfg)
    h, layers, vocab = cfg.hidden_size, cfg.num_hidden_layers, cfg.vocab_size
    inter = getattr(cfg, "intermediate_size", 4 * h)
    world = shape.gpus
    root = vocab * h * (1 if getattr(cfg, "tie_word_embeddings", False) else 2)
    per_layer = (params - root) / layers
    if shape.lora_rank is None:
        states = 0.0 if shape.cpu_offload else 16 * params / world
    else:
        adapter = lora_params(cfg, shape.lora_rank)
        states = (0.0 if shape.cpu_offload else shape.lora_base_bytes * params / world) + 16 * adapter / world
    gathered = 2 * (root + 2 * per_layer)
    tokens = shape.tokens_per_micro_batch
    layer_activations = 2 * (10 * h + 4 * inter) * tokens
    activations = (2 * h * tokens * layers + layer_activations) if shape.activation_checkpointing else layer_activations * layers
    logits = 3 * 4 * min(tokens, shape.logprob_chunk) * vocab
    overhead = 1.5 * GIB  # CUDA context, NCCL buffers, allocator slack
    parts = {"states": states, "gathered_weights": gathered, "activations": activations, "logits": logits, "overhead": overhead}
    parts["total"] = sum(parts.values())
    return parts


def family_finding(model: str) -> Finding:
    """The model's family, which gives each replica its vLLM parsers (``common.model_families``)."""
    from rlstack.common.model_families import ModelFamilyError, family_of

    try:
        family = family_of(model)
    except ModelFamilyError as exc:
        return Finding(check="model family", ok=False, detail=str(exc))
    return Finding(check="model family", ok=True,
                   detail=f"{family.name}: tool parser {family.tool_parser}, reasoning parser {family.reasoning_parser}")


def check_model(plan: Plan) -> tuple[list[Finding], dict[str, Any]]:
    from transformers import AutoConfig

    findings: list[Finding] = []
    try:
        cfg = AutoConfig.from_pretrained(plan.model, revision=plan.model_revision)
    except (OSError, ValueError) as exc:
        hint = f"; {plan.model_hint}" if plan.model_hint else ""
        return [Finding(check="model config", ok=False, detail=f"{plan.model}: {str(exc).splitlines()[0][:200].rstrip('.')}{hint}")], {}
    arch = getattr(cfg, "architectures", None) or []
    causal = any(a.endswith("ForCausalLM") for a in arch) and not getattr(cfg, "is_encoder_decoder", False)
    findings.append(Finding(check="decoder-only causal LM", ok=causal, detail=f"{cfg.model_type} {arch}"))
    if Path(plan.model).is_dir():
        findings.append(family_finding(plan.model))
    else:  # a Hub repo: only its config.json was fetched, and a family is told by the tokenizer too
        findings.append(Finding(check="model family", ok=True, detail=f"not checked: {plan.model} is no local directory "
                                "(--model-dir DIR checks it; each replica checks it at start)"))
    heads = cfg.num_attention_heads
    kv = getattr(cfg, "num_key_value_heads", None) or heads
    tp = plan.tensor_parallel_size
    findings.append(Finding(check="tensor parallel", ok=heads % tp == 0 and (kv % tp == 0 or tp % kv == 0),
                            detail=f"TP={tp}, {heads} attention heads, {kv} KV heads"))
    params = estimate_params(cfg)
    dtype = str(getattr(cfg, "torch_dtype", None) or getattr(cfg, "dtype", None) or "bfloat16").removeprefix("torch.")
    weights = params * BYTES.get(dtype, 2)
    shape = plan.trainer.model_copy(update={"lora_rank": plan.lora_rank})
    parts = trainer_memory(cfg, shape)
    trainer = parts["total"]
    replica = weights / tp
    needed = replica + trainer if plan.shared_gpu else max(replica, trainer)
    memory = {"params": params, "dtype": dtype, "replica_weights_gib_per_gpu": round(replica / GIB, 2),
              "trainer_gib": round(trainer / GIB, 2), "gpu_gib_needed": round(needed / GIB, 2),
              "trainer_gib_by_part": {k: round(v / GIB, 2) for k, v in parts.items()}, "trainer": shape.model_dump()}
    if plan.device == "cuda":
        budget = 0.9 * plan.gpu_memory_gib * GIB
        findings.append(Finding(check="memory per GPU", ok=needed < budget,
                                detail=f"~{needed / GIB:.1f} GiB of {plan.gpu_memory_gib:.0f} GiB before KV cache ({plan.sync_mode} sync)"))
        if trainer >= budget:
            findings.append(Finding(check="trainer memory", ok=False, detail=refusal(parts, shape, plan.gpu_memory_gib)))
    return findings, memory


def refusal(parts: dict[str, float], shape: TrainerShape, gpu_gib: float) -> str:
    """Why the trainer cannot fit, and the settings that shrink the largest part."""
    largest = max((k for k in parts if k != "total"), key=parts.get)
    fixes = {
        "states": "shard over more GPUs (torchrun --nproc-per-node), set optimisation.cpu_offload, or train LoRA (lora.rank)",
        "activations": "set optimisation.activation_checkpointing, or lower packing.row_tokens / packing.micro_batch_size x max_token_len",
        "gathered_weights": "use more GPUs or a smaller model",
        "logits": "lower logprob_chunk",
        "overhead": "use a larger GPU",
    }
    shown = ", ".join(f"{k} {v / GIB:.1f}" for k, v in parts.items() if k != "total")
    return (f"the trainer needs ~{parts['total'] / GIB:.1f} GiB per GPU ({shown} GiB) on {shape.gpus} GPU(s) of {gpu_gib:.0f} GiB "
            f"with {shape.tokens_per_micro_batch} tokens per micro-batch; largest part: {largest}: {fixes[largest]}")


def run_dryrun(path: Path, model_dir: str | None = None) -> tuple[Plan, list[Finding], dict[str, Any]]:
    data = yaml.safe_load(path.read_text()) or {}
    if "services" in data:
        plan, findings = plan_from_run_config(path, data)
    else:
        defaults = path.with_name("values.yaml")
        if defaults.exists() and defaults.resolve() != path.resolve():  # an overlay on the chart's defaults
            data = merge(yaml.safe_load(defaults.read_text()), data)
        plan, findings = plan_from_values(path, data, model_dir)
    if model_dir:
        plan.model = model_dir
    if plan.sync_mode == "ipc":
        findings.append(Finding(check="ipc sync", ok=plan.tensor_parallel_size == 1 and plan.shared_gpu,
                                detail="ipc needs TP=1 and the trainer on the replica's GPU"))
    if plan.sync_mode == "lora" or plan.lora_rank is not None:
        ok = plan.lora_rank is not None and plan.lora_rank <= plan.max_lora_rank and plan.sync_mode == "lora"
        findings.append(Finding(check="lora", ok=ok, detail=f"rank {plan.lora_rank}, replicas accept up to {plan.max_lora_rank}, sync {plan.sync_mode}"))
    model_findings, memory = check_model(plan)
    findings += model_findings
    if not any(f.check == "addresses" for f in findings):
        findings.append(Finding(check="addresses", ok=True, detail=", ".join(f"{k}:{v}" for k, v in plan.ports.items()) or "all picked free"))
    return plan, findings, memory


__all__ = ["Finding", "Plan", "TrainerShape", "estimate_params", "run_dryrun", "trainer_memory"]
