"""Prefix-cache hit rate of multi-turn trials: trial-sticky routing vs plain least-busy.

Two vLLM replicas behind two proxies (one sticky, one not). Each of N trials runs K turns
of a growing conversation that starts from a long preamble of its own (every turn resends the
whole history plus a new user message, as agents do). The hit rate is read from vLLM's own counters
(``vllm:prefix_cache_hits_total`` / ``vllm:prefix_cache_queries_total``, summed over both
replicas) before and after each pass. Bounded, loopback only.

    python -m bench.prefix_cache [--trials 16] [--turns 6]

Last line: one JSON object with both hit rates and their ratio.
"""

from __future__ import annotations

import asyncio
import random
import re
import sys
import tempfile
from pathlib import Path

import httpx
from rich.console import Console

from bench.common.cli import bench_parser
from bench.common.harness import REPO, free_port, server
from bench.common.result import emit

console = Console(stderr=True)
VLLM_PY = REPO / ".venv-vllm" / "bin" / "python"
PROXY_PY = REPO / ".venv-proxy" / "bin" / "python"
WORDS = "file test build error patch commit branch module function class import return value list index".split()


def task_preamble(trial: int) -> str:
    """A long description unique to the trial (an agent's task and repository context)."""
    rng = random.Random(trial)
    return f"Task {trial}: " + " ".join(rng.choice(WORDS) for _ in range(300))


def counters(vllm_ports: list[int]) -> tuple[float, float]:
    hits = queries = 0.0
    for port in vllm_ports:
        text = httpx.get(f"http://127.0.0.1:{port}/metrics").text
        hits += sum(float(v) for v in re.findall(r"^vllm:prefix_cache_hits_total\{[^}]*\} (\S+)$", text, re.M))
        queries += sum(float(v) for v in re.findall(r"^vllm:prefix_cache_queries_total\{[^}]*\} (\S+)$", text, re.M))
    return hits, queries


async def run_trials(proxy_port: int, tag: str, trials: int, turns: int) -> None:
    async def trial(t: int) -> None:
        history = [{"role": "system", "content": task_preamble(t)}]
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{proxy_port}/trials/{tag}/t{t}", timeout=120) as client:
            for turn in range(turns):
                history.append({"role": "user", "content": f"Trial {t}, step {turn}: run the next command and report."})
                r = await client.post("/v1/chat/completions", json={"model": "policy", "messages": history, "max_tokens": 16,
                                                                     "ignore_eos": True}, headers={"authorization": "Bearer bench"})
                r.raise_for_status()
                history.append({"role": "assistant", "content": r.json()["choices"][0]["message"]["content"]})

    await asyncio.gather(*(trial(t) for t in range(trials)))


def main() -> None:
    parser = bench_parser(__doc__)
    parser.add_argument("--trials", type=int, default=16)
    parser.add_argument("--turns", type=int, default=6)
    parser.add_argument("--model", default=str(REPO / "models" / "tiny"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        reg = free_port()
        registry_url = f"http://127.0.0.1:{reg}"
        replicas = [(free_port(), free_port()) for _ in range(2)]
        proxies = {"sticky": free_port(), "least_busy": free_port()}

        def replica_cmd(i: int) -> list[str]:
            side, vllm = replicas[i]
            return [str(VLLM_PY), "-m", "rlstack.inference", "--port", str(side), "--vllm-port", str(vllm), "--model", args.model,
                    "--registry-url", registry_url, "--replica-id", f"bench-{i}", "--log-level", "warning"]

        def proxy_cmd(name: str) -> list[str]:
            return [str(PROXY_PY), "-m", "rlstack.proxy", "--port", str(proxies[name]), "--registry-url", registry_url,
                    "--trials-dir", str(tmp_path / name), "--log-level", "warning", "--sticky-routing" if name == "sticky" else "--no-sticky-routing"]

        console.print("starting a registry, two vLLM replicas (~1-2 min) and two proxies ...")
        results = {}
        with server([sys.executable, "-m", "rlstack.registry", "--port", str(reg)], reg, "/readyz", tmp_path / "reg.log"), \
             server(replica_cmd(0), replicas[0][0], "/readyz", tmp_path / "r0.log"), \
             server(replica_cmd(1), replicas[1][0], "/readyz", tmp_path / "r1.log"), \
             server(proxy_cmd("sticky"), proxies["sticky"], "/readyz", tmp_path / "p1.log"), \
             server(proxy_cmd("least_busy"), proxies["least_busy"], "/readyz", tmp_path / "p2.log"):
            vllm_ports = [v for _, v in replicas]
            for name in ("least_busy", "sticky"):
                for port in vllm_ports:  # start each pass from cold caches
                    httpx.post(f"http://127.0.0.1:{port}/reset_prefix_cache")
                before = counters(vllm_ports)
                console.print(f"{name}: {args.trials} trials x {args.turns} turns ...")
                asyncio.run(run_trials(proxies[name], name, args.trials, args.turns))
                after = counters(vllm_ports)
                results[name] = (after[0] - before[0]) / max(1.0, after[1] - before[1])
    ratio = results["sticky"] / max(1e-9, results["least_busy"])
    console.print(f"prefix-cache hit rate: sticky {results['sticky']:.1%}, least-busy {results['least_busy']:.1%} ({ratio:.2f}x)")
    emit("prefix_cache", args, {"trials": args.trials, "turns": args.turns, "hit_rate_sticky": round(results["sticky"], 4),
                                "hit_rate_least_busy": round(results["least_busy"], 4)},
         {"sticky_over_least_busy": round(ratio, 3)})


if __name__ == "__main__":
    main()
