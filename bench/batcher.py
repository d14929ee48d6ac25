"""Our batcher (write-ahead log, fsync on) vs atroposlib 0.4.0's run-api under the same load.

1,000 groups of 8 sequences x 256 tokens with inference logprobs, batch size 64, posted
(a) one group per request sequentially, (b) 8 requests at a time as BaseEnv's workers do,
(c) as lists of 50 groups; after each, every batch is pulled. Both servers get identical
pre-serialised bodies from the same lean keep-alive client (bench/common/http_client.py), which sends gzip
for bodies over 1 KB and accepts gzip responses, as atroposlib's clients (aiohttp, requests)
do; every pulled batch is parsed, as a trainer must. Bounded, loopback only.

    python -m bench.batcher [--groups 1000] [--list-size 50]

Last line: the result (bench.common.result), every figure and the ratios (ours / atropos).
"""

from __future__ import annotations

import asyncio
import gzip
import random
import sys
import tempfile
import time
from pathlib import Path

import httpx
import orjson
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from bench.common.cli import bench_parser
from bench.common.harness import REPO, free_port, server
from bench.common.http_client import RawHttpClient
from bench.common.result import emit

GROUP_SIZE, SEQ_LEN, BATCH_SIZE, CONCURRENCY = 8, 256, 64, 8
console = Console(stderr=True)


def make_bodies(n: int, list_size: int) -> tuple[list[bytes], list[bytes]]:
    rng = random.Random(0)
    groups = []
    for _ in range(n):
        tokens = [[rng.randrange(150_000) for _ in range(SEQ_LEN)] for _ in range(GROUP_SIZE)]
        groups.append({
            "tokens": tokens,
            "masks": [[-100] * 64 + row[64:] for row in tokens],
            "scores": [rng.choice((0.0, 1.0)) for _ in range(GROUP_SIZE)],
            "inference_logprobs": [[0.0] * 64 + [round(-rng.random() * 4, 6) for _ in range(SEQ_LEN - 64)] for _ in range(GROUP_SIZE)],
            "env_id": 0,
        })
    singles = [orjson.dumps(g) for g in groups]
    lists = [orjson.dumps(groups[i : i + list_size]) for i in range(0, n, list_size)]
    return singles, lists


def encode(body: bytes) -> tuple[bytes, dict[str, str]]:
    """What BaseEnv does: gzip bodies of 1 KB or more."""
    headers = {"content-type": "application/json"}
    if len(body) >= 1024:
        return gzip.compress(body), {**headers, "content-encoding": "gzip"}
    return body, headers


def setup(client: httpx.Client) -> None:
    client.get("/reset_data")
    client.post("/register", json={
        "wandb_group": "", "wandb_project": "", "batch_size": BATCH_SIZE, "max_token_len": 4096,
        "checkpoint_dir": "", "save_checkpoint_interval": -1, "starting_step": 0, "num_steps": 1000,
    }).raise_for_status()
    client.get("/batch")  # Atropos accepts envs only after the trainer's first /batch
    env = client.post("/register-env", json={"max_token_length": 4096, "desired_name": "bench", "weight": 1.0, "group_size": GROUP_SIZE}).json()
    assert env["status"] == "success" and env["env_id"] == 0, env


async def post_all(port: int, payloads: list[tuple[bytes, dict[str, str]]], path: str, concurrency: int, progress, task) -> float:
    queue = list(reversed(payloads))

    async def worker() -> None:
        async with RawHttpClient("127.0.0.1", port) as client:
            while queue:
                body, headers = queue.pop()
                status, reply = await client.request("POST", path, body, headers)
                if status != 200:
                    raise RuntimeError(f"{path}: {status} {reply[:300]!r}")
                progress.advance(task)

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return time.perf_counter() - start


async def pull_all(port: int, expected: int, progress, task) -> float:
    """Pull every batch and parse it, as a trainer must, checking each is whole."""
    async with RawHttpClient("127.0.0.1", port) as client:
        start = time.perf_counter()
        for got in range(expected):
            status, reply = await client.request("GET", "/batch")
            batch = orjson.loads(reply)["batch"]
            if status != 200 or batch is None:
                raise RuntimeError(f"only {got} of {expected} batches came out")
            assert sum(len(g["tokens"]) for g in batch) == BATCH_SIZE
            progress.advance(task)
        return time.perf_counter() - start


