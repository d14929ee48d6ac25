"""What the proxy costs and how it scales, against direct vLLM and LiteLLM's own bare proxy, one run.

One replica (tiny model on CPU) serves every side, with logprobs and token ids asked for
everywhere so each ratio measures the hop, not vLLM's extra work. Cells:

* added latency per call at concurrency 1 (p50, p99): proxy minus direct; and what one read of the
  replica's weight-version label costs (the relay makes two around each one-hop call);
* calls/s of one proxy process against LiteLLM's bare proxy (same LiteLLM, no rlstack layers):
  the cost of our auth, hooks, front layer and trajectory logger;
* calls/s of ``--workers 2`` against one worker (LiteLLM's per-call CPU work is the limit);
* the load matrix (8- and 200-token answers, plain and streamed) against direct vLLM, and our
  streaming shim against LiteLLM's own streaming;
* multi-turn conversations at concurrency 1 (each turn resends the history, as agents do):
  added latency of a continued call with token-in (render, splice, generate, derender on the
  replica), without it (``--no-token-in``: LiteLLM's plain chat call) and through LiteLLM's bare
  proxy, each against the same conversations sent to vLLM directly; and the same conversations
  through the proxy's Responses API (``/v1/responses``, as codex sends them: input items, LiteLLM's
  chat bridge, token-in), with the share of its continued calls that went out spliced.

    python -m bench.proxy [--requests 200] [--model models/tiny]

Last line: one JSON object with every figure.
"""

from __future__ import annotations

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

from bench.common.cli import bench_parser
from bench.common.harness import REPO, free_port, server
from bench.common.http_client import RawHttpClient
from bench.common.result import emit
from rlstack.common.contracts.trajectory import read_trajectory
from rlstack.proxy.__main__ import OFFLINE_ENV

console = Console(stderr=True)
VLLM_PY = REPO / ".venv-vllm" / "bin" / "python"
PROXY_PY = REPO / ".venv-proxy" / "bin" / "python"


def litellm_config(path: Path, vllm_port: int) -> Path:
    """LiteLLM's own proxy, routed to the same replica: the baseline our layers are measured against."""
    path.write_text(
        "model_list:\n"
        "  - model_name: policy\n"
        "    litellm_params:\n"
        "      model: hosted_vllm/policy\n"
        f"      api_base: http://127.0.0.1:{vllm_port}/v1\n"
        "      api_key: none\n"
        "litellm_settings:\n"
        "  drop_params: false\n"
    )
    return path


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
                                                       {"content-type": "application/json", "authorization": "Bearer sk-bench"})
                if status != 200:
                    raise RuntimeError(f"HTTP {status}: {payload[:300]!r}")
                latencies.append(time.perf_counter() - start)
                generated += completion_tokens(payload, stream)
                progress.advance(task)

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    wall = time.perf_counter() - start
    latencies.sort()
    return {"req_per_s": n / wall, "p50_ms": 1000 * statistics.median(latencies), "p99_ms": percentile_ms(latencies, 0.99),
            "gen_tokens_per_s": generated / wall}


async def run_conversations(port: int, prefix: str, conversations: int, turns: int, tokens: int, progress, task,
                            api: str = "chat") -> dict:
    """Conversations one after another, each turn resending the history; latency of the continued calls.
    ``api="responses"``: the same conversations as codex sends them (``/v1/responses``, input items)."""
    continued: list[float] = []
    route = "/v1/responses" if api == "responses" else "/v1/chat/completions"
    async with RawHttpClient("127.0.0.1", port) as client:
        for c in range(conversations):
            path = f"{prefix}-{c}{route}" if prefix else route
            system = "You are an agent. Work in small steps."
            messages = [{"role": "system", "content": system}, {"role": "user", "content": f"Task {c}: list the files and count them."}]
            for turn in range(turns):
                if api == "responses":
                    request = {"model": "policy", "instructions": system, "input": messages[1:], "max_output_tokens": tokens,
                               "temperature": 1.0, "store": False}
                else:
                    request = {"model": "policy", "messages": messages, "max_tokens": tokens, "ignore_eos": True, "temperature": 1.0,
                               "seed": 1000 * c + turn, "logprobs": True, "return_token_ids": True}
                start = time.perf_counter()
                status, payload = await client.request("POST", path, orjson.dumps(request),
                                                       {"content-type": "application/json", "authorization": "Bearer sk-bench"})
                if status != 200:
                    raise RuntimeError(f"HTTP {status}: {payload[:300]!r}")
                if turn:
                    continued.append(time.perf_counter() - start)
                answer = orjson.loads(payload)
                if api == "responses":
                    messages += [*answer["output"], {"role": "user", "content": f"Observation {turn}: a.txt b.txt c.txt"}]
                else:
                    reply = answer["choices"][0]["message"]
                    messages += [{"role": "assistant", "content": reply.get("content") or ""},
                                 {"role": "user", "content": f"Observation {turn}: a.txt b.txt c.txt"}]
                progress.advance(task)
    continued.sort()
    return {"continued_p50_ms": 1000 * statistics.median(continued), "continued_p99_ms": percentile_ms(continued, 0.99)}


