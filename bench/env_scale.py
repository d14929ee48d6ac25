"""One env server under a thousand concurrent agent trials: its event-loop lag, its memory per trial,
and whether every trial that started ended in a posted group.

Everything but the model is real: one registry, simulated replicas (``sim_replica``) heartbeating
into it, one proxy (trial keys, token-in, trajectory records), one batcher, and ONE env server
(``python -m rlstack.envs --task harbor``) running each trial in its real local sandbox
(bubblewrap, the proxy reached through ``netbridge``), the verifier after it, the journal, the
proxy's end-of-trial records, assembly, scoring and the group's post. The agent is the env's
``command`` agent running ``bench/shell_agent.sh``: a POSIX shell loop of ``--turns`` chat calls
through the trial's proxy URL, each resending the conversation so far, with ``--tool-seconds`` of
tool time (a sleep) between calls: a thousand Python agents would not fit on this machine, a
thousand shells do. The tasks are made here (Harbor format, a verifier that scores the answer).

A wave of exactly ``--trials`` trials: this bench registers as the trainer with ``batch_size`` =
trials, and the env runs with ``--max-staleness 0``, so its own staleness gate starts
ceil(trials / group size) groups and then waits for a policy version that never comes (the
replicas stay at version 0). Every trial starts at once; ``--tool-seconds`` must be long enough
for the last sandbox to start before the first trial ends.

Measured: the env server's RSS idle (before the trainer registers, so no trial has started) and at
the peak of concurrent trials (``rlstack_env_sandboxes_active``); (peak - idle) / trials is its
memory per concurrent trial. Its event-loop lag p99 (``rlstack_env_event_loop_lag_seconds``,
``common.loop_lag``, buckets interpolated as ``histogram_quantile`` does) over the whole wave and
over its plateau (at least 95% of the trials running). Trials lost: started minus finished (the
env's counters), and groups started (the trial directories) minus groups the batcher handed out to
this bench as the trainer; both must be 0. Also the memory of the whole machine per trial (the
sandboxes' processes), which bounds how many trials one host holds, the env server's CPU per trial,
and how busy the shared core was: with the local sandbox, every bubblewrap, netbridge and agent
process runs on the env server's core(s), so at a thousand trials on one core the ramp (a thousand
sandboxes started at once) starves the env server, and its lag there is mostly that. The plateau
is the env server's own steady cost. Lags are split into ramp (trainer registered until 95% run),
plateau and drain (from when fewer than 95% run until the last group is posted).

Baseline in the same run: the same at ``--base-trials`` (ratios full / baseline).

    python -m bench.env_scale [--trials 1000 --base-trials 48 --turns 4 --tool-seconds 90 --logs DIR]

Everything on the core(s) it is started on (``taskset -c 1 ...``). Loopback only; stops what it
started by PID. Last line: one JSON object.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import httpx
import psutil
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from bench.common.cli import bench_parser
from bench.common.harness import PROXY_PY, REPO, free_port, server
from bench.common.prom import buckets, cpu_seconds, listener_pid, quantile, scrape, value
from bench.common.result import emit
from rlstack.common.contracts.atropos import GROUP_NAME_KEY

console = Console(stderr=True)
AGENT = REPO / "bench" / "shell_agent.sh"
GROUP_SIZE = 8
ENV_NAME = "scale"
SECRET = "bench-env-scale-secret"
LAG = "rlstack_env_event_loop_lag_seconds"

TEST_SH = """#!/bin/bash
# reward 1 when the agent's last answer ends on an even hex digit, 0 when odd; no answer: no reward file
mkdir -p /logs/verifier
answer=$(cat /app/answer.txt) || exit 1
case "${answer: -1}" in [02468ace]) echo 1 ;; *) echo 0 ;; esac > /logs/verifier/reward.txt
"""


def make_tasks(root: Path, count: int, agent_timeout: float) -> Path:
    """``count`` Harbor tasks (schema 1.1) whose verifier scores the shell agent's last answer."""
    for i in range(count):
        task = root / f"answer-{i}"
        (task / "environment").mkdir(parents=True)
        (task / "tests").mkdir()
        (task / "environment" / "Dockerfile").write_text("FROM debian:bookworm-slim\nWORKDIR /app\n")
        (task / "environment" / "notes.txt").write_text(f"task {i}\n")
        (task / "instruction.md").write_text(f"Write your answer to /app/answer.txt (task {i}).\n")
        (task / "tests" / "test.sh").write_text(TEST_SH)
        (task / "task.toml").write_text(f'schema_version = "1.1"\n\n[task]\nname = "bench/answer-{i}"\n\n'
                                        f'[agent]\ntimeout_sec = {agent_timeout:.0f}\n\n[verifier]\ntimeout_sec = 60.0\n')
    return root


