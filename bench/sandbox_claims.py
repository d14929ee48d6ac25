"""A trial's start at RL concurrency: warm pods claimed from the pool against pods created per trial
(cold) against the local backend, in bursts of trials started at once.

Needs a cluster (``$KUBECONFIG``), a namespace, a ReadWriteMany claim there whose volume this host
also sees as a directory (``--claim-dir``), the agent bundle image and the dataset's task images on
the node (``bench/trial_pods.py`` says how). The env side runs here as an env server runs it: the
real ``KubernetesSandbox`` (its shared pod watch, its warm pool) against the real API server.

For each burst size B (``--bursts 16,64,128``), all on the first task of ``--dataset`` with an agent
that does nothing (``true``), so what is measured is the sandbox, or (``--agent-seconds S``) that
does nothing for S seconds (``sleep S``): the burst's pods then stay up until every claim has
started, as an RL step's agents, which run for a minute, keep theirs, instead of the first trials'
verifiers and pod deletions running beside the last ones' claims:

- cold: B trials at once, each creating its pod;
- warm: the pool filled with B pods of the task's image (``expect``), then B trials at once, each
  claiming one;
- local: B trials at once in the local backend (bubblewrap over the same image's layers), here.

A start is a trial's ``start_seconds``: from the trial's start to its agent's first instruction
(the driver's clock in the pod, this host's for the trial; one host here). Prints p50/p99 per cell,
warm/cold ratios, the most pods in flight at once, API requests per trial (the sandbox's own
count), with ``--apiserver-pid`` the API server's CPU seconds per trial, and what each cell left
(its pods and pool directories ``--settle`` s after its close). Writes the figures (``--out``,
JSON) and a plot (``--plot``, PNG). Exits 1 when a trial is not ``ok`` or a cell left anything.

    KUBECONFIG=... python -m bench.sandbox_claims --namespace rl-trials --claim trials \\
        --claim-dir /srv/pv-0 --bundle-image REF --dataset examples/image-tasks --pod-security baseline \\
        --bursts 16,64,128 [--apiserver-pid PID] [--out docs/data/sandbox-claims.json --plot claims.png]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
import uuid
from collections import Counter
from pathlib import Path

from prometheus_client import CollectorRegistry
from rich.console import Console
from rich.table import Table
from trial_pods import cluster_arguments  # bench/ is on the path of a bench run as a script

from bench.common.cli import bench_parser
from bench.common.result import emit
from rlstack.episodes.harbor.dataset import load_dataset
from rlstack.episodes.sandboxes import (
    KubernetesSandboxConfig,
    LocalSandboxConfig,
    WarmPoolConfig,
    build_sandbox,
)
from rlstack.episodes.sandboxes.pods import SandboxManager, SandboxPodSecurity
from rlstack.episodes.trials import AgentSpec, TrialSpec, run_trial
from rlstack.kube.connection import connect

console = Console(stderr=True)


def idle_agent(seconds: float) -> AgentSpec:
    """An agent that does nothing, at once or for ``seconds``."""
    return AgentSpec(name="true", command=["true"]) if seconds <= 0 else AgentSpec(name="sleep", command=["sleep", f"{seconds:g}"])


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def api_requests(registry: CollectorRegistry) -> float:
    return sum(s.value for m in registry.collect() if m.name == "rlstack_sandbox_api_requests"
               for s in m.samples if s.name.endswith("_total"))


def cpu_seconds(pid: int | None) -> float:
    if pid is None:
        return 0.0
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def kube_box(args: argparse.Namespace, run: str, pool: int, registry: CollectorRegistry):  # noqa: ANN201
    manager = SandboxManager(connect(None, args.namespace), args.namespace, run,
                             pod_security=SandboxPodSecurity(level=args.pod_security, cpu_request="10m", memory_request="32Mi"))
    config = KubernetesSandboxConfig(bundle_image=args.bundle_image, claim_name=args.claim, trials_dir=args.claim_dir / "trials",
                                     trials_subpath="trials", image_lock=args.lock, image_pull_policy=args.pull_policy,
                                     pool=WarmPoolConfig(max_total=pool, max_per_image=max(pool, 1)))
    return build_sandbox(config, manager, registry)


async def burst(box, task, run: str, trials_dir: Path, size: int, agent: AgentSpec) -> tuple[list, int]:  # noqa: ANN001
    """``size`` trials at once; the results and the most of the run's pods running at once."""
    specs = [TrialSpec(run=run, trial=f"t{i}", task=task, agent=agent) for i in range(size)]
    peak, done = 0, asyncio.Event()

    async def sample() -> None:
        nonlocal peak
        while not done.is_set():
            watch = getattr(box, "watch", None)
            if watch is not None:
                peak = max(peak, sum(1 for p in watch.pods() if p.status and p.status.phase == "Running"))
            await asyncio.sleep(0.1)

    sampler = asyncio.create_task(sample())
    try:
        results = await asyncio.gather(*(run_trial(s, box, trials_dir) for s in specs))
    finally:
        done.set()
        await sampler
    return results, peak


