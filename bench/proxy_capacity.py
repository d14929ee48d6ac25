"""How many calls a second one proxy process serves on one core, open-loop, against simulated replicas.

The proxy runs pinned to core 0; the simulated replicas (``sim_replica``), the registry and this load
generator share core 1, so the proxy's core does nothing else. Calls arrive at a fixed Poisson rate
whatever the proxy's latency (open loop: a slow proxy meets a queue, as it would in a cluster), and
each cell's rate is raised by ``--growth`` until two rates in a row miss: added p99 over
``--budget-ms``, a failed call, or no idle trial left to continue. One point between the highest
pass and the first miss above it refines it. The capacity is the highest passing rate; the cell is
measured once more at 80% of it. The proxy's CPU time per call (all its processes) comes with each
point: ``1000 / ms per call`` is what one core serves flat out, whatever the latency.

Added latency is the proxy's latency minus the same-sized call sent straight to a simulated replica
in the same run (p50 minus p50, p99 minus p99). Every call carries token-in and trajectory records as
in production: continued calls go render, generate, derender on the replica; every call's record is
written. Cells: each dialect (chat, Anthropic messages, Responses), plain and streamed, a trial's
first call and continued calls, histories of 1k to 128k ids.

    python -m bench.proxy_capacity [--cells quick|all|NAME,...] [--seconds 6] [--out FILE.jsonl] [--plot FILE.png]

Needs two cores or more. Last line: one JSON object with every cell's capacity and figures.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

import httpx
from rich.console import Console
from rich.table import Table

from bench.common.cli import bench_parser
from bench.common.dialects import PATHS, Conversation, Dialect
from bench.common.harness import PROXY_PY, REPO, free_port, server
from bench.common.http_client import RawHttpClient
from bench.common.prom import cpu_seconds, listener_pid, scrape, value
from bench.common.result import emit
from rlstack.proxy.__main__ import OFFLINE_ENV

console = Console(stderr=True)
PROXY_CORE, LOAD_CORE = 0, 1
HEADERS = {"content-type": "application/json", "authorization": "Bearer sk-bench"}


@dataclass(frozen=True)
class Cell:
    dialect: Dialect
    stream: bool
    continued: bool
    history: int

    @property
    def name(self) -> str:
        return f"{self.dialect}-{'stream' if self.stream else 'plain'}-{'continued' if self.continued else 'first'}-{self.history // 1024}k"


QUICK = [Cell("chat", False, False, 1024), Cell("chat", False, True, 1024)]
ALL = [
    Cell("chat", False, False, 1024), Cell("chat", False, True, 1024), Cell("chat", True, True, 1024),
    Cell("anthropic", False, False, 1024), Cell("anthropic", False, True, 1024), Cell("anthropic", True, True, 1024),
    Cell("responses", False, False, 1024), Cell("responses", False, True, 1024), Cell("responses", True, True, 1024),
    Cell("chat", False, True, 8192), Cell("chat", False, True, 32768), Cell("chat", False, True, 131072),
]


@dataclass
class Point:
    cell: str
    rate: float
    calls: int
    ok: int
    errors: int
    saturated: int
    """Arrivals that found every trial of the pool still waiting on its previous call."""
    p50_ms: float
    p99_ms: float
    added_p50_ms: float
    added_p99_ms: float
    achieved_per_s: float
    proxy_cpu_share: float
    """The proxy's CPU time over the point's wall time: 1.0 is its core full."""
    proxy_cpu_ms_per_call: float
    load_core_busy: float
    gc_ms_per_call: float | None
    """Garbage-collector pauses over the point, per call (rlstack's proxy reports them; LiteLLM's does not)."""
    passed: bool


# -- CPU accounting -------------------------------------------------------------------------------
def core_busy_ticks(core: int) -> tuple[int, int]:
    for line in Path("/proc/stat").read_text().splitlines():
        if line.startswith(f"cpu{core} "):
            values = [int(v) for v in line.split()[1:]]
            idle = values[3] + values[4]
            return sum(values) - idle, sum(values)
    raise RuntimeError(f"no cpu{core} in /proc/stat")


# -- the load -------------------------------------------------------------------------------------
class Connections:
    """Idle keep-alive connections to one server; a call takes one or opens one."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.idle: list[RawHttpClient] = []

    async def call(self, path: str, body: bytes) -> tuple[int, bytes]:
        reused = bool(self.idle)
        client = self.idle.pop() if reused else await RawHttpClient("127.0.0.1", self.port).__aenter__()
        try:
            status, payload = await client.request("POST", path, body, HEADERS)
        except (asyncio.IncompleteReadError, ConnectionError):
            await client.__aexit__(None, None, None)
            if not reused:
                raise
            # the server closed an idle keep-alive connection (uvicorn's timeout): a new one, once
            client = await RawHttpClient("127.0.0.1", self.port).__aenter__()
            status, payload = await client.request("POST", path, body, HEADERS)
        except BaseException:
            await client.__aexit__(None, None, None)
            raise
        self.idle.append(client)
        return status, payload

    async def close(self) -> None:
        for client in self.idle:
            await client.__aexit__(None, None, None)
        self.idle.clear()