async def label_reads(port: int, n: int) -> dict:
    """What a one-hop call pays for its sampling versions: the relay reads the replica's weight-version
    label (``GET /weight_info``) before and after it. Timed here alone, on the same replica."""
    times: list[float] = []
    async with RawHttpClient("127.0.0.1", port) as client:
        for _ in range(n):
            start = time.perf_counter()
            status, payload = await client.request("GET", "/weight_info", b"", {})
            if status != 200:
                raise RuntimeError(f"HTTP {status}: {payload[:300]!r}")
            times.append(time.perf_counter() - start)
    times.sort()
    return {"p50_ms": 1000 * statistics.median(times), "p99_ms": percentile_ms(times, 0.99)}


def percentile_ms(latencies: list[float], q: float) -> float:
    return 1000 * latencies[min(len(latencies) - 1, int(q * len(latencies)))]


def main() -> None:
    parser = bench_parser(__doc__)
    parser.add_argument("--requests", type=int, default=200, help="requests per cell")
    parser.add_argument("--model", default=str(REPO / "models" / "tiny"))
    parser.add_argument("--concurrency", type=int, nargs="+", default=[16], help="concurrency of the load matrix")
    parser.add_argument("--conversations", type=int, default=24, help="multi-turn conversations per side (token-in cell)")
    parser.add_argument("--turns", type=int, default=5, help="turns per conversation")
    args = parser.parse_args()
    for py in (VLLM_PY, PROXY_PY):
        if not py.exists():
            sys.exit(f"missing {py.parent.parent.name}: run `make setup` first")
    if not (Path(args.model) / "config.json").exists():
        sys.exit(f"no model at {args.model}: run `rlstack make-tiny-model` first")

    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        reg_port, side_port, vllm_port, proxy_port, native_port, bare_port, two_port, plain_port = (free_port() for _ in range(8))
        registry_url = f"http://127.0.0.1:{reg_port}"
        registry_cmd = [sys.executable, "-m", "rlstack.registry", "--port", str(reg_port), "--log-level", "warning"]
        replica_cmd = [str(VLLM_PY), "-m", "rlstack.inference", "--port", str(side_port), "--vllm-port", str(vllm_port),
                       "--model", args.model, "--registry-url", registry_url, "--replica-id", "bench-0", "--log-level", "warning"]

        def proxy_cmd(port: int, trials: str, *extra: str) -> list[str]:
            return [str(PROXY_PY), "-m", "rlstack.proxy", "--port", str(port), "--registry-url", registry_url,
                    "--trials-dir", str(tmp_path / trials), "--log-level", "warning", *extra]

        bare_cmd = [str(PROXY_PY.parent / "litellm"), "--config", str(litellm_config(tmp_path / "litellm.yaml", vllm_port)),
                    "--port", str(bare_port), "--num_workers", "1"]
        offline = {**OFFLINE_ENV, "LITELLM_MASTER_KEY": "sk-bench"}
        console.print("starting registry, vLLM replica (~1 min), three rlstack proxies and LiteLLM's bare proxy ...")
        with server(registry_cmd, reg_port, "/readyz", tmp_path / "registry.log"), \
             server(replica_cmd, side_port, "/readyz", tmp_path / "replica.log", timeout=600), \
             server(proxy_cmd(proxy_port, "trials"), proxy_port, "/readyz", tmp_path / "proxy.log", timeout=180), \
             server(proxy_cmd(native_port, "trials-native", "--stream-mode", "litellm"), native_port, "/readyz",
                    tmp_path / "proxy-native.log", timeout=180), \
             server(proxy_cmd(two_port, "trials-two", "--workers", "2"), two_port, "/readyz", tmp_path / "proxy-two.log", timeout=180), \
             server(proxy_cmd(plain_port, "trials-plain", "--no-token-in"), plain_port, "/readyz", tmp_path / "proxy-plain.log",
                    timeout=180), \
             server(bare_cmd, bare_port, "/health/readiness", tmp_path / "litellm-bare.log", env=offline, timeout=180), \
             Progress(console=console, transient=True) as progress:

            def cell(name: str, sides: list[tuple[str, int, str]], concurrency: int, tokens: int, stream: bool, n: int) -> None:
                for side, port, prefix in sides:
                    task = progress.add_task(f"{side} {name}", total=n)
                    results.setdefault(name, {})[side] = asyncio.run(run_cell(port, prefix, n, concurrency, tokens, stream, progress, task))

            direct, ours = ("direct", vllm_port, ""), ("proxy", proxy_port, "/trials/bench/t")
            bare, two = ("litellm_bare", bare_port, ""), ("proxy_2_workers", two_port, "/trials/bench/two")
            # Warm every side (first calls pay lazy imports), then measure.
            cell("warm-up", [direct, ours, bare, two], 4, 8, False, 16)
            results.pop("warm-up")
            results["label_read"] = {"direct": asyncio.run(label_reads(vllm_port, 200))}
            cell("c1_8tok_plain", [direct, ours], 1, 8, False, max(20, args.requests // 2))
            cell("overhead_c16_8tok_plain", [direct, bare, ours, two], 16, 8, False, args.requests)
            for concurrency in args.concurrency:
                for tokens in (8, 200):
                    for stream in (False, True):
                        sides = [direct, ours] + ([("litellm_stream", native_port, "/trials/bench/native")] if stream else [])
                        cell(f"c{concurrency}_{tokens}tok_{'stream' if stream else 'plain'}", sides, concurrency, tokens, stream, args.requests)
            trajectory_lines = len(read_trajectory(tmp_path / "trials" / "bench" / "t"))
            sides = [("direct", vllm_port, ""), ("proxy_token_in", proxy_port, "/trials/bench/mt"),
                     ("proxy_no_token_in", plain_port, "/trials/bench/mt"), ("litellm_bare", bare_port, "")]
            for side, port, prefix in sides:
                task = progress.add_task(f"{side} multi-turn", total=args.conversations * args.turns)
                results.setdefault("multi_turn_c1", {})[side] = asyncio.run(
                    run_conversations(port, prefix, args.conversations, args.turns, 8, progress, task))
            task = progress.add_task("proxy_responses multi-turn", total=args.conversations * args.turns)
            results["multi_turn_c1"]["proxy_responses"] = asyncio.run(run_conversations(
                proxy_port, "/trials/bench/rs", args.conversations, args.turns, 8, progress, task, api="responses"))
            responses = [r for c in range(args.conversations) for r in read_trajectory(tmp_path / "trials" / "bench" / f"rs-{c}")]
            responses_spliced = sum(r.splice is not None for r in responses) / max(1, args.conversations * (args.turns - 1))
            records = [r for c in range(args.conversations) for r in read_trajectory(tmp_path / "trials" / "bench" / f"mt-{c}")]
            spliced_share = sum(r.splice is not None for r in records) / max(1, args.conversations * (args.turns - 1))
            repaired = sum(r.splice is not None and not r.splice.rerendered_exact for r in records)

    flat: dict[str, float] = {}
    for name, sides in results.items():
        for side, figures in sides.items():
            flat.update({f"{name}_{side}_{k}": round(v, 2) for k, v in figures.items()})
    c1, over = results["c1_8tok_plain"], results["overhead_c16_8tok_plain"]
    headline = {
        "added_latency_c1_p50_ms": round(c1["proxy"]["p50_ms"] - c1["direct"]["p50_ms"], 1),
        "added_latency_c1_p99_ms": round(c1["proxy"]["p99_ms"] - c1["direct"]["p99_ms"], 1),
        "proxy_vs_litellm_bare_req_per_s": round(over["proxy"]["req_per_s"] / over["litellm_bare"]["req_per_s"], 3),
        "two_workers_vs_one_req_per_s": round(over["proxy_2_workers"]["req_per_s"] / over["proxy"]["req_per_s"], 3),
        "proxy_vs_direct_req_per_s": round(over["proxy"]["req_per_s"] / over["direct"]["req_per_s"], 3),
    }
    mt = results["multi_turn_c1"]
    for side in ("proxy_token_in", "proxy_no_token_in", "litellm_bare", "proxy_responses"):
        headline[f"continued_call_added_p50_ms_{side}"] = round(mt[side]["continued_p50_ms"] - mt["direct"]["continued_p50_ms"], 1)
    headline["responses_spliced_share"] = round(responses_spliced, 3)
    headline["version_label_read_p50_ms"] = round(results["label_read"]["direct"]["p50_ms"], 2)
    headline["token_in_vs_no_token_in_continued_p50"] = round(mt["proxy_token_in"]["continued_p50_ms"] / mt["proxy_no_token_in"]["continued_p50_ms"], 3)
    headline["token_in_spliced_share"] = round(spliced_share, 3)
    headline["token_in_repaired_calls"] = repaired
    summary = Table(title="proxy cost and scale-out (8-token answers)")
    summary.add_column("figure")
    summary.add_column("value", justify="right")
    summary.add_row("added latency per call, concurrency 1, p50 / p99",
                    f"{headline['added_latency_c1_p50_ms']:.1f} / {headline['added_latency_c1_p99_ms']:.1f} ms")
    for side in ("direct", "litellm_bare", "proxy", "proxy_2_workers"):
        summary.add_row(f"calls/s at concurrency 16: {side}", f"{over[side]['req_per_s']:.1f}")
    summary.add_row("rlstack proxy / LiteLLM bare proxy", f"{headline['proxy_vs_litellm_bare_req_per_s']:.2f}")
    summary.add_row("2 workers / 1 worker", f"{headline['two_workers_vs_one_req_per_s']:.2f}")
    for side in ("proxy_token_in", "proxy_no_token_in", "litellm_bare", "proxy_responses"):
        summary.add_row(f"continued call, added p50 vs direct: {side}", f"{headline[f'continued_call_added_p50_ms_{side}']:.1f} ms")
    summary.add_row("Responses API continued calls spliced", f"{headline['responses_spliced_share']:.2f}")
    summary.add_row("version label read (a one-hop call makes two), p50", f"{headline['version_label_read_p50_ms']:.2f} ms")
    summary.add_row("continued calls spliced / repaired (drift token-in fixed)",
                    f"{headline['token_in_spliced_share']:.2f} / {headline['token_in_repaired_calls']}")
    Console().print(summary)

    table = Table(title=f"proxy vs direct vLLM ({args.requests} requests per cell, tiny model on CPU)")
    for col in ("cell", "direct req/s", "proxy req/s", "direct p50/p99 ms", "proxy p50/p99 ms", "direct tok/s", "proxy tok/s", "tok/s ratio"):
        table.add_column(col, justify="right")
    for name, sides in results.items():
        if name.startswith(("c1_", "overhead_", "multi_turn", "label_read")):
            continue
        d, p = sides["direct"], sides["proxy"]
        ratio = p["gen_tokens_per_s"] / d["gen_tokens_per_s"]
        if "litellm_stream" in sides:
            n = sides["litellm_stream"]
            flat[f"{name}_shim_vs_litellm_stream_req_per_s"] = round(p["req_per_s"] / n["req_per_s"], 3)
            table.add_row(f"{name} (LiteLLM's stream)", "", f"{n['req_per_s']:.1f}", "", f"{n['p50_ms']:.0f}/{n['p99_ms']:.0f}", "",
                          f"{n['gen_tokens_per_s']:.0f}", f"{n['gen_tokens_per_s'] / d['gen_tokens_per_s']:.2f}")
        table.add_row(name, f"{d['req_per_s']:.1f}", f"{p['req_per_s']:.1f}", f"{d['p50_ms']:.0f}/{d['p99_ms']:.0f}",
                      f"{p['p50_ms']:.0f}/{p['p99_ms']:.0f}", f"{d['gen_tokens_per_s']:.0f}", f"{p['gen_tokens_per_s']:.0f}", f"{ratio:.2f}")
        flat[f"{name}_ratio_gen_tokens_per_s"] = round(ratio, 3)
        flat[f"{name}_ratio_req_per_s"] = round(p["req_per_s"] / d["req_per_s"], 3)
    Console().print(table)
    emit("proxy", args, {"requests_per_cell": args.requests, "trajectory_lines": trajectory_lines, **headline, **flat},
         {k: v for k, v in flat.items() if "_ratio_" in k or "_vs_" in k})


if __name__ == "__main__":
    main()