def rss_mb(pid: int) -> float:
    return psutil.Process(pid).memory_info().rss / 2**20


def env_counts(url: str) -> tuple[dict, dict]:
    samples = scrape(url, timeout=120)  # a starved env server answers late; late is a figure, not a failure
    finished = {lbl["status"]: v for lbl, v in samples.get("rlstack_env_trials_finished_total", [])}
    return samples, {"active": value(samples, "rlstack_env_sandboxes_active"),
                     "started": value(samples, "rlstack_env_trials_started_total"), "finished": sum(finished.values()),
                     "statuses": finished, "posted": value(samples, "rlstack_env_groups_posted_total"),
                     "dropped": value(samples, "rlstack_env_groups_dropped_total")}


def core_ticks() -> tuple[float, float]:
    """(busy, total) CPU seconds of the cores this bench may run on: how full the shared core was."""
    cores = psutil.cpu_times(percpu=True)
    mine = [cores[i] for i in sorted(os.sched_getaffinity(0))]
    total = sum(sum(t) for t in mine)
    return total - sum(t.idle + t.iowait for t in mine), total


def lag_p99_ms(before: dict, after: dict) -> float | None:
    q = quantile(buckets(before, LAG), buckets(after, LAG), 0.99)
    return round(1000 * q, 2) if q is not None else None


def pull_groups(client: httpx.Client) -> list[str]:
    """As the trainer: every batch the batcher hands out now; the group names in them."""
    names = []
    while (batch := client.get("/batch").json().get("batch")) is not None:
        names += [(g.get("group_overrides") or {}).get(GROUP_NAME_KEY, "?") for g in batch]
    return names