class Trials:
    """The conversations a cell's calls continue (or, for first calls, the bodies they send)."""

    def __init__(self, cell: Cell, size: int, seed: int, trial_paths: bool = True) -> None:
        self.cell = cell
        self.trial_paths = trial_paths
        """``/trials/<run>/<trial>/...`` (rlstack's proxy), or the bare route (LiteLLM's own proxy)."""
        self.conversations = [Conversation.with_history(cell.dialect, cell.stream, cell.history, seed * 10_000 + i) for i in range(size)]
        self.idle = list(range(size))
        self.first_bodies = [c.request() for c in self.conversations[:8]]
        self.first_calls = itertools.count()

    async def warm(self, conns: Connections) -> None:
        """Each trial's first call, so every measured call of a continued cell continues a thread."""
        async def one(i: int) -> None:
            conversation = self.conversations[i]
            status, payload = await conns.call(self.path(i), conversation.request())
            if status != 200:
                raise RuntimeError(f"warm-up call: HTTP {status}: {payload[:300]!r}")
            conversation.take(payload, f"observation {conversation.turns}: exit 0")

        for start in range(0, len(self.conversations), 8):
            await asyncio.gather(*(one(i) for i in range(start, min(start + 8, len(self.conversations)))))

    def path(self, trial: int | str) -> str:
        prefix = f"/trials/cap/{self.cell.name}-{trial}" if self.trial_paths else ""
        return prefix + PATHS[self.cell.dialect]

    async def call(self, conns: Connections) -> tuple[int, bytes] | None:
        if not self.cell.continued:
            n = next(self.first_calls)
            return await conns.call(self.path(f"first-{n}"), self.first_bodies[n % len(self.first_bodies)])
        if not self.idle:
            return None
        i = self.idle.pop()
        conversation = self.conversations[i]
        try:
            status, payload = await conns.call(self.path(i), conversation.request())
            if status == 200:
                conversation.take(payload, f"observation {conversation.turns}: exit 0")
            return status, payload
        finally:
            self.idle.append(i)


async def open_loop(rate: float, calls: int, seed: int, one) -> tuple[list[float | None], float]:  # noqa: ANN001
    """``calls`` arrivals at Poisson ``rate``; each latency runs from its scheduled arrival (no coordinated
    omission), ``None`` for a failed call. Returns the latencies and the wall time."""
    rng = random.Random(seed)
    loop = asyncio.get_running_loop()
    start = loop.time()
    at = start
    tasks = []

    async def timed(scheduled: float) -> float | None:
        ok = await one()
        return loop.time() - scheduled if ok else None

    for _ in range(calls):
        at += rng.expovariate(rate)
        delay = at - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(timed(at)))
    latencies = await asyncio.gather(*tasks)
    return list(latencies), loop.time() - start


