"""Trial pods in their tasks' images on a real cluster: scores, and a trial's start with its image
on the node against the same start when the node must pull it first.

Needs a cluster (``$KUBECONFIG``), a namespace, a ReadWriteMany claim there whose volume this host
also sees as a directory (``--claim-dir``: a hostPath or NFS volume), the agent bundle image and the
dataset's task images where the node gets them (imported, or pushed: ``rlstack tasks build DATASET
--push REGISTRY --lock L``). The env side runs here, as an env server would: the real
``KubernetesSandbox`` and ``SandboxManager`` against the real API server; the kubelet runs the pods.

Part 1: every task of ``--dataset``, the reference solution and doing nothing, all at once, and on
the first task an agent that attacks its pod from inside (lists the tests and the stage, reads the
driver's environment, ``kill -9 1``, plants a reward, a test script and a process that keeps
writing reward 1), which must score 0; prints each trial's status, reward and image, what the
attacker saw, and the run's pods with their images as ``kubectl get pods -l harbor-run=RUN`` would
list them (pods are kept until listed, then deleted).

Part 2 (``--rounds N``, with ``--evict``): a trial's start, from the env side's first API call to
the agent's first instruction (the agent writes the time as its first command; one clock: this
host's), for the first task, N times with its image on the node and N times after ``--evict``
removed it from the node (a command with ``{ref}``, e.g. ``ctr -n k8s.io images rm {ref}``), so
the kubelet pulls it from the registry. Prints p50/p99 of both and absent/present.

    KUBECONFIG=... python -m bench.trial_pods --namespace rl --claim trials --claim-dir /srv/trials \\
        --bundle-image REF --dataset examples/image-tasks --lock L [--pod-security baseline] \\
        [--rounds 5 --evict 'ctr -n k8s.io images rm {ref}']

Last line: one JSON object with every figure. Exits 1 when a reference solution did not score 1,
doing nothing or the attacker did not score 0, or any trial was not ``ok``.
"""

from __future__ import annotations

import argparse
import asyncio
import shlex
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

from rich.console import Console
from rich.table import Table

from bench.common.cli import bench_parser
from bench.common.result import emit
from rlstack.episodes.harbor.dataset import load_dataset
from rlstack.episodes.sandboxes import KubernetesSandboxConfig, build_sandbox
from rlstack.episodes.sandboxes.pods import SandboxManager, SandboxPodSecurity
from rlstack.episodes.trials import AgentSpec, TrialSpec, run_trial
from rlstack.kube.connection import connect

console = Console(stderr=True)
STARTED = "started.txt"
ATTACK = r"""
{ ls -A /tests /solution; ls -A /run/rlstack-trial; } > /logs/agent/seen.txt 2>&1
cat /proc/1/environ > /dev/null 2>> /logs/agent/seen.txt || echo "environ of pid 1: denied" >> /logs/agent/seen.txt
kill -9 1; echo "kill -9 1: exit $?" >> /logs/agent/seen.txt
echo 1 > /logs/verifier/reward.txt
printf '#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n' > /tests/test.sh
setsid sh -c 'while true; do echo 1 > /logs/verifier/reward.txt; sleep 0.05; done' > /dev/null 2>&1 &
"""


def build_box(args: argparse.Namespace, run: str, keep: bool):  # noqa: ANN201 - a KubernetesSandbox
    manager = SandboxManager(connect(None, args.namespace), args.namespace, run,
                             pod_security=SandboxPodSecurity(level=args.pod_security))
    config = KubernetesSandboxConfig(bundle_image=args.bundle_image, claim_name=args.claim,
                                     trials_dir=args.claim_dir / "trials", trials_subpath="trials", image_lock=args.lock,
                                     image_pull_policy=args.pull_policy, keep_pods=keep)
    return build_sandbox(config, manager)


async def scores(args: argparse.Namespace, tasks: list) -> dict:  # noqa: ANN001
    run = f"pods-{uuid.uuid4().hex[:6]}"
    box = build_box(args, run, keep=True)
    refused = box.prepare(tasks)
    if refused:
        raise SystemExit("\n".join(refused.values()))
    specs = [TrialSpec(run=run, trial=f"{task.short_name}-{agent.name}", task=task, agent=agent)
             for task in tasks for agent in (AgentSpec.oracle(), AgentSpec.nop())]
    specs.append(TrialSpec(run=run, trial=f"{tasks[0].short_name}-attack", task=tasks[0],
                           agent=AgentSpec(name="attack", command=["/bin/sh", "-c", ATTACK])))
    started = time.monotonic()
    with console.status(f"{len(specs)} trials in pods of run {run}"):
        results = await asyncio.gather(*(run_trial(s, box, args.claim_dir / "trials") for s in specs))
    seconds = time.monotonic() - started
    table = Table(title=f"run {run}: {len(specs)} trials in {seconds:.0f} s")
    for column in ("trial", "status", "reward", "image"):
        table.add_column(column)
    for spec, result in zip(specs, results, strict=True):
        table.add_row(spec.trial, result.status.value, str(result.reward), result.image or "-")
    console.print(table)
    seen = (args.claim_dir / "trials" / run / specs[-1].trial / "agent" / "seen.txt").read_text()
    console.print(f"the attacker saw:\n{seen}")
    pods = await box.manager.list()
    listing = [(p.metadata.name, p.status.phase if p.status else "?", p.spec.initContainers[0].image if p.spec.initContainers else "-",
                p.spec.containers[0].image) for p in pods]
    print(f"$ kubectl get pods -n {args.namespace} -l harbor-run={run} -o custom-columns=NAME:.metadata.name,"
          "STATUS:.status.phase,INIT:.spec.initContainers[0].image,IMAGE:.spec.containers[0].image", file=sys.stderr)
    for row in [("NAME", "STATUS", "INIT", "IMAGE"), *sorted(listing)]:
        print("  ".join(f"{cell:<{w}}" for cell, w in zip(row, (42, 10, 48, 0), strict=True)), file=sys.stderr)
    for name, *_ in listing:
        await box.manager.delete(name)
    return {"run": run, "seconds": round(seconds, 1), "pods_listed": len(listing), "attacker_saw": seen,
            "trials": [{"trial": s.trial, "status": r.status.value, "reward": r.reward, "image": r.image}
                       for s, r in zip(specs, results, strict=True)]}