def phase(label: str, trials: int, args: argparse.Namespace) -> dict:
    groups = math.ceil(trials / GROUP_SIZE)
    trials = groups * GROUP_SIZE
    console.rule(f"[bold]{label}: {trials} concurrent trials ({groups} groups of {GROUP_SIZE})")
    trial_s = (args.turns - 1) * args.tool_seconds
    with tempfile.TemporaryDirectory(prefix="env-scale-") as tmp_name, contextlib.ExitStack() as stack:
        tmp = Path(tmp_name)
        if args.logs is not None:  # registered first, so it runs last: after every server has stopped
            stack.callback(lambda: [shutil.copy2(log, _mkdir(args.logs / label)) for log in tmp.glob("*.log")])
        tasks = make_tasks(tmp / "tasks", args.tasks, agent_timeout=3 * trial_s + 600)
        ports = {name: free_port() for name in ("registry", "batcher", "proxy", "env")}
        sim_ports = [free_port() for _ in range(args.replicas)]
        py = sys.executable
        registry_url = stack.enter_context(server(
            [py, "-m", "rlstack.registry", "--port", str(ports["registry"]), "--log-level", "warning"],
            ports["registry"], "/readyz", tmp / "registry.log"))
        stack.enter_context(server(
            [py, str(REPO / "bench" / "sim_replica.py"), "--ports", ",".join(map(str, sim_ports)), "--registry-url", registry_url,
             "--ttft-ms", str(args.ttft_ms), "--tpot-ms", str(args.tpot_ms), "--completion-tokens", str(args.completion_tokens)],
            sim_ports[0], "/health", tmp / "sims.log"))
        batcher_url = stack.enter_context(server(
            [py, "-m", "rlstack.batcher", "--port", str(ports["batcher"]), "--data-dir", str(tmp / "batcher"), "--log-level", "warning"],
            ports["batcher"], "/healthz", tmp / "batcher.log"))
        with console.status("starting the proxy"):
            proxy_url = stack.enter_context(server(
                [str(PROXY_PY), "-m", "rlstack.proxy", "--port", str(ports["proxy"]), "--registry-url", registry_url,
                 "--trials-dir", str(tmp / "trials"), "--trial-key-secret", SECRET, "--log-level", "warning"],
                ports["proxy"], "/readyz", tmp / "proxy.log", timeout=180))
        agent = f"/bin/sh {AGENT} {args.turns} {args.tool_seconds:g} {args.completion_tokens}"
        env_cmd = [py, "-m", "rlstack.envs", "--port", str(ports["env"]), "--task", "harbor", "--tasks-dir", str(tasks),
                   "--agent.command", agent, "--name", ENV_NAME, "--batcher-url", batcher_url, "--proxy-url", proxy_url,
                   "--registry-url", registry_url, "--trial-key-secret", SECRET, "--trials-dir", str(tmp / "trials"),
                   "--group-size", str(GROUP_SIZE), "--workers", str(groups), "--max-concurrent-trials", str(trials),
                   "--max-staleness", "0", "--max-token-length", "32768", "--sandbox.environment", "host"]
        env_url = stack.enter_context(server(env_cmd, ports["env"], "/healthz", tmp / "env.log"))
        env_pid = listener_pid(ports["env"])
        time.sleep(2)
        idle = [rss_mb(env_pid) for _ in range(3) if time.sleep(0.3) is None]
        idle_rss = min(idle)
        mem_idle = psutil.virtual_memory().used / 2**20
        console.print(f"  env server idle: {idle_rss:.0f} MB RSS (waiting for a trainer)")

        trainer = stack.enter_context(httpx.Client(base_url=batcher_url, timeout=60))
        trainer.post("/register", json={"batch_size": trials, "max_token_len": 32768, "batch_fill": "at_least",
                                        "num_steps": 1000}).raise_for_status()
        trainer.get("/batch").raise_for_status()  # Atropos takes envs only after the trainer's first poll
        before, _ = env_counts(env_url)
        started, cpu0, core0 = time.monotonic(), cpu_seconds(env_pid), core_ticks()
        slowest_scrape = 0.0
        peak = {"active": 0.0, "rss": idle_rss, "mem": mem_idle, "at_s": 0.0}
        plateau: dict[str, dict] = {}
        deadline = started + 3 * trial_s + 900
        with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.fields[state]}"), TimeElapsedColumn(),
                      console=console) as progress:
            bar = progress.add_task(f"{trials} trials", total=trials, state="")
            while True:
                asked = time.monotonic()
                samples, c = env_counts(env_url)
                slowest_scrape = max(slowest_scrape, time.monotonic() - asked)
                rss, mem = rss_mb(env_pid), psutil.virtual_memory().used / 2**20
                if c["active"] > peak["active"] or (c["active"] == peak["active"] and rss > peak["rss"]):
                    peak = {"active": c["active"], "rss": rss, "mem": mem, "at_s": round(time.monotonic() - started, 1)}
                if c["active"] >= 0.95 * trials and "start" not in plateau:
                    plateau["start"] = samples
                elif "start" in plateau and c["active"] < 0.95 * trials and "end" not in plateau:
                    plateau["end"] = samples
                progress.update(bar, completed=c["finished"], state=f"running {c['active']:.0f}, started {c['started']:.0f}, "
                                f"groups posted {c['posted']:.0f}, env RSS {rss:.0f} MB, machine {mem / 1024:.1f} GB")
                if c["started"] >= trials and c["finished"] >= c["started"] and c["posted"] + c["dropped"] >= groups:
                    break
                if time.monotonic() > deadline:
                    console.print("[red]  deadline passed with trials still running[/red]")
                    break
                if psutil.virtual_memory().available < args.min_free_mb * 2**20:
                    console.print(f"[red]  under {args.min_free_mb} MB of memory left: stopping before the machine runs out[/red]")
                    break
                time.sleep(args.sample_seconds)
        wave_s = time.monotonic() - started
        env_cpu, core1 = cpu_seconds(env_pid) - cpu0, core_ticks()
        after, c = env_counts(env_url)
        time.sleep(1)
        pulled = pull_groups(trainer)
        queued = trainer.get("/status").json().get("queue_size", 0)
        results = list((tmp / "trials").glob("local/*/result.json"))
        statuses = Counter(json.loads(p.read_text()).get("status") for p in results)
        group_dirs = {p.parent.name.rsplit("-t", 1)[0] for p in results}
        dropped_why = [line.split("group dropped: ", 1)[1][:300] for line in (tmp / "env.log").read_text().splitlines()
                       if "group dropped: " in line][:3]
        thread_breaks = value(after, "rlstack_env_thread_breaks_total")
        merged = value(after, "rlstack_env_calls_merged_total")
    lost_trials = int(c["started"] - c["finished"])
    lost_groups = len(group_dirs) - len(set(pulled)) - int(queued) - int(c["dropped"])
    out = {"trials": trials, "groups": groups, "turns": args.turns, "tool_seconds": args.tool_seconds, "wave_s": round(wave_s, 1),
           "peak_active": int(peak["active"]), "peak_at_s": peak["at_s"], "idle_rss_mb": round(idle_rss, 1),
           "peak_rss_mb": round(peak["rss"], 1), "rss_kb_per_trial": round(1024 * (peak["rss"] - idle_rss) / max(peak["active"], 1), 1),
           "machine_mb_per_trial": round((peak["mem"] - mem_idle) / max(peak["active"], 1), 2),
           "env_cpu_ms_per_trial": round(1000 * env_cpu / trials, 1), "env_core_share": round(env_cpu / wave_s, 3),
           "core_busy": round((core1[0] - core0[0]) / max(core1[1] - core0[1], 1), 3),
           "slowest_metrics_scrape_s": round(slowest_scrape, 2),
           "loop_lag_p99_ms": lag_p99_ms(before, after),
           "plateau_loop_lag_p99_ms": lag_p99_ms(plateau["start"], plateau.get("end", after)) if "start" in plateau else None,
           "ramp_loop_lag_p99_ms": lag_p99_ms(before, plateau["start"]) if "start" in plateau else None,
           "drain_loop_lag_p99_ms": lag_p99_ms(plateau["end"], after) if "end" in plateau else None,
           "trials_started": int(c["started"]), "trials_finished": int(c["finished"]), "statuses": c["statuses"],
           "result_files": dict(statuses), "groups_posted": int(c["posted"]), "groups_dropped": int(c["dropped"]), "dropped_why": dropped_why,
           "groups_on_disk": len(group_dirs), "groups_at_batcher": len(set(pulled)) + int(queued),
           "calls_merged": int(merged), "thread_breaks": int(thread_breaks), "lost_trials": lost_trials, "lost_groups": lost_groups}
    console.print(f"  {out['peak_active']} at once (at {out['peak_at_s']} s), env RSS {out['idle_rss_mb']} -> {out['peak_rss_mb']} MB "
                  f"({out['rss_kb_per_trial']} kB/trial), loop lag p99 {out['loop_lag_p99_ms']} ms "
                  f"(plateau {out['plateau_loop_lag_p99_ms']}), lost trials {lost_trials}, lost groups {lost_groups}")
    return out


