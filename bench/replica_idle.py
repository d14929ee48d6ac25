"""CPU an idle vLLM replica burns: the sidecar reading the weight version from the workers'
files (ours) vs asking the worker with a ``collective_rpc`` every heartbeat (how the sidecar did
it before, replayed here against the same replica).

One registry and one replica (tiny model, ``--heartbeat-seconds`` as given), no requests. For
each way, the CPU seconds used by vLLM's process tree (API server, engine core, worker) over the
same window, read with psutil. After each message vLLM's worker spins on its shared-memory queue
for about a second, so per-beat RPCs keep it busy.

    python -m bench.replica_idle [--seconds 20] [--heartbeat 1]

Last line: one JSON object with both figures and their ratio.
"""

from __future__ import annotations

import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import psutil
from rich.console import Console

from bench.common.cli import bench_parser
from bench.common.harness import REPO, free_port, server
from bench.common.result import emit

console = Console(stderr=True)
VLLM_PY = REPO / ".venv-vllm" / "bin" / "python"


def tree_cpu_seconds(root: psutil.Process) -> float:
    total = 0.0
    for proc in [root, *root.children(recursive=True)]:
        try:
            times = proc.cpu_times()
            total += times.user + times.system
        except psutil.NoSuchProcess:
            pass
    return total


def measure(root: psutil.Process, seconds: float, label: str, during=None) -> float:  # noqa: ANN001
    """CPU seconds per wall second of ``root``'s tree over ``seconds``, with ``during`` running beside."""
    stop = threading.Event()
    helper = threading.Thread(target=during, args=(stop,), daemon=True) if during else None
    time.sleep(3)  # let the last message's busy period end
    before, start = tree_cpu_seconds(root), time.monotonic()
    if helper:
        helper.start()
    with console.status(f"{label}: measuring for {seconds:.0f} s"):
        time.sleep(seconds)
    stop.set()
    if helper:
        helper.join()
    return (tree_cpu_seconds(root) - before) / (time.monotonic() - start)


def main() -> None:
    parser = bench_parser(__doc__)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--heartbeat", type=float, default=1.0)
    parser.add_argument("--model", default=str(REPO / "models" / "tiny"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        logs = Path(tmp)
        reg, side, vllm = free_port(), free_port(), free_port()
        registry_cmd = [sys.executable, "-m", "rlstack.registry", "--port", str(reg)]
        replica_cmd = [str(VLLM_PY), "-m", "rlstack.inference", "--port", str(side), "--model", args.model, "--vllm-port", str(vllm),
                       "--registry-url", f"http://127.0.0.1:{reg}", "--heartbeat-seconds", str(args.heartbeat), "--kv-cache-gib", "1"]
        with server(registry_cmd, reg, "/readyz", logs / "registry.log"), \
                server(replica_cmd, side, "/readyz", logs / "replica.log", timeout=600) as sidecar:
            root = psutil.Process(httpx.get(f"{sidecar}/readyz").json()["vllm_pid"])
            ours = measure(root, args.seconds, "sidecar reads files")

            def rpc_every_beat(stop: threading.Event) -> None:
                with httpx.Client(timeout=30) as client:
                    while not stop.wait(args.heartbeat):
                        client.post(f"http://127.0.0.1:{vllm}/collective_rpc", json={"method": "rlstack_weight_state"})

            baseline = measure(root, args.seconds, "collective_rpc every beat", during=rpc_every_beat)
    result = {"heartbeat_seconds": args.heartbeat, "window_seconds": args.seconds,
              "idle_cpu_cores_files": round(ours, 3), "idle_cpu_cores_rpc_per_beat": round(baseline, 3)}
    console.print(f"idle vLLM replica, heartbeat {args.heartbeat:g} s: {ours:.3f} CPU cores (files) vs "
                  f"{baseline:.3f} (collective_rpc per beat)")
    emit("replica_idle", args, result, {"rpc_per_beat_over_files": round(baseline / max(ours, 1e-3), 1)})


if __name__ == "__main__":
    main()
