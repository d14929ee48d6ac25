"""The fault run: a short agent run with every service SIGKILLed at several moments, against the same run unfaulted.

Both runs are ``examples/local-agent.yaml`` (registry, batcher, one vLLM replica behind its
sidecar, proxy, trainer, agent env server with the built-in agent in bubblewrap sandboxes),
shortened (``--steps``, ``--batch-size``, a checkpoint every ``--checkpoint-every`` steps, no
evaluations), under ``rlstack up``'s own supervisor, which restarts what dies. The faulted run
kills each target at each moment (``--moments``), one kill at a time:

    registry, batcher, proxy  the process group (what a pod's death does)
    vllm                      the vLLM server's process group, not its sidecar
    inference                 the sidecar alone (an OOM kill of one process; its vLLM lives on)
    env                       the env server's group (its sandboxes die with it: --die-with-parent)
    trainer                   the trainer's group

    step      at a random moment within 15 s after a trainer step
    trials    while agent trials are in flight (the env's rlstack_env_sandboxes_active > 0)
    backlog   while the env holds back on a full backlog (the batcher's /progress says so)

A moment not met within ``--moment-timeout`` seconds is killed at anyway and marked so in the
table. After each kill it waits for the service to be back and the trainer one step further.
After each run it checks and prints: the run finished its steps; where each finished trial went
(``rlstack.ops.ledger``: trained once, abandoned with a reason, ... lost, which must be 0); the
groups the batcher acknowledged and lost (0); the trainer's final weight version against every
replica's; the restarts. The reward curves of both runs go to one plot (``--plot``).

    python -m bench.faults [--steps 64] [--seed 0] [--plot docs/img/fault-run.png] [--skip-baseline]

Needs models/agent-demo and data/agent-tasks (``make run-agent`` builds them). Loopback only;
never beside another vLLM on this machine. Last line: one JSON object with every figure.
"""

from __future__ import annotations

import json
import logging
import os
import random
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from bench.common.cli import bench_parser
from bench.common.result import emit, stored_figures
from rlstack.common.auth import bearer
from rlstack.launcher.config import RunConfig
from rlstack.launcher.progress import wait_for
from rlstack.launcher.supervisor import ServiceFailed, Supervisor
from rlstack.ops.ledger import FATES, audit
from rlstack.trainer.report import StepRecord, read_lines

REPO = Path(__file__).resolve().parents[1]
TARGETS = ("registry", "batcher", "proxy", "vllm", "inference", "env", "trainer")
MOMENTS = ("step", "trials", "backlog")
log = logging.getLogger("faults")


def set_flag(args: list[str], flag: str, value: str | None) -> list[str]:
    """``args`` with ``flag`` given ``value`` (added when absent); None removes the flag and its value."""
    out = list(args)
    if flag in out:
        i = out.index(flag)
        del out[i:i + 2]
    return out if value is None else [*out, flag, value]


def run_config(name: str, runs_dir: Path, steps: int, batch_size: int, checkpoint_every: int, seed: int) -> RunConfig:
    config = RunConfig.load(REPO / "examples" / "local-agent.yaml")
    for spec in config.services:
        if spec.name == "trainer":
            for flag, value in (("--steps", str(steps)), ("--batch-size", str(batch_size)),
                                ("--checkpoint-every", str(checkpoint_every)), ("--seed", str(seed)),
                                ("--evaluation.url", None), ("--evaluation.every", None)):
                spec.args = set_flag(spec.args, flag, value)
        if spec.name == "env":
            spec.args = set_flag(set_flag(spec.args, "--seed", str(seed)), "--heldout-size", "0")
    return config.model_copy(update={"name": name, "runs_dir": runs_dir})


class RunOver(Exception):
    """The faulted run finished its steps while kills were still waiting for their turn."""


@dataclass
class Kill:
    target: str
    after_step: int
    moment: str = "step"
    reached: bool = True
    """False when ``moment`` did not come within the timeout and the kill went ahead anyway."""
    done: bool = False
    """False when the run ended before this kill's turn came (its moments came late)."""
    at_step: int = 0
    pid: int = 0
    back_after_s: float | None = None
    """Seconds until the killed service answered ready again (its restart by the supervisor)."""