def _mkdir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


def ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 2) if a is not None and b else None


def main() -> None:
    parser = bench_parser(__doc__)
    parser.add_argument("--trials", type=int, default=1000, help="concurrent trials (rounded up to whole groups of 8)")
    parser.add_argument("--base-trials", type=int, default=48)
    parser.add_argument("--turns", type=int, default=4, help="model calls per trial")
    parser.add_argument("--tool-seconds", type=float, default=90.0, help="mean tool time between calls")
    parser.add_argument("--tasks", type=int, default=16)
    parser.add_argument("--replicas", type=int, default=4)
    parser.add_argument("--ttft-ms", type=float, default=50.0)
    parser.add_argument("--tpot-ms", type=float, default=2.0)
    parser.add_argument("--completion-tokens", type=int, default=16)
    parser.add_argument("--sample-seconds", type=float, default=1.0)
    parser.add_argument("--logs", type=Path, default=None, help="copy every service's log here (one folder per phase)")
    parser.add_argument("--min-free-mb", type=int, default=1500, help="stop the wave if the machine has less memory available")
    args = parser.parse_args()
    if not PROXY_PY.exists():
        sys.exit("missing .venv-proxy: run `make setup` first")

    base = phase("baseline", args.base_trials, args)
    full = phase("full", args.trials, args)
    ratios = {"loop_lag_p99": ratio(full["loop_lag_p99_ms"], base["loop_lag_p99_ms"]),
              "plateau_loop_lag_p99": ratio(full["plateau_loop_lag_p99_ms"], base["plateau_loop_lag_p99_ms"]),
              "ramp_loop_lag_p99": ratio(full["ramp_loop_lag_p99_ms"], base["ramp_loop_lag_p99_ms"]),
              "drain_loop_lag_p99": ratio(full["drain_loop_lag_p99_ms"], base["drain_loop_lag_p99_ms"]),
              "rss_per_trial": ratio(full["rss_kb_per_trial"], base["rss_kb_per_trial"]),
              "machine_per_trial": ratio(full["machine_mb_per_trial"], base["machine_mb_per_trial"])}
    table = Table(title=f"one env server: {full['trials']} vs {base['trials']} concurrent trials "
                        f"({args.turns} calls, ~{args.tool_seconds:g} s tool time between)")
    for col in ("figure", "baseline", "full", "ratio"):
        table.add_column(col, justify="right")
    table.add_row("peak concurrent trials", str(base["peak_active"]), str(full["peak_active"]), "")
    table.add_row("event-loop lag p99, whole wave (ms)", str(base["loop_lag_p99_ms"]), str(full["loop_lag_p99_ms"]), str(ratios["loop_lag_p99"]))
    table.add_row("event-loop lag p99, plateau (ms)", str(base["plateau_loop_lag_p99_ms"]), str(full["plateau_loop_lag_p99_ms"]),
                  str(ratios["plateau_loop_lag_p99"]))
    for phase_name in ("ramp", "drain"):
        table.add_row(f"event-loop lag p99, {phase_name} (ms)", str(base[f"{phase_name}_loop_lag_p99_ms"]),
                      str(full[f"{phase_name}_loop_lag_p99_ms"]), str(ratio(full[f"{phase_name}_loop_lag_p99_ms"], base[f"{phase_name}_loop_lag_p99_ms"])))
    table.add_row("env server RSS per trial (kB)", str(base["rss_kb_per_trial"]), str(full["rss_kb_per_trial"]), str(ratios["rss_per_trial"]))
    table.add_row("machine memory per trial (MB)", str(base["machine_mb_per_trial"]), str(full["machine_mb_per_trial"]),
                  str(ratios["machine_per_trial"]))
    table.add_row("env server CPU per trial (ms)", str(base["env_cpu_ms_per_trial"]), str(full["env_cpu_ms_per_trial"]),
                  str(ratio(full["env_cpu_ms_per_trial"], base["env_cpu_ms_per_trial"])))
    table.add_row("shared core busy over the wave", str(base["core_busy"]), str(full["core_busy"]), "")
    table.add_row("slowest /metrics answer (s)", str(base["slowest_metrics_scrape_s"]), str(full["slowest_metrics_scrape_s"]), "")
    table.add_row("trials lost / groups lost", f"{base['lost_trials']} / {base['lost_groups']}", f"{full['lost_trials']} / {full['lost_groups']}", "")
    table.add_row("wave wall time (s)", str(base["wave_s"]), str(full["wave_s"]), "")
    Console().print(table)
    emit("env_scale", args, {"baseline": base, "full": full}, ratios)


if __name__ == "__main__":
    main()