async def cell(args: argparse.Namespace, task, mode: str, size: int) -> dict:  # noqa: ANN001
    run = f"claims-{mode}-{size}-{uuid.uuid4().hex[:4]}"
    registry = CollectorRegistry()
    if mode == "local":
        box = build_sandbox(LocalSandboxConfig(image_lock=args.lock))
        trials_dir = args.local_dir
        box.prepare([task])
    else:
        box = kube_box(args, run, size if mode == "warm" else 0, registry)
        trials_dir = args.claim_dir / "trials"
        refused = box.prepare([task])
        if refused:
            raise SystemExit("\n".join(refused.values()))
    fill = None
    try:
        if mode == "warm":
            began = time.monotonic()
            await box.expect([task], size)
            while sum(p.ready for p in box.pool.pods.values()) < size:
                if time.monotonic() - began > args.fill_timeout:
                    raise SystemExit(f"the pool did not fill {size} pods in {args.fill_timeout:.0f}s "
                                     "(kubectl get pods; describe a Pending one)")
                await asyncio.sleep(0.2)
            fill = round(time.monotonic() - began, 1)
            await asyncio.sleep(2)  # the fill's own API traffic settled
        requests_before, cpu_before = api_requests(registry), cpu_seconds(args.apiserver_pid if mode != "local" else None)
        began = time.monotonic()
        results, peak = await burst(box, task, run, trials_dir, size, idle_agent(args.agent_seconds))
        wall = time.monotonic() - began
        if mode == "warm":
            box.pool.expect(Counter())  # no refill after the burst: the next cell measures on a quiet node
    finally:
        await box.close()  # the pool's pods too, whatever happened
    left = {}
    if mode != "local":  # what the close left: the run's pods (still terminating) and pool directories
        await asyncio.sleep(args.settle)
        left = {"pods_left": len(await box.manager.list()),
                "pool_dirs_left": len(list((trials_dir / ".pool" / run).glob("*"))) if (trials_dir / ".pool" / run).is_dir() else 0}
    starts = [r.start_seconds for r in results if r.status.value == "ok" and r.start_seconds is not None]
    bad = [f"{r.trial}: {r.status.value} {r.error}" for r in results if r.status.value != "ok"]
    warm = sum(1 for r in results if r.sandbox_start == "warm")
    out = {"mode": mode, "burst": size, "agent_seconds": args.agent_seconds, "ok": len(starts), "not_ok": bad[:5], "n_not_ok": len(bad), "wall_s": round(wall, 1),
           "p50_s": round(statistics.median(starts), 3) if starts else None,
           "p99_s": round(pct(starts, 0.99), 3) if starts else None, "max_s": round(max(starts), 3) if starts else None,
           "claimed_warm": warm, "pods_running_peak": peak, "pool_fill_s": fill, **left}
    if mode != "local":
        out["api_requests_per_trial"] = round((api_requests(registry) - requests_before) / size, 2)
        if args.apiserver_pid:
            out["apiserver_cpu_ms_per_trial"] = round(1000 * (cpu_seconds(args.apiserver_pid) - cpu_before) / size, 1)
    return out