@dataclass
class Chaos:
    """Kills each target once, in turn, from a thread beside the supervisor's wait."""

    supervisor: Supervisor
    kills: list[Kill]
    rng: random.Random
    max_jitter_s: float = 15.0
    moment_timeout_s: float = 240.0
    error: str | None = None
    done: threading.Event = field(default_factory=threading.Event)

    def trainer_step(self) -> int:
        svc = self.supervisor.running["trainer"]
        try:
            r = httpx.get(svc.url + "/status", timeout=2, headers=bearer(self.supervisor.token("trainer")))
            return int(r.json().get("step", 0))
        except (httpx.HTTPError, ValueError):
            return -1

    def wait_step(self, step: int, timeout_s: float = 1800) -> int:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and not self.done.is_set():
            now = self.trainer_step()
            if now >= step:
                return now
            time.sleep(1)
        if self.done.is_set():
            raise RunOver
        raise TimeoutError(f"the trainer did not reach step {step}")

    def run(self) -> None:
        try:
            for kill in self.kills:
                self.wait_step(kill.after_step)
                kill.reached = self.wait_moment(kill.moment)
                kill.at_step = max(self.trainer_step(), kill.after_step)
                service = "inference" if kill.target == "vllm" else kill.target
                before = self.supervisor.running[service].proc.pid
                kill.pid = self.kill(kill.target)
                started = time.monotonic()
                log.warning("killed %s (pid %d) after step %d, %s%s", kill.target, kill.pid, kill.at_step, kill.moment,
                            "" if kill.reached else " (not reached: killed anyway)")
                kill.done = True
                self.wait_back(service, before)
                kill.back_after_s = round(time.monotonic() - started, 1)
                log.warning("%s back after %.0fs", kill.target, kill.back_after_s)
                self.wait_step(self.trainer_step() + 1)
        except RunOver:  # the kills left are counted as not done
            log.warning("the run ended with %d kill(s) not done", sum(not k.done for k in self.kills))
        except Exception as exc:  # reported with the run, which goes on unfaulted
            self.error = f"{type(exc).__name__}: {exc}"
            log.error("chaos stopped: %s", self.error)

    def wait_moment(self, moment: str) -> bool:
        """Until ``moment`` holds; False when it did not within ``moment_timeout_s``."""
        if moment == "step":
            time.sleep(self.rng.uniform(0, self.max_jitter_s))
            return True
        test = self.trials_in_flight if moment == "trials" else self.env_backlog_full
        deadline = time.monotonic() + self.moment_timeout_s
        while time.monotonic() < deadline and not self.done.is_set():
            if test():
                return True
            time.sleep(0.2)
        return False

    def trials_in_flight(self) -> bool:
        env = self.supervisor.running["env"]
        try:
            text = httpx.get(env.url + "/metrics", timeout=2).text
        except httpx.HTTPError:
            return False
        return any(line.startswith("rlstack_env_sandboxes_active{") and float(line.split()[-1]) > 0 for line in text.splitlines())

    def env_backlog_full(self) -> bool:
        batcher = self.supervisor.running["batcher"]
        try:
            report = httpx.get(batcher.url + "/progress", timeout=2, headers=bearer(self.supervisor.token("batcher"))).json()
        except (httpx.HTTPError, ValueError):
            return False
        return any(e.get("live") and e.get("holding_back") == "backlog" for e in report.get("envs", []))

    def kill(self, target: str) -> int:
        if target == "vllm":
            pid = vllm_pid(self.supervisor.running["inference"].proc.pid)
            os.killpg(pid, signal.SIGKILL)
            return pid
        pid = self.supervisor.running[target].proc.pid
        if target == "inference":
            os.kill(pid, signal.SIGKILL)
        else:
            os.killpg(pid, signal.SIGKILL)
        return pid

    def wait_back(self, name: str, old_pid: int, timeout_s: float = 900) -> None:
        """Until the supervisor has started ``name`` again (a new pid) and it answers ready; for the
        replica, until the registry lists a ready one too."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            svc = self.supervisor.running[name]
            if svc.proc.pid != old_pid and svc.proc.poll() is None:
                try:
                    ready = httpx.get(svc.url + svc.spec.ready_path, timeout=2).status_code == 200
                except httpx.HTTPError:
                    ready = False
                if ready and (name != "inference" or self.replica_ready()):
                    return
            time.sleep(0.5)
        raise TimeoutError(f"{name} did not come back in {timeout_s:.0f}s")

    def replica_ready(self) -> bool:
        try:
            return bool(replica_versions(self.supervisor))
        except (httpx.HTTPError, ValueError, KeyError):
            return False


def vllm_pid(sidecar: int) -> int:
    """The vLLM server the sidecar started (a child in a session of its own)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == sidecar:
            return int(stat.parent.name)
    raise RuntimeError(f"no vLLM process under the sidecar {sidecar}")