def gc_seconds(port: int) -> float | None:
    """The proxy's total garbage-collector pause time so far, from its /metrics (None: not reported)."""
    try:
        samples = scrape(f"http://127.0.0.1:{port}")
    except (httpx.HTTPError, ValueError):  # LiteLLM's bare proxy serves no Prometheus page
        return None
    name = "rlstack_proxy_gc_pause_seconds_sum"
    return value(samples, name) if name in samples else None


def pct(sorted_values: list[float], q: float) -> float:
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


async def direct_floor(sim_port: int, cell: Cell, seed: int, calls: int = 120) -> tuple[float, float]:
    """The same-sized call straight to a simulated replica (chat, plain), at 10 calls/s: p50, p99 in ms."""
    conns = Connections(sim_port)
    body = Conversation.with_history("chat", False, cell.history, seed).request()

    async def one() -> bool:
        status, _ = await conns.call("/v1/chat/completions", body)
        return status == 200

    latencies, _ = await open_loop(10.0, calls, seed, one)
    await conns.close()
    values = sorted(1000 * v for v in latencies if v is not None)
    return statistics.median(values), pct(values, 0.99)


async def measure(port: int, proxy_pid: int, trials: Trials, rate: float, args: argparse.Namespace, floor: tuple[float, float],
                  seed: int) -> Point:
    conns = Connections(port)
    outcome = {"errors": 0, "saturated": 0, "error": ""}

    async def one() -> bool:
        try:
            result = await asyncio.wait_for(trials.call(conns), args.call_timeout)
        except (TimeoutError, OSError, asyncio.IncompleteReadError) as exc:
            outcome["errors"] += 1
            outcome["error"] = repr(exc)
            return False
        if result is None:
            outcome["saturated"] += 1
            return False
        if result[0] != 200:
            outcome["errors"] += 1
            outcome["error"] = f"HTTP {result[0]}: {result[1][:200]!r}"
            return False
        return True

    calls = max(args.min_calls, int(rate * args.seconds))
    gc0 = gc_seconds(port)
    cpu0, (busy0, total0) = cpu_seconds(proxy_pid, children=True), core_busy_ticks(LOAD_CORE)
    latencies, wall = await open_loop(rate, calls, seed, one)
    cpu = cpu_seconds(proxy_pid, children=True) - cpu0
    gc1 = gc_seconds(port)
    busy1, total1 = core_busy_ticks(LOAD_CORE)
    await conns.close()
    done = sorted(1000 * v for v in latencies if v is not None)
    p50, p99 = (statistics.median(done), pct(done, 0.99)) if done else (float("inf"), float("inf"))
    added_p50, added_p99 = p50 - floor[0], p99 - floor[1]
    if outcome["error"]:
        console.print(f"  [red]{trials.cell.name} at {rate:.1f}/s: {outcome['errors']} failed, last {outcome['error']}[/red]")
    return Point(trials.cell.name, round(rate, 2), len(latencies), len(done), outcome["errors"], outcome["saturated"],
                 round(p50, 2), round(p99, 2), round(added_p50, 2), round(added_p99, 2), round(len(done) / wall, 2),
                 round(cpu / wall, 3), round(1000 * cpu / max(1, len(latencies)), 2),
                 round((busy1 - busy0) / max(1, total1 - total0), 3),
                 round(1000 * (gc1 - gc0) / max(1, len(latencies)), 3) if gc0 is not None and gc1 is not None else None,
                 outcome["errors"] == 0 and outcome["saturated"] == 0 and added_p99 <= args.budget_ms)