def warm_over_cold(cells: list[dict], c: dict, q: str) -> str:
    cold = next((x for x in cells if x["mode"] == "cold" and x["burst"] == c["burst"]), None)
    return f"{c[q] / cold[q]:.3f}" if c["mode"] == "warm" and cold and cold[q] and c[q] else ""


def plot(cells: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    bursts = sorted({c["burst"] for c in cells})
    modes = [m for m in ("warm", "cold", "local") if any(c["mode"] == m for c in cells)]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5), sharey=True)
    width = 0.8 / len(modes)
    for ax, q in zip(axes, ("p50_s", "p99_s"), strict=True):
        for n, mode in enumerate(modes):
            values = [next((c[q] for c in cells if c["mode"] == mode and c["burst"] == b), None) or 0 for b in bursts]
            ax.bar([i + n * width for i in range(len(bursts))], values, width, label=mode)
        ax.axhline(0.5, color="grey", linestyle="--", linewidth=1)
        ax.set_xticks([i + width * (len(modes) - 1) / 2 for i in range(len(bursts))], [f"burst {b}" for b in bursts])
        ax.set_yscale("log")
        ax.set_title(f"trial start to the agent's first instruction, {q[:3]}")
    axes[0].set_ylabel("seconds (log; dashed: 0.5 s)")
    axes[0].legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


async def main_async(args: argparse.Namespace) -> list[dict]:
    task = load_dataset(args.dataset).tasks[0]
    cells = []
    with console.status("") as status:
        for size in args.bursts:
            for mode in args.modes:
                status.update(f"burst {size}: {mode}")
                cells.append(await cell(args, task, mode, size))
                console.print(cells[-1])
    return cells


def main() -> int:
    parser = bench_parser(__doc__)
    cluster_arguments(parser)
    parser.add_argument("--bursts", type=lambda s: [int(x) for x in s.split(",")], default=[16, 64, 128])
    parser.add_argument("--modes", type=lambda s: s.split(","), default=["warm", "cold", "local"])
    parser.add_argument("--local-dir", type=Path, default=Path("/tmp/rlstack-claims-local"))
    parser.add_argument("--apiserver-pid", type=int, default=None, help="the kube-apiserver's pid on this host")
    parser.add_argument("--agent-seconds", type=float, default=0.0,
                        help="the agent does nothing for this long (0: exits at once)")
    parser.add_argument("--settle", type=float, default=30.0,
                        help="seconds after a cell's close before counting the pods and pool directories it left")
    parser.add_argument("--fill-timeout", type=float, default=600.0, help="seconds the warm pool may take to fill")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--plot", type=Path, default=None)
    args = parser.parse_args()
    cells = asyncio.run(main_async(args))
    agent = "an agent that does nothing" + (f" for {args.agent_seconds:g} s" if args.agent_seconds > 0 else "")
    table = Table(title=f"trial start to the agent's first instruction ({agent})")
    for column in ("burst", "mode", "ok", "p50 s", "p99 s", "warm/cold p50", "warm/cold p99", "pods running (peak)",
                   "API requests/trial", "API server CPU ms/trial", "left (pods/dirs)"):
        table.add_column(column)
    for c in cells:
        table.add_row(str(c["burst"]), c["mode"], f"{c['ok']}/{c['burst']}", f"{c['p50_s']}", f"{c['p99_s']}",
                      warm_over_cold(cells, c, "p50_s"), warm_over_cold(cells, c, "p99_s"), str(c["pods_running_peak"]),
                      str(c.get("api_requests_per_trial", "")),
                      str(c.get("apiserver_cpu_ms_per_trial", "")),
                      f"{c['pods_left']}/{c['pool_dirs_left']}" if "pods_left" in c else "")
    console.print(table)
    if args.out:
        args.out.write_text(json.dumps({"cells": cells, "dataset": str(args.dataset)}, indent=1) + "\n")
    if args.plot:
        plot(cells, args.plot)
    emit("sandbox_claims", args, {"cells": cells, "dataset": str(args.dataset)})
    return 1 if any(c["n_not_ok"] or c.get("pods_left") or c.get("pool_dirs_left") for c in cells) else 0


if __name__ == "__main__":
    sys.exit(main())
