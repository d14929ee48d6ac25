"""Agent trials: what the local sandbox costs per trial, and the proxy's hop under agent-shaped load.

Part 0 (``--build-dataset DIR``, default examples/image-tasks): the dataset's task images built
cold (every step after ``FROM`` made new by a nonce build argument, so no cached layer serves it)
and again unchanged (0 rebuilds: images are named by their environment's digest).

Part 1, no model: ``--sandbox-trials`` trials of the nop agent (``true``) on
``examples/tasks/write-greeting-1`` through ``run_trial``, ``--concurrency`` at once, on four sides:
``host`` (bubblewrap on the host's tools, ``environment: host``), ``image`` (the default: bubblewrap
rooted at an overlay of the task's image layers, a cgroup per phase; the nop agent names no proxy, so
no door is opened), ``podman``
(the alternative: a container per phase, ``podman run --rm`` of the task's image with ``true`` then
its check) and ``plain`` (the same two commands as plain subprocesses: no isolation at all, the
baseline). Reports trials per minute, per-trial seconds, the start latency (the agent phase:
setting up a sandbox around ``true``) p50/p95/p99 and the CPU seconds per trial (this process and
its children); the ratios are each side / plain and image / host.

Part 2: a registry, one vLLM replica (``--model``: models/agent-demo, the tool-call warm-started
demo model from ``rlstack make-agent-demo``, when it exists, else models/tiny) and the proxy;
then ``--agent-trials`` trials of the built-in agent (4 turns at most, 96 tokens per call) over
the tasks of examples/tasks in the same sandbox, at each concurrency of ``--agent-concurrency``,
with OPENAI_BASE_URL pointing (a) at the trial's URL on the proxy (``trial_env``, open mode, no
trial key) and (b) straight at vLLM's /v1. Reports trials/min and model calls/s (one line of
``agent/agent.jsonl`` per turn), and the ratios proxy / direct. The call latency cannot be read
from a trial (the agent logs no start for its first call, and with this model most trials make
only that one), so after each side's trials ``--latency-calls`` agent-shaped calls are timed at
the same concurrency: the agent's own ``complete()`` (its system prompt, a task's instruction,
its tools, 96 tokens), each through the proxy as the first call of a trial of its own.

The agent's calls are few and short with the tiny model (one or two per trial, under 96
tokens each), and most of a trial is sandbox and agent start-up, so this measures the per-call
hop (LiteLLM, trial routing, the trajectory logger, and the logprobs/token ids it asks vLLM
for, which a direct call does not) under agent-shaped concurrency, not a long rollout.

    python -m bench.trials [--sandbox-trials 40] [--concurrency 4] [--agent-trials 32] [--agent-concurrency 4,8]

Loopback only; starts and stops its own services. Last line: one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from bench.common.cli import bench_parser
from bench.common.harness import REPO, free_port, server
from bench.common.result import emit
from rlstack.common.contracts.trajectory import read_trajectory
from rlstack.episodes.agents import AgentLimits, builtin_agent, trial_env
from rlstack.episodes.harbor.dataset import load_dataset
from rlstack.episodes.harbor.task import HarborTask
from rlstack.episodes.images.base import LOCAL_BASE_MAP
from rlstack.episodes.images.config import ImageSettings
from rlstack.episodes.images.engine import Engine
from rlstack.episodes.images.resolve import TaskImages
from rlstack.episodes.sandboxes import build_sandbox
from rlstack.episodes.sandboxes.config import LocalSandboxConfig
from rlstack.episodes.sandboxes.local import LocalSandbox
from rlstack.episodes.trials.records import AgentSpec, TrialResult, TrialSpec, TrialStatus
from rlstack.episodes.trials.run import run_trial

console = Console(stderr=True)
VLLM_PY = REPO / ".venv-vllm" / "bin" / "python"
PROXY_PY = REPO / ".venv-proxy" / "bin" / "python"
TASKS = REPO / "examples" / "tasks"
NOP_TASK = TASKS / "write-greeting-1"
LIMITS = AgentLimits(max_turns=4, max_tokens=96)


def image_settings(**fields) -> ImageSettings:  # noqa: ANN003
    """``RLSTACK_TASKS_*`` when set; else ``FROM debian:bookworm-slim`` on the base ``rlstack tasks base`` makes."""
    if "RLSTACK_TASKS_BASE_MAP" not in os.environ:
        fields.setdefault("base_map", LOCAL_BASE_MAP)
    return ImageSettings(**fields)


def default_model() -> Path:
    demo = REPO / "models" / "agent-demo"
    return demo if (demo / "config.json").exists() else REPO / "models" / "tiny"


def p50(values: list[float]) -> float:
    return statistics.median(values) if values else math.nan


def rank(values: list[float], q: float) -> float:
    """Nearest rank: with few samples, the largest but none."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1)]