async def sweep(side: str, port: int, proxy_pid: int, sim_port: int, cell: Cell, args: argparse.Namespace, out) -> dict:  # noqa: ANN001
    seed = args.seed
    floor = await direct_floor(sim_port, cell, seed)
    pool = args.pool if cell.history <= 8192 else max(8, args.pool // 4)
    trials = Trials(cell, pool, seed, trial_paths=side != "litellm")
    conns = Connections(port)
    if cell.continued:
        await trials.warm(conns)
    await conns.close()
    points: list[Point] = []

    async def at(rate: float) -> Point:
        nonlocal seed
        seed += 1
        point = await measure(port, proxy_pid, trials, rate, args, floor, seed)
        points.append(point)
        out.write(json.dumps({"bench": "proxy_capacity", "side": side, **asdict(point)}) + "\n")
        out.flush()
        mark = "[green]pass[/green]" if point.passed else "[red]over[/red]"
        console.print(f"  {side}: {cell.name:30s} {rate:7.1f}/s  added p50 {point.added_p50_ms:7.1f}  p99 {point.added_p99_ms:8.1f} ms  "
                      f"proxy core {100 * point.proxy_cpu_share:3.0f}%  {point.proxy_cpu_ms_per_call:5.1f} ms CPU/call  "
                      f"load core {100 * point.load_core_busy:3.0f}%  "
                      f"GC {point.gc_ms_per_call if point.gc_ms_per_call is not None else '-'} ms/call  {mark}")
        await asyncio.sleep(0.5)
        return point

    if args.fixed_rate:  # one point, no sweep (profiling)
        profiler = start_profile(proxy_pid, args.profile / f"{cell.name}.txt", args.seconds) if args.profile else None
        point = await at(args.fixed_rate)
        if profiler is not None:
            profiler.wait()
        return {"side": side, "cell": cell.name, "fixed_rate": args.fixed_rate, "capacity_per_s": None, "direct_p50_ms": round(floor[0], 2),
                "direct_p99_ms": round(floor[1], 2), "at80_added_p50_ms": point.added_p50_ms, "at80_added_p99_ms": point.added_p99_ms,
                "at80_cpu_ms_per_call": point.proxy_cpu_ms_per_call, "points": [asdict(point)]}
    # Up the rates until two in a row miss (one miss can be a stray spike), then once between the
    # highest pass and the first miss above it; a start that misses tries lower rates instead.
    rate = args.start_rate * (1024 / cell.history) ** 0.5
    best, misses, first_miss = 0.0, 0, None
    while rate <= args.max_rate and misses < 2:
        if (await at(rate)).passed:
            best, misses, first_miss = rate, 0, None
        else:
            misses += 1
            first_miss = first_miss or rate
        rate *= args.growth
    while not best and rate > 0.2:  # even the start missed: go down until a rate passes
        rate = (first_miss or rate) / args.growth ** 2
        first_miss = rate
        if (await at(rate)).passed:
            best = rate
    if best and first_miss and first_miss > best:
        middle = (best * first_miss) ** 0.5
        if (await at(middle)).passed:
            best = middle
    profiler = start_profile(proxy_pid, args.profile / f"{cell.name}.txt", args.seconds) if args.profile and best else None
    at80 = await at(0.8 * best) if best else None
    if profiler is not None:
        profiler.wait()
        console.print(f"  profile: {args.profile / f'{cell.name}.txt'}")
    return {"side": side, "cell": cell.name, "dialect": cell.dialect, "stream": cell.stream, "continued": cell.continued, "history_ids": cell.history,
            "capacity_per_s": round(best, 1), "direct_p50_ms": round(floor[0], 2), "direct_p99_ms": round(floor[1], 2),
            "at80_added_p50_ms": at80.added_p50_ms if at80 else None, "at80_added_p99_ms": at80.added_p99_ms if at80 else None,
            "at80_cpu_ms_per_call": at80.proxy_cpu_ms_per_call if at80 else None,
            "points": [asdict(p) for p in points]}


def start_profile(pid: int, path: Path, seconds: float) -> subprocess.Popen:
    """py-spy's sampled stacks of the proxy (collapsed, one line a stack) over the next point."""
    path.parent.mkdir(parents=True, exist_ok=True)
    py_spy = Path(sys.executable).parent / "py-spy"
    return subprocess.Popen([str(py_spy), "record", "--pid", str(pid), "--duration", str(int(seconds)), "--rate", "250",
                             "--format", "raw", "--gil", "--subprocesses", "--output", str(path)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)


def points_to_results(paths: list[Path]) -> list[dict]:
    """The per-cell results ``plot`` draws, from the JSON lines of earlier runs (``--out``)."""
    results: dict[tuple[str, str], dict] = {}
    for path in paths:
        for line in path.read_text().splitlines():
            point = json.loads(line)
            results.setdefault((point["side"], point["cell"]), {"side": point["side"], "cell": point["cell"], "points": []})["points"].append(point)
    return list(results.values())


def plot(results: list[dict], path: Path, budget: float) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullFormatter, ScalarFormatter

    fig, axes = plt.subplots(1, 2, figsize=(13, 6.5), sharey=True)
    cells = sorted({r["cell"] for r in results})
    colours = plt.get_cmap("tab20" if len(cells) > 10 else "tab10")
    for result in results:  # a cell's colour on both sides; rlstack solid, LiteLLM dashed with squares
        points = sorted(result["points"], key=lambda p: p["rate"])
        rates = [p["rate"] for p in points]
        rlstack = result["side"] == "rlstack"
        for ax, key in zip(axes, ("added_p50_ms", "added_p99_ms"), strict=True):
            ax.plot(rates, [min(p[key], 10 * budget) for p in points], color=colours(cells.index(result["cell"])),
                    linestyle="-" if rlstack else "--", marker="o" if rlstack else "s", label=f"{result['side']}: {result['cell']}")
    for ax, title in zip(axes, ("added p50", "added p99"), strict=True):
        ax.axhline(budget, color="grey", linestyle="--", linewidth=1)
        ax.set_xscale("log")
        ax.xaxis.set_major_formatter(ScalarFormatter())
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_yscale("symlog", linthresh=10)
        ax.set_xlabel("arrival rate (calls/s, open loop)")
        ax.set_title(f"{title} latency the proxy adds (one core)")
    axes[0].set_ylabel("ms (clipped at 10x the budget)")
    fig.legend(*axes[0].get_legend_handles_labels(), fontsize=7, loc="lower center", ncol=4)
    fig.tight_layout(rect=(0, 0.12, 1, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def pick_cells(spec: str) -> list[Cell]:
    if spec == "quick":
        return QUICK
    if spec == "all":
        return ALL
    by_name = {c.name: c for c in ALL}
    unknown = [n for n in spec.split(",") if n not in by_name]
    if unknown:
        sys.exit(f"--cells: unknown {unknown}; known: quick, all, {', '.join(by_name)}")
    return [by_name[n] for n in spec.split(",")]


def litellm_config(path: Path, sim_ports: list[int]) -> Path:
    """LiteLLM's own proxy straight to the simulated replicas, with its fastest supported settings:
    zero prices in ``model_info`` (no per-call cost-map search), simple-shuffle routing, no spend or
    error logs. No rlstack layer: no trial paths, token-in, records or edge."""
    lines = ["model_list:"]
    for name in ("policy", "claude-sonnet-4-5"):
        for port in sim_ports:
            lines += [f"  - model_name: {name}", "    litellm_params:", "      model: hosted_vllm/policy",
                      f"      api_base: http://127.0.0.1:{port}/v1", "      api_key: none",
                      "    model_info:", "      input_cost_per_token: 0.0", "      output_cost_per_token: 0.0"]
    lines += ["router_settings:", "  routing_strategy: simple-shuffle", "litellm_settings:", "  drop_params: false",
              "general_settings:", "  disable_spend_logs: true", "  disable_error_logs: true"]
    path.write_text("\n".join(lines) + "\n")
    return path


def side_command(side: str, port: int, registry_url: str, sim_ports: list[int], tmp: Path,
                 args: argparse.Namespace) -> tuple[list[str], str, dict[str, str]]:
    """The proxy of one side, pinned to the proxy core: command, readiness path, extra environment."""
    pin = ["taskset", "-c", str(PROXY_CORE)]
    if side == "litellm":
        config = litellm_config(tmp / "litellm.yaml", sim_ports)
        return ([*pin, str(PROXY_PY.parent / "litellm"), "--config", str(config), "--port", str(port), "--num_workers", "1"],
                "/health/readiness", {**OFFLINE_ENV, "LITELLM_MASTER_KEY": "sk-bench"})
    env: dict[str, str] = {}
    if side.startswith("rlstack@"):  # another checkout's proxy code, same venv: a before/after in one run
        shim = tmp / f"src-{side.split('@', 1)[1].strip('/').replace('/', '_')}"
        shim.mkdir(exist_ok=True)
        (shim / "rlstack").unlink(missing_ok=True)
        (shim / "rlstack").symlink_to(Path(side.split("@", 1)[1]).resolve() / "services")
        env["PYTHONPATH"] = str(shim)
    return ([*pin, str(PROXY_PY), "-m", "rlstack.proxy", "--port", str(port), "--registry-url", registry_url,
             "--trials-dir", str(tmp / "trials" / side.replace("/", "_")), "--log-level", "warning", "--workers", str(args.workers),
             *args.proxy_arg], "/readyz", env)


def main() -> None:
    parser = bench_parser(__doc__)
    parser.add_argument("--cells", default="quick", help="quick, all, or cell names separated by commas")
    parser.add_argument("--sides", default="rlstack,litellm",
                        help="rlstack (this tree), litellm (LiteLLM's bare proxy, the baseline), rlstack@DIR (another checkout)")
    parser.add_argument("--seconds", type=float, default=6.0, help="length of each rate's point")
    parser.add_argument("--min-calls", type=int, default=120, help="calls at least in a point (a p99 of fewer is its maximum)")
    parser.add_argument("--budget-ms", type=float, default=50.0, help="added p99 a passing rate keeps under")
    parser.add_argument("--start-rate", type=float, default=10.0, help="first rate for 1k histories (longer ones start lower)")
    parser.add_argument("--fixed-rate", type=float, default=None, help="measure this one rate per cell, no sweep")
    parser.add_argument("--growth", type=float, default=1.5)
    parser.add_argument("--max-rate", type=float, default=800.0)
    parser.add_argument("--pool", type=int, default=64, help="trials a continued cell's calls rotate over")
    parser.add_argument("--call-timeout", type=float, default=30.0)
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--ttft-ms", type=float, default=10.0)
    parser.add_argument("--tpot-ms", type=float, default=1.0)
    parser.add_argument("--completion-tokens", type=int, default=16)
    parser.add_argument("--workers", type=int, default=1, help="rlstack proxy processes, all on the proxy's one core")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--proxy-arg", action="append", default=[], help="extra flag for the rlstack proxy (repeatable)")
    parser.add_argument("--profile", type=Path, default=None,
                        help="folder for py-spy's stacks of the proxy at each cell's 80%% point (pip install py-spy)")
    parser.add_argument("--out", type=Path, default=None, help="every point as a JSON line")
    parser.add_argument("--plot", type=Path, default=None, help="PNG of added latency against arrival rate")
    parser.add_argument("--replot", type=Path, nargs="+", default=None,
                        help="draw --plot from these --out files (JSON lines) and stop; nothing is run")
    args = parser.parse_args()
    if args.replot:
        plot(points_to_results(args.replot), args.plot or Path("proxy-capacity.png"), args.budget_ms)
        return
    cells = pick_cells(args.cells)
    sides = args.sides.split(",")
    if len(os.sched_getaffinity(0)) < 2:
        sys.exit("needs two cores: the proxy on one, the load and the replicas on the other")
    if not PROXY_PY.exists():
        sys.exit("missing .venv-proxy: run `make setup` first")
    os.sched_setaffinity(0, {LOAD_CORE})  # this process and every child but the proxy
    with contextlib.suppress(ImportError):
        import uvloop
        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())

    results: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        reg_port = free_port()
        sim_ports = [free_port() for _ in range(args.replicas)]
        registry_url = f"http://127.0.0.1:{reg_port}"
        registry_cmd = [sys.executable, "-m", "rlstack.registry", "--port", str(reg_port), "--log-level", "warning"]
        sim_cmd = [sys.executable, str(REPO / "bench" / "sim_replica.py"), "--ports", ",".join(map(str, sim_ports)),
                   "--registry-url", registry_url, "--heartbeat-seconds", "2", "--ttft-ms", str(args.ttft_ms),
                   "--tpot-ms", str(args.tpot_ms), "--completion-tokens", str(args.completion_tokens), "--max-model-len", "262144"]
        console.print(f"proxy on core {PROXY_CORE}; registry, {args.replicas} simulated replicas and the load on core {LOAD_CORE}")
        with server(registry_cmd, reg_port, "/readyz", tmp_path / "registry.log"), \
             server(sim_cmd, sim_ports[0], "/health", tmp_path / "sim.log"), \
             (args.out.open("a") if args.out else open(os.devnull, "w")) as out:
            for side in sides:
                port = free_port()
                cmd, ready, env = side_command(side, port, registry_url, sim_ports, tmp_path, args)
                console.print(f"[bold]{side}[/bold]: {' '.join(cmd[3:6])} ...")
                with server(cmd, port, ready, tmp_path / f"proxy-{len(results)}.log", env=env, timeout=180):
                    pid = listener_pid(port)
                    for cell in cells:
                        if side == "litellm" and cell.dialect == "responses":
                            continue  # LiteLLM would send it to vLLM's /v1/responses, which the simulation does not serve
                        results.append(asyncio.run(sweep(side, port, pid, sim_ports[0], cell, args, out)))
    if args.plot:
        plot(results, args.plot, args.budget_ms)
    report(results, sides, args)


def report(results: list[dict], sides: list[str], args: argparse.Namespace) -> None:
    table = Table(title=f"proxy capacity on one core (added p99 <= {args.budget_ms:.0f} ms, open loop, simulated replicas)")
    for col in ("side", "cell", "calls/s", "added p50 / p99 at 80%", "proxy CPU per call", "direct p50"):
        table.add_column(col, justify="right")
    for r in results:
        at80 = f"{r['at80_added_p50_ms']:.1f} / {r['at80_added_p99_ms']:.1f} ms" if r["at80_added_p50_ms"] is not None else "-"
        cpu = f"{r['at80_cpu_ms_per_call']:.1f} ms" if r["at80_cpu_ms_per_call"] is not None else "-"
        table.add_row(r["side"], r["cell"], f"{r['capacity_per_s'] or 0:.1f}", at80, cpu, f"{r['direct_p50_ms']:.1f} ms")
    Console().print(table)
    summary: dict[str, dict] = {}
    for r in results:
        summary.setdefault(r["side"], {})[r["cell"]] = {k: v for k, v in r.items() if k not in ("points", "side", "cell")}
    ratios: dict[str, dict[str, float]] = {}
    if "litellm" in summary:
        for side, cells in summary.items():
            for cell, ours in cells.items():
                base = summary["litellm"].get(cell)
                if side == "litellm" or not base or not base["at80_cpu_ms_per_call"] or not ours["at80_cpu_ms_per_call"]:
                    continue
                ratios.setdefault(side, {})[cell] = {
                    "capacity_vs_litellm": round((ours["capacity_per_s"] or 0) / max(1e-9, base["capacity_per_s"] or 0), 3),
                    "cpu_per_call_vs_litellm": round(ours["at80_cpu_ms_per_call"] / base["at80_cpu_ms_per_call"], 3),
                    "litellm_share_of_cpu": round(base["at80_cpu_ms_per_call"] / ours["at80_cpu_ms_per_call"], 3)}
    emit("proxy_capacity", args, {"budget_ms": args.budget_ms, "workers": args.workers, "proxy_args": args.proxy_arg, "sides": summary,
                                  "cells_vs_litellm": ratios},
         {f"{side}_{cell}_{k}": v for side, cells in ratios.items() for cell, r in cells.items() for k, v in r.items()})


if __name__ == "__main__":
    main()