async def one_start(args: argparse.Namespace, task, run: str, trial: str) -> float:  # noqa: ANN001
    box = build_box(args, run, keep=False)
    agent = AgentSpec(name="clock", command=["/bin/sh", "-c", f"date +%s.%N > /logs/agent/{STARTED}"])
    began = time.time()
    result = await run_trial(TrialSpec(run=run, trial=trial, task=task, agent=agent), box, args.claim_dir / "trials")
    if result.status.value != "ok":
        raise SystemExit(f"trial {trial}: {result.status.value}: {result.error}")
    return float((args.claim_dir / "trials" / run / trial / "agent" / STARTED).read_text()) - began


async def starts(args: argparse.Namespace, task) -> dict:  # noqa: ANN001
    box = build_box(args, "probe", keep=False)
    ref = box.images.entry(task).pull_ref
    run = f"start-{uuid.uuid4().hex[:6]}"
    seconds: dict[str, list[float]] = {"present": [], "absent": []}
    with console.status("") as status:
        for i in range(args.rounds):
            for side in ("present", "absent"):
                if side == "absent":
                    subprocess.run(shlex.split(args.evict.format(ref=ref)), check=False, capture_output=True)
                else:
                    await one_start(args, task, run, f"warm-{i}")  # the image back on the node
                status.update(f"round {i + 1}/{args.rounds}: image {side}")
                seconds[side].append(await one_start(args, task, run, f"{side}-{i}"))

    def pct(values: list[float], q: float) -> float:
        ordered = sorted(values)
        return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]

    out = {side: {"p50": round(statistics.median(v), 3), "p99": round(pct(v, 0.99), 3), "n": len(v)}
           for side, v in seconds.items()}
    out["ratio_p50_absent_over_present"] = round(out["absent"]["p50"] / out["present"]["p50"], 2)
    out["image"] = ref
    table = Table(title=f"trial start to the agent's first instruction, {task.name} ({args.rounds} each)")
    for column in ("image on the node", "p50 s", "p99 s"):
        table.add_column(column)
    for side in ("present", "absent"):
        table.add_row(side, f"{out[side]['p50']:.2f}", f"{out[side]['p99']:.2f}")
    table.add_row("absent / present", f"{out['ratio_p50_absent_over_present']:.2f}", "")
    console.print(table)
    return out


def cluster_arguments(parser: argparse.ArgumentParser) -> None:
    """Where the trial pods run: what this bench and bench/sandbox_claims.py both need."""
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--claim", required=True, help="a ReadWriteMany claim in the namespace")
    parser.add_argument("--claim-dir", type=Path, required=True, help="that claim's volume as this host sees it")
    parser.add_argument("--bundle-image", required=True)
    parser.add_argument("--dataset", type=Path, default=Path("examples/image-tasks"))
    parser.add_argument("--lock", type=Path, default=None, help="default: the dataset's images.lock.json")
    parser.add_argument("--pod-security", choices=["restricted", "baseline"], default="baseline")
    parser.add_argument("--pull-policy", choices=["IfNotPresent", "Always", "Never"], default="IfNotPresent")


def main() -> int:
    parser = bench_parser(__doc__)
    cluster_arguments(parser)
    parser.add_argument("--rounds", type=int, default=0, help="part 2: starts measured per side (0: skip)")
    parser.add_argument("--evict", default="", help="part 2: a command removing {ref} from the node")
    args = parser.parse_args()
    if args.rounds and not args.evict:
        parser.error("--rounds needs --evict")
    tasks = load_dataset(args.dataset).tasks
    figures = {"scores": asyncio.run(scores(args, tasks))}
    if args.rounds:
        figures["start"] = asyncio.run(starts(args, tasks[0]))
    emit("trial_pods", args, figures)
    wrong = [t["trial"] for t in figures["scores"]["trials"]
             if (t["status"], t["reward"]) != ("ok", 1.0 if t["trial"].endswith("-oracle") else 0.0)]
    if wrong:  # a reference solution not 1, doing nothing or the attacker not 0, or any trial not ok
        console.print(f"[red]wrong outcome: {', '.join(wrong)}[/red]")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