def p95(values: list[float]) -> float:
    return rank(values, 0.95)


def p99(values: list[float]) -> float:
    return rank(values, 0.99)


def cpu_seconds() -> float:
    """This process's CPU and its reaped children's (bubblewrap, the phases, podman and its runtime)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def statuses(results: list[TrialResult]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for result in results:
        counts[result.status.value] = counts.get(result.status.value, 0) + 1
    return counts


async def bounded(n: int, concurrency: int, one) -> tuple[list, float]:  # noqa: ANN001
    """``one(i)`` for i < n, ``concurrency`` at once; the results in order and the wall seconds."""
    slots = asyncio.Semaphore(concurrency)

    async def slot(i: int):  # noqa: ANN202
        async with slots:
            return await one(i)

    start = time.perf_counter()
    results = await asyncio.gather(*(slot(i) for i in range(n)))
    return list(results), time.perf_counter() - start


# -- part 1: the sandbox's own cost -------------------------------------------------------------

async def sandboxed_nop(side: str, task: HarborTask, n: int, concurrency: int, trials_dir: Path, progress,  # noqa: ANN001
                        bar) -> dict:  # noqa: ANN001
    sandbox = LocalSandbox() if side == "host" else build_sandbox(LocalSandboxConfig(images=image_settings()))
    await asyncio.to_thread(sandbox.check)  # bubblewrap's one-off probe is not a trial's cost
    if side == "image":  # nor is having the image, once per task (the env server does it before its first trial)
        assert not await asyncio.to_thread(sandbox.prepare, [task], AgentSpec.nop().command)
    cpu = cpu_seconds()

    async def one(i: int) -> TrialResult:
        result = await run_trial(TrialSpec(run=f"nop-{side}", trial=f"nop-{i}", task=task, agent=AgentSpec.nop()),
                                 sandbox, trials_dir)
        progress.advance(bar)
        return result

    try:
        results, wall = await bounded(n, concurrency, one)
    finally:
        await sandbox.close()
    cpu = cpu_seconds() - cpu
    ok = [r for r in results if r.status == TrialStatus.OK]
    if len(ok) != n:
        console.print(f"[yellow]{side} nop trials: {statuses(results)}; first error: "
                      f"{next(r.error for r in results if r.status != TrialStatus.OK)}")
    agent = [r.agent.run.seconds for r in results if r.agent.run is not None]
    verifier = [r.verifier.run.seconds for r in results if r.verifier.run is not None]
    return figures([r.seconds for r in results], agent, verifier, n, wall, cpu, len(ok))


def figures(trial: list[float], agent: list[float], verifier: list[float], n: int, wall: float, cpu: float,
            ok: int) -> dict:
    return {"trials_per_min": 60 * n / wall, "trial_s_p50": p50(trial), "trial_s_p95": p95(trial),
            "start_s_p50": p50(agent), "start_s_p95": p95(agent), "start_s_p99": p99(agent),
            "verifier_s_p50": p50(verifier), "cpu_s_per_trial": cpu / n, "ok": ok, "wall_s": wall}


async def timed(argv: list[str], env: dict[str, str] | None = None) -> tuple[float, int]:
    start = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(*argv, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
                                                env=env)
    code = await proc.wait()
    return time.perf_counter() - start, code


async def podman_nop(task: HarborTask, n: int, concurrency: int, progress, bar) -> dict:  # noqa: ANN001
    """A container per phase: what a trial costs when its environment is a podman container."""
    image = (await asyncio.to_thread(TaskImages(image_settings()).rootfs, task)).image_id
    run = ["podman", "run", "--rm", "--runtime", "runc", "--network=none", "--ulimit", "nofile=1024:1024",
           "--ulimit", "nproc=1024:1024", "--cpus", "1", "--memory", "512m"]
    tests = ["-v", f"{task.tests_dir}:/tests:ro"]
    cpu = cpu_seconds()

    async def one(i: int) -> tuple[float, float, float, bool]:
        start = time.perf_counter()
        agent, agent_code = await timed([*run, image, "true"])
        verifier, _ = await timed([*run, *tests, image, "python3", "/tests/test_outputs.py"])
        progress.advance(bar)
        return time.perf_counter() - start, agent, verifier, agent_code == 0

    results, wall = await bounded(n, concurrency, one)
    trial, agent, verifier, ok = (list(column) for column in zip(*results))
    return figures(trial, agent, verifier, n, wall, cpu_seconds() - cpu, sum(ok))


async def plain_nop(task: HarborTask, n: int, concurrency: int, progress, bar) -> dict:  # noqa: ANN001
    check = str(task.tests_dir / "test_outputs.py")
    # The sandbox's own minimal environment, so both sides find the same python3 (not, say, a pyenv shim).
    env = {"PATH": LocalSandboxConfig().path, "HOME": "/tmp", "TMPDIR": "/tmp", "LANG": "C.UTF-8"}
    cpu = cpu_seconds()

    async def one(i: int) -> tuple[float, float, float]:
        start = time.perf_counter()
        agent, _ = await timed(["true"], env)
        verifier, _ = await timed(["python3", check], env)  # fails (no /app/greeting.txt), as the nop's verifier does
        progress.advance(bar)
        return time.perf_counter() - start, agent, verifier

    results, wall = await bounded(n, concurrency, one)
    trial, agent, verifier = (list(column) for column in zip(*results))
    return figures(trial, agent, verifier, n, wall, cpu_seconds() - cpu, n)


def build_cold_and_unchanged(dataset: Path, tmp: Path, progress) -> dict:  # noqa: ANN001
    """The dataset copied with a nonce ``ARG`` after each ``FROM`` (a new cache key for every later
    step: a cold build but for the base), built, then built again unchanged."""
    from rlstack.episodes.images.dataset import build_dataset

    copy = tmp / "build-dataset"
    shutil.copytree(dataset, copy, ignore=shutil.ignore_patterns("images.lock.json"))
    nonce = uuid.uuid4().hex
    for dockerfile in copy.glob("*/environment/Dockerfile"):
        lines = dockerfile.read_text().splitlines()
        at = next(i for i, line in enumerate(lines) if line.upper().startswith("FROM ")) + 1
        dockerfile.write_text("\n".join([*lines[:at], f"ARG RLSTACK_BENCH_NONCE={nonce}", *lines[at:]]) + "\n")
    settings = image_settings(jobs=2)
    out = {}
    for phase in ("cold", "unchanged"):
        bar = progress.add_task(f"building {dataset.name}'s images ({phase})", total=None)
        start = time.perf_counter()
        result = build_dataset(copy, settings, progress=False)
        out[f"build_{phase}_s"] = time.perf_counter() - start
        out[f"build_{phase}_rebuilt"] = sum(b.rebuilt for b in result.built)
        out[f"build_{phase}_failed"] = len(result.failures)
        progress.remove_task(bar)
    out["build_tasks"] = len(result.built) + len(result.failures)
    engine = Engine(settings)
    for built in result.built:  # the bench's own images go; the base and other datasets' stay
        engine.remove(built.ref)
    return out


# -- part 2: agent trials, through the proxy and direct ---------------------------------------

def agent_calls(base_url: str, side: str, run: str, tasks: tuple[HarborTask, ...], n: int, concurrency: int,
                progress, bar) -> dict:  # noqa: ANN001
    """``n`` first calls of a trial, made with the agent's own ``complete()`` (its system prompt, a task's
    instruction, its tools, its token limit), ``concurrency`` at once; seconds per call as the caller sees them."""
    from rlstack.agent.config import AgentSettings
    from rlstack.agent.loop import SYSTEM_PROMPT, complete

    queue = list(range(n))
    latencies: list[float] = []

    def worker() -> None:
        while True:
            try:
                i = queue.pop()  # atomic; another thread may have taken the last one
            except IndexError:
                return
            task = tasks[i % len(tasks)]
            # Through the proxy each call is a trial of its own (its first call); direct, the same body to vLLM.
            url = f"{base_url}/trials/{run}/call-{i}/v1" if side == "proxy" else f"{base_url}/v1"
            settings = AgentSettings(base_url=url, api_key="open", model="policy", instruction=task.instruction,
                                     max_tokens=LIMITS.max_tokens, temperature=LIMITS.temperature, request_attempts=1)
            messages = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": task.instruction}]
            with httpx.Client(base_url=url, headers={"Authorization": "Bearer open"}, timeout=600) as client:
                start = time.perf_counter()
                complete(client, settings, messages)
                latencies.append(time.perf_counter() - start)
            progress.advance(bar)

    with ThreadPoolExecutor(concurrency) as pool:
        for future in [pool.submit(worker) for _ in range(concurrency)]:
            future.result()
    return {"call_ms_mean": 1000 * statistics.fmean(latencies), "call_ms_p50": 1000 * p50(latencies)}


async def agent_cell(side: str, tasks: tuple[HarborTask, ...], root: Path, n: int, concurrency: int, proxy_url: str,
                     vllm_url: str, trials_dir: Path, sandbox: LocalSandbox, progress, bar) -> dict:  # noqa: ANN001
    agent = builtin_agent(LIMITS)
    run = f"agents-{side}-c{concurrency}"

    async def one(i: int) -> TrialResult:
        task = tasks[i % len(tasks)]
        trial = f"t{i}-{task.short_name}"
        env = trial_env(agent, proxy_url, run, trial, "open", "policy")
        if side == "direct":
            env["OPENAI_BASE_URL"] = f"{vllm_url}/v1"
        result = await run_trial(TrialSpec(run=run, trial=trial, task=task, agent=agent, env=env, private_paths=[root]),
                                 sandbox, trials_dir)
        progress.advance(bar)
        return result

    results, wall = await bounded(n, concurrency, one)
    calls, logged = 0, 0
    for result in results:
        trial_dir = trials_dir / run / result.trial
        transcript = trial_dir / "agent" / "agent.jsonl"
        calls += sum(1 for _ in transcript.open()) if transcript.exists() else 0
        logged += len(read_trajectory(trial_dir))
    ok = [r for r in results if r.status == TrialStatus.OK]
    if len(ok) != n:
        bad = next(r for r in results if r.status != TrialStatus.OK)
        console.print(f"[yellow]{run}: {statuses(results)}; e.g. {bad.trial}: {bad.error} "
                      f"(see agent/stderr.txt)")
    agent_s = [r.agent.run.seconds for r in results if r.agent.run is not None]
    return {"trials_per_min": 60 * n / wall, "calls_per_s": calls / wall, "calls": calls, "calls_per_trial": calls / n,
            "agent_s_p50": p50(agent_s), "ok": len(ok), "reward_mean": statistics.fmean(r.reward for r in ok) if ok else math.nan, "trajectory_lines": logged,
            "wall_s": wall}


def agent_trials(args: argparse.Namespace, tmp: Path, progress) -> dict[int, dict[str, dict]]:  # noqa: ANN001
    dataset = load_dataset(TASKS)
    reg_port, side_port, vllm_port, proxy_port = (free_port() for _ in range(4))
    registry_url = f"http://127.0.0.1:{reg_port}"
    registry_cmd = [sys.executable, "-m", "rlstack.registry", "--port", str(reg_port), "--probe-interval-seconds", "0.5",
                    "--log-level", "warning"]
    replica_cmd = [str(VLLM_PY), "-m", "rlstack.inference", "--port", str(side_port), "--model", str(args.model),
                   "--vllm-port", str(vllm_port), "--registry-url", registry_url, "--replica-id", "replica-0",
                   "--dp-rank", "0", "--heartbeat-seconds", "1", "--kv-cache-gib", "1", "--max-model-len", "4096",
                   "--log-level", "warning"]
    trials_dir = tmp / "trials"
    proxy_cmd = [str(PROXY_PY), "-m", "rlstack.proxy", "--port", str(proxy_port), "--registry-url", registry_url,
                 "--trials-dir", str(trials_dir), "--watch-timeout-seconds", "2", "--log-level", "warning"]
    console.print(f"starting registry, vLLM replica on {Path(args.model).name} (minutes on a busy CPU) and proxy ...")
    cells: dict[int, dict[str, dict]] = {}
    sandbox = LocalSandbox()
    with server(registry_cmd, reg_port, "/readyz", tmp / "registry.log", timeout=120), \
         server(replica_cmd, side_port, "/readyz", tmp / "replica.log", timeout=600), \
         server(proxy_cmd, proxy_port, "/readyz", tmp / "proxy.log", timeout=300) as proxy_url:
        vllm_url = f"http://127.0.0.1:{vllm_port}"
        sandbox.check()
        for concurrency in args.agent_concurrency:
            for side in ("direct", "proxy"):
                bar = progress.add_task(f"{side} agent trials, concurrency {concurrency}", total=args.agent_trials)
                figures = asyncio.run(agent_cell(side, dataset.tasks, dataset.root, args.agent_trials, concurrency,
                                                 proxy_url, vllm_url, trials_dir, sandbox, progress, bar))
                bar = progress.add_task(f"{side} agent-shaped calls, concurrency {concurrency}", total=args.latency_calls)
                figures.update(agent_calls(proxy_url if side == "proxy" else vllm_url, side, f"calls-{side}-c{concurrency}",
                                           dataset.tasks, args.latency_calls, concurrency, progress, bar))
                cells.setdefault(concurrency, {})[side] = figures
        asyncio.run(sandbox.close())
    return cells


def concurrencies(text: str) -> list[int]:
    values = [int(v) for v in text.split(",") if v.strip()]
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError("a comma-separated list of positive integers")
    return values


def main() -> None:
    parser = bench_parser(__doc__)
    parser.add_argument("--sandbox-trials", type=int, default=40, help="nop-agent trials (and plain baseline runs)")
    parser.add_argument("--concurrency", type=int, default=4, help="trials at once in part 1")
    parser.add_argument("--agent-trials", type=int, default=32, help="built-in agent trials per side and concurrency")
    parser.add_argument("--agent-concurrency", type=concurrencies, default=[4, 8], help="comma-separated, e.g. 4,8")
    parser.add_argument("--latency-calls", type=int, default=None,
                        help="agent-shaped calls timed per side and concurrency (default: --agent-trials)")
    parser.add_argument("--model", type=Path, default=default_model())
    parser.add_argument("--skip-agent", action="store_true", help="parts 0 and 1 only (no vLLM, no proxy)")
    parser.add_argument("--build-dataset", type=Path, default=REPO / "examples" / "image-tasks",
                        help="part 0: the dataset whose images are built cold, then unchanged")
    parser.add_argument("--skip-build", action="store_true", help="no part 0")
    parser.add_argument("--sides", default="plain,host,image,podman", help="part 1's sides, comma-separated")
    args = parser.parse_args()
    args.model = args.model.resolve()
    args.latency_calls = args.agent_trials if args.latency_calls is None else args.latency_calls
    if not args.skip_agent:
        for py in (VLLM_PY, PROXY_PY):
            if not py.exists():
                sys.exit(f"missing {py.parent.parent.name}: run `make setup` first")
        if not (args.model / "config.json").exists():
            sys.exit(f"no model at {args.model}: run `rlstack make-tiny-model` (or `rlstack make-agent-demo`) first")

    task = HarborTask.load(NOP_TASK)
    sides = [side.strip() for side in args.sides.split(",") if side.strip()]
    if "plain" not in sides:
        sides.insert(0, "plain")  # the baseline of every ratio
    flat: dict[str, float | int | str] = {}
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        with Progress(console=console, transient=True) as progress:
            if not args.skip_build:
                flat.update(build_cold_and_unchanged(args.build_dataset, tmp_path, progress))
            measured: dict[str, dict] = {}
            for side in sides:
                bar = progress.add_task(f"{side} nop trials", total=args.sandbox_trials)
                if side == "plain":
                    measured[side] = asyncio.run(plain_nop(task, args.sandbox_trials, args.concurrency, progress, bar))
                elif side == "podman":
                    measured[side] = asyncio.run(podman_nop(task, args.sandbox_trials, args.concurrency, progress, bar))
                else:
                    measured[side] = asyncio.run(sandboxed_nop(side, task, args.sandbox_trials, args.concurrency,
                                                               tmp_path / f"nop-{side}", progress, bar))
            cells = {} if args.skip_agent else agent_trials(args, tmp_path, progress)

    if not args.skip_build:
        Console().print(f"images of {args.build_dataset.name}: {flat['build_tasks']} tasks, cold {flat['build_cold_s']:.1f} s "
                        f"({flat['build_cold_rebuilt']} built), unchanged {flat['build_unchanged_s']:.1f} s "
                        f"({flat['build_unchanged_rebuilt']} rebuilt)")
    table = Table(title=f"local sandbox: {args.sandbox_trials} nop trials of {task.short_name}, {args.concurrency} at once")
    for col in ("side", "trials/min", "trial s p50/p95", "start s p50/p95/p99", "verifier s p50", "CPU s/trial", "ok"):
        table.add_column(col, justify="right")
    for side, f in measured.items():
        table.add_row(side, f"{f['trials_per_min']:.0f}", f"{f['trial_s_p50']:.3f}/{f['trial_s_p95']:.3f}",
                      f"{f['start_s_p50']:.3f}/{f['start_s_p95']:.3f}/{f['start_s_p99']:.3f}", f"{f['verifier_s_p50']:.3f}",
                      f"{f['cpu_s_per_trial']:.3f}", f"{f['ok']}/{args.sandbox_trials}")
        flat.update({f"sandbox_{side}_{k}": round(v, 4) for k, v in f.items()})
    pairs = [(side, "plain") for side in measured if side != "plain"]
    if {"image", "host"} <= measured.keys():
        pairs.append(("image", "host"))
    if {"podman", "image"} <= measured.keys():
        pairs.append(("podman", "image"))
    for top, bottom in pairs:
        a, b = measured[top], measured[bottom]
        ratios = {k: a[k] / b[k] for k in ("trials_per_min", "trial_s_p50", "start_s_p50", "start_s_p99", "cpu_s_per_trial")}
        table.add_row(f"{top} / {bottom}", f"{ratios['trials_per_min']:.2f}", f"{ratios['trial_s_p50']:.2f}",
                      f"{ratios['start_s_p50']:.2f} (p99 {ratios['start_s_p99']:.2f})", "", f"{ratios['cpu_s_per_trial']:.2f}", "")
        flat.update({f"sandbox_ratio_{top}_over_{bottom}_{k}": round(v, 3) for k, v in ratios.items()})
    Console().print(table)

    if cells:
        table = Table(title=f"built-in agent trials ({args.agent_trials} per cell, {LIMITS.max_turns} turns x "
                            f"{LIMITS.max_tokens} tokens at most, {Path(args.model).name}): proxy vs direct vLLM")
        for col in ("cell", "trials/min", "calls/s", "call ms mean/p50", "calls/trial", "agent s p50", "ok"):
            table.add_column(col, justify="right")
        for concurrency, sides in cells.items():
            for side, f in sides.items():
                table.add_row(f"c{concurrency} {side}", f"{f['trials_per_min']:.1f}", f"{f['calls_per_s']:.2f}",
                              f"{f['call_ms_mean']:.0f}/{f['call_ms_p50']:.0f}", f"{f['calls_per_trial']:.2f}",
                              f"{f['agent_s_p50']:.2f}", f"{f['ok']}/{args.agent_trials}")
                flat.update({f"agent_c{concurrency}_{side}_{k}": round(v, 4) for k, v in f.items()})
            d, p = sides["direct"], sides["proxy"]
            cell = {"trials_per_min": p["trials_per_min"] / d["trials_per_min"],
                    "calls_per_s": p["calls_per_s"] / d["calls_per_s"] if d["calls_per_s"] else math.nan,
                    "call_ms_mean": p["call_ms_mean"] / d["call_ms_mean"]}
            table.add_row(f"c{concurrency} proxy / direct", f"{cell['trials_per_min']:.2f}", f"{cell['calls_per_s']:.2f}",
                          f"{cell['call_ms_mean']:.2f}", "", "", "")
            flat.update({f"agent_c{concurrency}_ratio_{k}": round(v, 3) for k, v in cell.items()})
        Console().print(table)

    out = {"sandbox_trials": args.sandbox_trials, "concurrency": args.concurrency,
           "agent_trials": 0 if args.skip_agent else args.agent_trials, "model": Path(args.model).name, **flat}
    emit("trials", args, out, {k: v for k, v in flat.items() if "_ratio_" in k and not math.isnan(v)})


if __name__ == "__main__":
    main()