def run_system(name: str, url: str, port: int, singles: list[bytes], lists: list[bytes]) -> dict[str, float]:
    n = len(singles)
    batches = n * GROUP_SIZE // BATCH_SIZE
    single_payloads = [encode(b) for b in singles]
    list_payloads = [encode(b) for b in lists]
    figures: dict[str, float] = {}
    with httpx.Client(base_url=url, timeout=120) as client, Progress(console=console, transient=True) as progress:
        for mode, payloads, path, conc in (
            ("sequential", single_payloads, "/scored_data", 1),
            ("concurrent8", single_payloads, "/scored_data", CONCURRENCY),
            ("lists", list_payloads, "/scored_data_list", 1),
        ):
            setup(client)
            post_task = progress.add_task(f"{name} {mode}: post", total=len(payloads))
            seconds = asyncio.run(post_all(port, payloads, path, conc, progress, post_task))
            figures[f"{mode}_post_groups_per_s"] = n / seconds
            pull_task = progress.add_task(f"{name} {mode}: pull", total=batches)
            figures[f"{mode}_pull_batches_per_s"] = batches / asyncio.run(pull_all(port, batches, progress, pull_task))
    return figures


def main() -> None:
    parser = bench_parser(__doc__)
    parser.add_argument("--groups", type=int, default=1000)
    parser.add_argument("--list-size", type=int, default=50)
    args = parser.parse_args()
    atropos_bin = REPO / ".venv-atropos" / "bin" / "run-api"
    if not atropos_bin.exists():
        sys.exit("missing .venv-atropos: run `make setup-atropos` first")

    console.print(f"building {args.groups} groups of {GROUP_SIZE}x{SEQ_LEN} tokens ...")
    singles, lists = make_bodies(args.groups, args.list_size)
    results: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        port = free_port()
        for durability in ("fsync", "flush"):
            port = free_port()
            ours_cmd = [sys.executable, "-m", "rlstack.batcher", "--port", str(port), "--data-dir", str(tmp_path / durability),
                        "--durability", durability, "--log-level", "warning"]
            with server(ours_cmd, port, "/readyz", tmp_path / f"ours-{durability}.log") as url:
                results[f"rlstack_{durability}"] = run_system(f"rlstack ({durability})", url, port, singles, lists)
        port = free_port()
        atropos_cmd = [str(atropos_bin), "--host", "127.0.0.1", "--port", str(port)]
        with server(atropos_cmd, port, "/status", tmp_path / "atropos.log") as url:
            results["atropos"] = run_system("atropos", url, port, singles, lists)

    base = results["atropos"]
    ratios = {f"{mode}_{k}": results[f"rlstack_{mode}"][k] / base[k] for mode in ("fsync", "flush") for k in base}
    table = Table(title=f"batcher: {args.groups} groups of {GROUP_SIZE}x{SEQ_LEN}, batch {BATCH_SIZE}")
    for col in ("figure", "rlstack fsync", "rlstack flush", "atroposlib 0.4.0", "ratio fsync", "ratio flush"):
        table.add_column(col, justify="right")
    for key in base:
        table.add_row(key, f"{results['rlstack_fsync'][key]:.1f}", f"{results['rlstack_flush'][key]:.1f}", f"{base[key]:.1f}",
                      f"{ratios['fsync_' + key]:.2f}x", f"{ratios['flush_' + key]:.2f}x")
    Console().print(table)
    emit("batcher", args, {"groups": args.groups, "group_size": GROUP_SIZE, "seq_len": SEQ_LEN, "batch_size": BATCH_SIZE,
                           **{f"{s}_{k}": round(v, 2) for s, r in results.items() for k, v in r.items()}},
         {f"{k}_over_atropos": round(v, 2) for k, v in ratios.items()})


if __name__ == "__main__":
    main()