def replica_versions(supervisor: Supervisor) -> list[int | None]:
    registry = supervisor.running["registry"].url
    r = httpx.get(f"{registry}/v1/endpoints", timeout=5, headers=bearer(supervisor.token("registry")))
    return [e.get("weight_version") for e in r.json()["endpoints"] if e["ready"]]


def one_run(config: RunConfig, faults: list[Kill] | None, seed: int, moment_timeout_s: float = 240.0) -> dict:
    from rlstack.cli.stack import make_run_dir

    run_dir = make_run_dir(config.runs_dir, config.name)
    supervisor = Supervisor(config, run_dir)
    chaos = Chaos(supervisor, faults, random.Random(seed), moment_timeout_s=moment_timeout_s) if faults else None
    started = time.monotonic()
    versions: list[int | None] = []
    failure = None
    try:
        supervisor.start_all()
        thread = threading.Thread(target=chaos.run, name="chaos", daemon=True) if chaos else None
        if thread:
            thread.start()
        wait_for(supervisor, "trainer")
        versions = replica_versions(supervisor)
    except ServiceFailed as exc:
        failure = str(exc).splitlines()[0]
        log.error("run failed: %s", failure)
    except KeyboardInterrupt:
        failure = "interrupted"
        raise
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not orphan the services
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        if chaos:
            chaos.done.set()
        supervisor.stop_all()
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, _interrupt)
    return {**summarize(run_dir, config_steps(config)), "seconds": round(time.monotonic() - started), "failure": failure,
            "replica_weight_versions": versions, "kills": [k.__dict__ for k in faults] if faults else [],
            "chaos_error": chaos.error if chaos else None}


def summarize(run_dir: Path, steps_asked: int) -> dict:
    """What a finished run left on disk: its steps, rewards, ledger and restarts."""
    steps = read_lines(run_dir / "metrics.jsonl", StepRecord)
    ledger = audit(run_dir / "trials", run_dir / "env-journal", run_dir / "batcher" / "batcher.wal", run_dir / "metrics.jsonl")
    restarts_path = run_dir / "restarts.json"
    return {
        "run_dir": str(run_dir), "steps_done": len({s.step for s in steps}), "steps": steps_asked,
        "rewards": [s.reward_mean for s in sorted(steps, key=lambda s: s.step)],
        "trainer_weight_version": steps[-1].weight_version if steps else None,
        "ledger": ledger.model_dump(), "ledger_ok": ledger.ok,
        "restarts": json.loads(restarts_path.read_text()) if restarts_path.exists() else {},
        "failure": None, "replica_weight_versions": [], "kills": [], "chaos_error": None, "seconds": None,
    }


def config_steps(config: RunConfig) -> int:
    args = next(s for s in config.services if s.name == "trainer").args
    return int(args[args.index("--steps") + 1])


def table(runs: dict[str, dict]) -> str:
    names = list(runs)
    rows = [("steps done / asked", lambda r: f"{r['steps_done']} / {r['steps']}"),
            ("kills done / planned", lambda r: f"{sum(k.get('done', True) for k in r['kills'])} / {len(r['kills'])}" if r["kills"] else "none"),
            ("kills at their moment (of those done)", lambda r: ", ".join(
                f"{m} {sum(k['reached'] for k in r['kills'] if k.get('moment', 'step') == m and k.get('done', True))}"
                f"/{sum(k.get('moment', 'step') == m and k.get('done', True) for k in r['kills'])}"
                for m in MOMENTS if any(k.get("moment", "step") == m for k in r["kills"])) or "none"),
            ("longest time until back", lambda r: ", ".join(
                f"{t} {max(k['back_after_s'] or 0 for k in r['kills'] if k['target'] == t)} s"
                for t in TARGETS if any(k["target"] == t and k.get("done", True) for k in r["kills"])) or "none"),
            ("restarts", lambda r: ", ".join(f"{n} {v['restarts']}" for n, v in r["restarts"].items()) or "none"),
            *[(f"finished trials: {fate}", lambda r, f=fate: str(r["ledger"]["trials"][f])) for fate in FATES],
            ("groups acknowledged by the batcher", lambda r: str(r["ledger"]["groups_acknowledged"])),
            ("acknowledged groups lost", lambda r: str(len(r["ledger"]["groups_acknowledged_lost"]))),
            ("trainer weight version / replicas'", lambda r: f"{r['trainer_weight_version']} / {r['replica_weight_versions']}"),
            ("mean reward, first 5 / last 5 steps", lambda r: f"{mean(r['rewards'][:5]):.3f} / {mean(r['rewards'][-5:]):.3f}"),
            ("wall time", lambda r: f"{r['seconds']} s" if r["seconds"] is not None else "(an earlier run)")]
    lines = [f"| | {' | '.join(names)} |", "|---|" + "---|" * len(names)]
    lines += [f"| {label} | {' | '.join(cell(runs[n]) for n in names)} |" for label, cell in rows]
    return "\n".join(lines)


def mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else float("nan")


def plot(runs: dict[str, dict], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4))
    for (name, run), color in zip(runs.items(), ("#36a", "#d80")):
        steps = range(1, len(run["rewards"]) + 1)
        ax.plot(steps, run["rewards"], color=color, alpha=0.3, marker=".", linewidth=0.8)
        window = [mean(run["rewards"][max(0, i - 3):i + 1]) for i in range(len(run["rewards"]))]
        ax.plot(steps, window, color=color, linewidth=2, label=f"{name} (mean of 4 steps)")
    for kill in [k for k in runs.get("faulted", {}).get("kills", []) if k.get("done", True)]:
        ax.axvline(kill["at_step"] + 0.5, color="#c44", alpha=0.35, linestyle="--")
        ax.annotate(f"{kill['target']} ({kill.get('moment', 'step')})", (kill["at_step"] + 0.5, ax.get_ylim()[1]), rotation=90, va="top", ha="right", fontsize=8, color="#c44")
    ax.set_xlabel("trainer step")
    ax.set_ylabel("mean reward of the step's batch")
    ax.set_title("Agent run with each service SIGKILLed at several moments (dashed) vs the same seed unfaulted", fontsize=10)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main() -> int:
    signal.signal(signal.SIGTERM, _interrupt)  # `kill` stops the services too, as Ctrl-C does
    parser = bench_parser(__doc__)
    parser.add_argument("--steps", type=int, default=64, help="enough for 21 kills: a kill waits for its moment, its "
                        "service's return and one more step; at 56 steps the last of 21 did not come (2026-11-27)")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--checkpoint-every", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--targets", default=",".join(TARGETS))
    parser.add_argument("--moments", default=",".join(MOMENTS), help="when to kill each target: step, trials, backlog")
    parser.add_argument("--moment-timeout", type=float, default=240.0, help="seconds to wait for a moment before killing anyway")
    parser.add_argument("--runs-dir", type=Path, default=REPO / "runs" / "faults")
    parser.add_argument("--plot", type=Path, default=None)
    parser.add_argument("--replot", type=Path, default=None, help="draw --plot from a --json-out file and run nothing")
    parser.add_argument("--skip-baseline", action="store_true")
    parser.add_argument("--baseline-dir", type=Path, default=None, help="an unfaulted run of the same flags, done before: read, not run again")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    if args.replot is not None:
        plot({k: v for k, v in stored_figures(args.replot)[-1].items() if k != "ok"}, args.plot or Path("fault-run.png"))
        return 0
    targets = [t for t in args.targets.split(",") if t]
    unknown = sorted(set(targets) - set(TARGETS))
    if unknown:
        parser.error(f"--targets: unknown {unknown}; choose from {','.join(TARGETS)}")
    moments = [m for m in args.moments.split(",") if m]
    if sorted(set(moments) - set(MOMENTS)):
        parser.error(f"--moments: choose from {','.join(MOMENTS)}")
    plan = [(t, m) for m in moments for t in targets]
    first, last = 2, max(3, args.steps - 4)
    kills = [Kill(t, first + round(i * (last - first) / max(1, len(plan) - 1)), moment=m) for i, (t, m) in enumerate(plan)]
    runs: dict[str, dict] = {}
    if args.baseline_dir is not None:
        runs["unfaulted"] = summarize(args.baseline_dir, args.steps)
    elif not args.skip_baseline:
        runs["unfaulted"] = one_run(run_config("faults-baseline", args.runs_dir, args.steps, args.batch_size, args.checkpoint_every, args.seed),
                                    None, args.seed)
    runs["faulted"] = one_run(run_config("faults", args.runs_dir, args.steps, args.batch_size, args.checkpoint_every, args.seed),
                              kills, args.seed, args.moment_timeout)
    print(table(runs))
    if args.plot:
        plot(runs, args.plot)
        print(args.plot)
    faulted = runs["faulted"]
    ok = (faulted["failure"] is None and faulted["chaos_error"] is None and faulted["steps_done"] == faulted["steps"]
          and all(k["done"] for k in faulted["kills"])
          and faulted["ledger_ok"] and set(faulted["replica_weight_versions"]) == {faulted["trainer_weight_version"]})
    emit("faults", args, {"ok": ok, **runs})  # --json-out keeps it: --replot redraws the plot from it
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
