"""Direct vLLM vs the same replica through the proxy (LiteLLM + trajectory logger), one run.

The same bounded load goes to both (and, for streaming cells, to a second proxy using
LiteLLM's own streaming instead of our shim): chat requests with short (8-token) and 200-token answers
(``ignore_eos`` so lengths are exact), streaming and not, at concurrency 16 and 32, from the
same lean keep-alive client. Prints req/s, p50/p99 latency and generated tokens/s for each
side and the ratios (proxy / direct). Loopback only; starts and stops its own services.

    python bench/proxy.py [--requests 200] [--model models/tiny]

Last line: one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import orjson
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import REPO, free_port, server  # noqa: E402
from _http import RawHttpClient  # noqa: E402

from rlstack.common.contracts.trajectory import read_trajectory  # noqa: E402

console = Console(stderr=True)
VLLM_PY = REPO / ".venv-vllm" / "bin" / "python"
PROXY_PY = REPO / ".venv-proxy" / "bin" / "python"


def body(i: int, tokens: int, stream: bool) -> bytes:
    # logprobs + token ids on both sides: an RL client talking to vLLM directly needs them too,
    # so the ratio measures the hop (LiteLLM, our layers, the logger), not vLLM's extra work.
    request = {"model": "policy", "messages": [{"role": "user", "content": f"Request {i}: what is {i} + {i}?"}],
               "max_tokens": tokens, "ignore_eos": True, "temperature": 1.0, "stream": stream,
               "logprobs": True, "return_token_ids": True}
    if stream:
        request["stream_options"] = {"include_usage": True}
    return orjson.dumps(request)


def completion_tokens(payload: bytes, stream: bool) -> int:
    if not stream:
        return orjson.loads(payload)["usage"]["completion_tokens"]
    for line in reversed(payload.split(b"\n")):
        if line.startswith(b"data: {") and b'"usage"' in line:
            usage = json.loads(line[6:]).get("usage")
            if usage:
                return usage["completion_tokens"]
    raise RuntimeError("stream ended without a usage chunk")


async def run_cell(port: int, path_prefix: str, n: int, concurrency: int, tokens: int, stream: bool, progress, task) -> dict:
    queue = list(range(n))
    latencies: list[float] = []
    generated = 0

    async def worker() -> None:
        nonlocal generated
        async with RawHttpClient("127.0.0.1", port) as client:
            while queue:
                i = queue.pop()
                start = time.perf_counter()
                status, payload = await client.request("POST", f"{path_prefix}/v1/chat/completions", body(i, tokens, stream),
                                                       {"content-type": "application/json", "authorization": "Bearer bench"})
                if status != 200:
                    raise RuntimeError(f"HTTP {status}: {payload[:300]!r}")
                latencies.append(time.perf_counter() - start)
                generated += completion_tokens(payload, stream)
                progress.advance(task)

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    wall = time.perf_counter() - start
    latencies.sort()
    return {"req_per_s": n / wall, "p50_ms": 1000 * statistics.median(latencies),
            "p99_ms": 1000 * latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))], "gen_tokens_per_s": generated / wall}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=200, help="requests per cell")
    parser.add_argument("--model", default=str(REPO / "models" / "tiny"))
    parser.add_argument("--concurrency", type=int, nargs="+", default=[16, 32])
    args = parser.parse_args()
    for py in (VLLM_PY, PROXY_PY):
        if not py.exists():
            sys.exit(f"missing {py.parent.parent.name}: run `make setup` first")
    if not (Path(args.model) / "config.json").exists():
        sys.exit(f"no model at {args.model}: run `rlstack make-tiny-model` first")

    cells = [(c, t, s) for c in args.concurrency for t in (8, 200) for s in (False, True)]
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        reg_port, side_port, vllm_port, proxy_port, native_port = (free_port() for _ in range(5))
        registry_cmd = [sys.executable, "-m", "rlstack.registry", "--port", str(reg_port), "--log-level", "warning"]
        replica_cmd = [str(VLLM_PY), "-m", "rlstack.inference", "--port", str(side_port), "--vllm-port", str(vllm_port),
                       "--model", args.model, "--registry-url", f"http://127.0.0.1:{reg_port}", "--replica-id", "bench-0",
                       "--log-level", "warning"]
        proxy_cmd = [str(PROXY_PY), "-m", "rlstack.proxy", "--port", str(proxy_port), "--registry-url", f"http://127.0.0.1:{reg_port}",
                     "--trials-dir", str(tmp_path / "trials"), "--log-level", "warning"]
        native_cmd = [str(PROXY_PY), "-m", "rlstack.proxy", "--port", str(native_port), "--registry-url", f"http://127.0.0.1:{reg_port}",
                      "--trials-dir", str(tmp_path / "trials-native"), "--log-level", "warning", "--stream-mode", "litellm"]
        console.print("starting registry, vLLM replica (~1 min) and two proxies ...")
        with server(registry_cmd, reg_port, "/readyz", tmp_path / "registry.log"), \
             server(replica_cmd, side_port, "/readyz", tmp_path / "replica.log"), \
             server(proxy_cmd, proxy_port, "/readyz", tmp_path / "proxy.log"), \
             server(native_cmd, native_port, "/readyz", tmp_path / "proxy-native.log"), \
             Progress(console=console, transient=True) as progress:
            for concurrency, tokens, stream in cells:
                name = f"c{concurrency}_{tokens}tok_{'stream' if stream else 'plain'}"
                sides = [("direct", vllm_port, ""), ("proxy", proxy_port, "/trials/bench/t")]
                if stream:
                    sides.append(("litellm_stream", native_port, "/trials/bench/native"))
                for side, port, prefix in sides:
                    task = progress.add_task(f"{side} {name}", total=args.requests)
                    results.setdefault(name, {})[side] = asyncio.run(
                        run_cell(port, prefix, args.requests, concurrency, tokens, stream, progress, task))
            trajectory_lines = len(read_trajectory(tmp_path / "trials" / "bench" / "t"))

    table = Table(title=f"proxy vs direct vLLM ({args.requests} requests per cell, tiny model on CPU)")
    for col in ("cell", "direct req/s", "proxy req/s", "direct p50/p99 ms", "proxy p50/p99 ms", "direct tok/s", "proxy tok/s", "tok/s ratio"):
        table.add_column(col, justify="right")
    flat: dict[str, float] = {}
    for name, sides in results.items():
        d, p = sides["direct"], sides["proxy"]
        ratio = p["gen_tokens_per_s"] / d["gen_tokens_per_s"]
        if "litellm_stream" in sides:
            n = sides["litellm_stream"]
            flat[f"{name}_shim_vs_litellm_stream_req_per_s"] = round(p["req_per_s"] / n["req_per_s"], 3)
            table.add_row(f"{name} (LiteLLM's stream)", "", f"{n['req_per_s']:.1f}", "", f"{n['p50_ms']:.0f}/{n['p99_ms']:.0f}", "",
                          f"{n['gen_tokens_per_s']:.0f}", f"{n['gen_tokens_per_s'] / d['gen_tokens_per_s']:.2f}")
        table.add_row(name, f"{d['req_per_s']:.1f}", f"{p['req_per_s']:.1f}", f"{d['p50_ms']:.0f}/{d['p99_ms']:.0f}",
                      f"{p['p50_ms']:.0f}/{p['p99_ms']:.0f}", f"{d['gen_tokens_per_s']:.0f}", f"{p['gen_tokens_per_s']:.0f}", f"{ratio:.2f}")
        for side, figures in sides.items():
            flat.update({f"{name}_{side}_{k}": round(v, 2) for k, v in figures.items()})
        flat[f"{name}_ratio_gen_tokens_per_s"] = round(ratio, 3)
        flat[f"{name}_ratio_req_per_s"] = round(p["req_per_s"] / d["req_per_s"], 3)
    Console().print(table)
    ratios = [v for k, v in flat.items() if k.endswith("ratio_gen_tokens_per_s")]
    print(json.dumps({"bench": "proxy", "requests_per_cell": args.requests, "trajectory_lines": trajectory_lines,
                      "min_ratio_gen_tokens_per_s": min(ratios), **flat}))


if __name__ == "__main__":
    main()
