"""The ``rlstack`` command: ``rlstack up CONFIG`` runs a stack of services locally.

Subcommands import their heavy parts lazily so ``rlstack --help`` answers at once.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from rlstack.common.logs import configure_logging
from rlstack.common.names import SERVED_MODEL_NAME

log = logging.getLogger("rlstack")
WARM_START_STEPS = 300  # WarmStartSpec's default, kept here so --help needs no torch import
AGENT_DEMO_FAMILIES = ("sum-numbers", "count-lines", "uppercase", "json-port")
"""What the CPU agent run trains on: the families whose solution the warm-started 3.6M-parameter
policy sometimes gets right. Copying numbers or words out of the instruction (multiply,
write-greeting) or a line out of an observation (fix) stays at 0 at this size: groups of 0 only."""


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def make_run_dir(runs_dir: Path, name: str) -> Path:
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    run_dir = runs_dir / f"{name}-{stamp}"
    run_dir.mkdir(parents=True, exist_ok=True)
    latest = runs_dir / "latest"
    if latest.is_symlink() or latest.exists():
        latest.unlink()
    latest.symlink_to(run_dir.name)
    return run_dir


def cmd_up(args: argparse.Namespace) -> int:
    from rlstack.launcher.config import RunConfig
    from rlstack.launcher.health import print_health, smoke_check
    from rlstack.launcher.progress import wait_for
    from rlstack.launcher.supervisor import ServiceFailed, Supervisor

    config = RunConfig.load(args.config)
    run_dir = make_run_dir(config.runs_dir, config.name)
    supervisor = Supervisor(config, run_dir)
    signal.signal(signal.SIGTERM, _raise_interrupt)
    code = 0
    try:
        supervisor.start_all()
        print_health(supervisor)
        if args.check:
            smoke_check(supervisor)
        elif config.until:
            wait_for(supervisor, config.until)
            show_summary(run_dir)
        else:
            log.info("stack up; logs under %s; Ctrl-C to stop", run_dir / "logs")
            while True:
                supervisor.check_alive()
                time.sleep(1)
    except ServiceFailed as exc:
        log.error("%s", exc)
        code = 1
    except KeyboardInterrupt:
        log.info("stopping")
    finally:
        # A second Ctrl-C or SIGTERM must not cut the shutdown short and orphan services.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        codes = supervisor.stop_all()
        log.info("stopped: %s", ", ".join(f"{n}={c}" for n, c in codes.items()))
    return code


def show_summary(run_dir: Path) -> None:
    """The trainer's summary, with the launcher's restarts added (``{}``: none died)."""
    import json

    summary = run_dir / "summary.json"
    if summary.exists():
        data = json.loads(summary.read_text())
        restarts = run_dir / "restarts.json"
        data["restarts"] = json.loads(restarts.read_text()) if restarts.exists() else {}
        summary.write_text(json.dumps(data, indent=2) + "\n")
        log.info("run finished: %s", run_dir)
        print(json.dumps(data, indent=2))


def built_once(out: Path, what: str, force: bool, built: bool, build: Callable[[], None]) -> int:
    """Run ``build`` into ``out`` unless ``built`` says it is there already (``--force`` rebuilds)."""
    if built and not force:
        log.info("%s already holds the %s (use --force to rebuild)", out, what)
        return 0
    build()
    log.info("%s written to %s", what, out)
    return 0


def tiny_model_with(out: Path, stamp: str) -> bool:
    """A current tiny model in ``out`` whose warm start left ``stamp`` beside it."""
    from rlstack.modelkit.tiny import is_current

    return is_current(out) and (out / stamp).exists()


def cmd_make_tiny_model(args: argparse.Namespace) -> int:
    from rlstack.modelkit.tiny import TinyModelSpec, build_tiny_model, is_current

    spec = TinyModelSpec(max_position_embeddings=args.max_position_embeddings, seed=args.seed)
    return built_once(args.out, "tiny model", args.force, is_current(args.out), lambda: build_tiny_model(args.out, spec))


def cmd_make_demo_model(args: argparse.Namespace) -> int:
    """The tiny model plus the supervised warm start on arithmetic: what `make run` trains."""
    from rlstack.modelkit.tiny import TinyModelSpec, build_tiny_model
    from rlstack.modelkit.warm_start import WarmStartSpec, warm_start

    def build() -> None:
        build_tiny_model(args.out, TinyModelSpec(seed=args.seed))
        warm_start(args.out, WarmStartSpec(steps=args.steps, max_seconds=args.max_seconds, seed=args.seed))

    return built_once(args.out, "demo model", args.force, tiny_model_with(args.out, "rlstack-warm-start.json"), build)


def write_training_tasks(args: argparse.Namespace) -> None:
    """The generated tasks a demo agent trains on (``--tasks-out``), unless they are there already."""
    from rlstack.episodes.harbor.make_tasks import generate, write_readme, write_task

    if not (args.tasks_out / "README.md").exists() or args.force:
        tasks = generate(args.tasks, args.task_seed, tuple(args.families.split(",")))
        args.tasks_out.mkdir(parents=True, exist_ok=True)
        for spec in tasks:
            write_task(spec, args.tasks_out)
        write_readme(tasks, args.tasks_out)
        log.info("%d training tasks written to %s", len(tasks), args.tasks_out)


def cmd_make_agent_demo(args: argparse.Namespace) -> int:
    """The tiny model plus a warm start on tool-call transcripts, and the generated tasks it trains on."""
    from rlstack.modelkit.agent_warm_start import AgentWarmStartSpec, agent_warm_start
    from rlstack.modelkit.tiny import TinyModelSpec, build_tiny_model

    def build() -> None:
        build_tiny_model(args.out, TinyModelSpec(seed=args.seed))
        agent_warm_start(args.out, AgentWarmStartSpec(steps=args.steps, max_seconds=args.max_seconds, seed=args.seed))

    write_training_tasks(args)
    return built_once(args.out, "agent demo model", args.force, tiny_model_with(args.out, "rlstack-agent-warm-start.json"), build)


def cmd_make_cli_agent_demo(args: argparse.Namespace) -> int:
    """The tiny model warm-started on a CLI agent's own requests (captured through the proxy with the
    scripted teacher), and the generated tasks it trains on: what `make run-agent AGENT=<agent>` trains."""
    from rlstack.modelkit import cli_agent_demo as demo

    args.out = args.out or Path(f"models/{args.agent}-demo")
    args.tasks_out = args.tasks_out or Path(f"data/{args.agent}-tasks")
    capture_dir = args.capture_dir or Path(f"data/{args.agent}-capture")
    steps = args.steps if args.steps is not None else demo.DEFAULT_STEPS[args.agent]
    spec = demo.CliAgentDemoSpec(capture_tasks=args.capture_tasks, steps=steps, max_seconds=args.max_seconds, seed=args.seed)
    write_training_tasks(args)
    return built_once(args.out, f"{args.agent} demo model", args.force, demo.is_built(args.out),
                      lambda: demo.build_cli_agent_demo(args.out, {args.agent: capture_dir}, spec))


def cmd_ledger(args: argparse.Namespace) -> int:
    """Where every finished trial of a local agent run went (``rlstack.ops.ledger``); exit 1 if any was lost."""
    from rlstack.ops.ledger import audit

    run = args.run_dir
    ledger = audit(run / "trials", run / "env-journal", run / "batcher" / "batcher.wal", run / "metrics.jsonl")
    print(ledger.model_dump_json(indent=2))
    return 0 if ledger.ok else 1


def cmd_doctor(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from rlstack.ops.doctor import DoctorConfig, run_checks

    config = DoctorConfig(proxy_url=args.proxy_url, registry_url=args.registry_url, batcher_url=args.batcher_url,
                          served_model_name=args.served_model_name, trial_key=args.trial_key, run_prefix=args.run_prefix,
                          namespace=args.namespace, kube_api_url=args.kube_api_url, probe_image=args.probe_image,
                          run_dir=args.run_dir)
    checks = run_checks(config)
    table = Table(title="rlstack doctor")
    for col in ("check", "ok", "detail", "likely cause / remedy"):
        table.add_column(col, overflow="fold")
    for c in checks:
        table.add_row(c.name, "[green]yes[/]" if c.ok else "[red]NO[/]", c.detail, c.remedy)
    Console(width=160).print(table)
    return 0 if all(c.ok for c in checks) else 1


def cmd_dryrun(args: argparse.Namespace) -> int:
    import json

    from rich.console import Console
    from rich.table import Table

    from rlstack.ops.dryrun import run_dryrun

    plan, findings, memory = run_dryrun(args.config, args.model_dir)
    print(json.dumps({"plan": plan.model_dump(), "memory": memory}, indent=2))
    table = Table(title=f"rlstack dryrun {args.config}")
    for col in ("check", "ok", "detail"):
        table.add_column(col, overflow="fold")
    for f in findings:
        table.add_row(f.check, "[green]yes[/]" if f.ok else "[red]NO[/]", f.detail)
    Console(width=160).print(table)
    return 0 if all(f.ok for f in findings) else 1


def cmd_trial_key(args: argparse.Namespace) -> int:
    import os

    from rlstack.common.trial_keys import mint

    secret = args.secret or os.environ.get("RLSTACK_PROXY_TRIAL_KEY_SECRET")
    if not secret:
        log.error("no secret: pass --secret or set RLSTACK_PROXY_TRIAL_KEY_SECRET")
        return 2
    print(mint(secret, args.run, args.trial, ttl_seconds=args.ttl_seconds))
    return 0


def cmd_sandbox(args: argparse.Namespace) -> int:
    """One agent trial in a sandbox pod, pointed at the proxy: the cluster's end-to-end agent check."""
    import asyncio
    import os

    from rlstack.episodes.sandboxes.pods import (
        SandboxGone,
        SandboxManager,
        SandboxSpec,
        agent_env,
        run_once,
    )
    from rlstack.kube.connection import connect

    secret = args.secret or os.environ.get("RLSTACK_PROXY_TRIAL_KEY_SECRET")
    if secret:
        from rlstack.common.trial_keys import mint

        key = mint(secret, args.run, args.trial, ttl_seconds=args.timeout + 600)
    else:
        key = "open"  # a proxy without a trial-key secret accepts any key
    spec = SandboxSpec(trial=args.trial, image=args.image, command=args.cmd,
                       env=agent_env(args.proxy_url, args.run, args.trial, key))

    async def go() -> int:
        client = connect(args.kube_api_url, args.namespace)
        try:
            manager = SandboxManager(client, args.namespace or client.namespace, args.run)
            result, logs = await run_once(manager, spec, args.timeout, keep=args.keep)
        except TimeoutError:
            log.error("sandbox for %s/%s did not finish in %.0fs", args.run, args.trial, args.timeout)
            return 124
        except SandboxGone as exc:
            log.error("sandbox %s was deleted before it finished", exc)
            return 1
        finally:
            await client.close()
        sys.stdout.write(logs)
        log.info("sandbox %s: %s, exit code %s", result.name, result.phase, result.exit_code)
        return result.exit_code if result.exit_code is not None else int(result.phase != "Succeeded")

    return asyncio.run(go())


def cmd_trial(args: argparse.Namespace) -> int:
    """One trial of one task (starting a replica and the proxy for it unless --proxy-url is given)."""
    import json

    from pydantic import ValidationError

    from rlstack.common.process import ServiceFailed
    from rlstack.ops.trial import TrialInputError, TrialRequest, run_one, summary_lines

    try:
        request = TrialRequest(task_dir=args.task_dir, agent=args.agent, agent_command=args.agent_command, model=args.model,
                               trials_dir=args.trials_dir, proxy_url=args.proxy_url, trial_key_secret=args.trial_key_secret,
                               run=args.run, runs_dir=args.runs_dir, max_turns=args.max_turns, max_tokens=args.max_tokens,
                               temperature=args.temperature, agent_timeout_seconds=args.agent_timeout_seconds,
                               max_model_len=args.max_model_len)
        report = run_one(request)
    except (ValidationError, TrialInputError) as exc:
        log.error("%s", exc)
        return 2
    except ServiceFailed as exc:
        log.error("could not start the services for the trial: %s", exc)
        return 1
    print("\n".join(summary_lines(report)))
    print(json.dumps(report.model_dump(mode="json")), flush=True)
    return 0 if report.status == "ok" else 1


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="rlstack", description="RL post-training stack: local orchestration and tools")
    parser.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="start the services of a run config as local processes")
    up.add_argument("config", type=Path, nargs="?", default=Path("examples/local-foundation.yaml"))
    up.add_argument("--check", action="store_true", help="start, run the health chain and a smoke round trip, stop")
    up.set_defaults(func=cmd_up)
    tiny = sub.add_parser("make-tiny-model", help="build the demo tokenizer + tiny Qwen2 model (no download)")
    tiny.add_argument("--out", type=Path, default=Path("models/tiny"))
    tiny.add_argument("--max-position-embeddings", type=int, default=32768)
    tiny.add_argument("--seed", type=int, default=0)
    tiny.add_argument("--force", action="store_true", help="rebuild even if --out holds a model")
    tiny.set_defaults(func=cmd_make_tiny_model)
    demo = sub.add_parser("make-demo-model", help="tiny model + a short supervised warm start on arithmetic (what `make run` trains)")
    demo.add_argument("--out", type=Path, default=Path("models/demo"))
    demo.add_argument("--steps", type=int, default=WARM_START_STEPS)
    demo.add_argument("--max-seconds", type=float, default=1800, help="a stuck-machine guard; the steps define the policy")
    demo.add_argument("--seed", type=int, default=0)
    demo.add_argument("--force", action="store_true", help="rebuild even if --out holds the demo model")
    demo.set_defaults(func=cmd_make_demo_model)
    agent = sub.add_parser("make-agent-demo", help="tiny model + a warm start on tool-call transcripts, and generated "
                                                   "Harbor tasks (what `make run-agent` trains)")
    agent.add_argument("--out", type=Path, default=Path("models/agent-demo"))
    agent.add_argument("--tasks-out", type=Path, default=Path("data/agent-tasks"))
    agent.add_argument("--tasks", type=int, default=140, help="training tasks to generate")
    agent.add_argument("--task-seed", type=int, default=1)
    agent.add_argument("--families", default=",".join(AGENT_DEMO_FAMILIES),
                       help="task families to train on (the warm start covers all of make_tasks.FAMILIES)")
    agent.add_argument("--steps", type=int, default=60)
    agent.add_argument("--max-seconds", type=float, default=1800, help="a stuck-machine guard; the steps define the policy")
    agent.add_argument("--seed", type=int, default=0)
    agent.add_argument("--force", action="store_true", help="rebuild even if --out holds the model")
    agent.set_defaults(func=cmd_make_agent_demo)
    ccd = sub.add_parser("make-cli-agent-demo", help="tiny model warm-started on a CLI agent's captured requests, and "
                                                      "generated tasks (what `make run-agent AGENT=claude-code|codex|opencode` trains)")
    ccd.add_argument("--agent", choices=["claude-code", "codex", "opencode"], default="claude-code")
    ccd.add_argument("--out", type=Path, default=None, help="default models/<agent>-demo")
    ccd.add_argument("--tasks-out", type=Path, default=None, help="default data/<agent>-tasks")
    ccd.add_argument("--capture-dir", type=Path, default=None,
                     help="the agent's calls to the teacher, captured first when absent (default data/<agent>-capture)")
    ccd.add_argument("--capture-tasks", type=int, default=84, help="generated tasks the agent solves with the teacher")
    ccd.add_argument("--tasks", type=int, default=140, help="training tasks to generate")
    ccd.add_argument("--task-seed", type=int, default=1)
    ccd.add_argument("--families", default=",".join(AGENT_DEMO_FAMILIES))
    ccd.add_argument("--steps", type=int, default=None, help="warm-start steps (default: 70 for claude-code and opencode, 120 for codex)")
    ccd.add_argument("--max-seconds", type=float, default=1800, help="a stuck-machine guard; the steps define the policy")
    ccd.add_argument("--seed", type=int, default=0)
    ccd.add_argument("--force", action="store_true", help="rebuild even if --out holds the model")
    ccd.set_defaults(func=cmd_make_cli_agent_demo)
    ledger = sub.add_parser("ledger", help="where every finished trial of an agent run went: trained once, abandoned with "
                                           "a reason, still queued, or lost (exit 1 if any was lost or trained twice)")
    ledger.add_argument("run_dir", type=Path, nargs="?", default=Path("runs/latest"), help="a run directory of `rlstack up`")
    ledger.set_defaults(func=cmd_ledger)
    doctor = sub.add_parser("doctor", help="walk the health chain (proxy, replicas, batcher, GPUs, sandboxes) and explain failures")
    doctor.add_argument("--proxy-url", default="http://127.0.0.1:4000")
    doctor.add_argument("--registry-url", default="http://127.0.0.1:8100")
    doctor.add_argument("--batcher-url", default="http://127.0.0.1:8000")
    doctor.add_argument("--served-model-name", "--served-model", dest="served_model_name", default=SERVED_MODEL_NAME,
                        help="the name the replicas serve the policy under (--served-model: its old name)")
    doctor.add_argument("--trial-key", help="a key minted with `rlstack trial-key` when the proxy checks them")
    doctor.add_argument("--run-dir", type=Path, default=Path("runs/latest"),
                        help="a local run (rlstack up): names a service in a restart loop from its restarts.json")
    doctor.add_argument("--run-prefix", help="also check sandbox pods labelled harbor-run=<prefix> (needs cluster access)")
    doctor.add_argument("--namespace")
    doctor.add_argument("--kube-api-url", help="API server URL (e.g. from `kubectl proxy`); default: in-cluster or kubeconfig")
    doctor.add_argument("--probe-image", help="check that NetworkPolicies are enforced: a sandbox-labelled pod in this image "
                        "(with python3) must not reach vLLM's port (needs create/watch/delete on pods)")
    doctor.set_defaults(func=cmd_doctor)
    dry = sub.add_parser("dryrun", help="check a run config or values file against the model's config before starting anything")
    dry.add_argument("config", type=Path)
    dry.add_argument("--model-dir", help="a local copy of the model directory the config names (for values files)")
    dry.set_defaults(func=cmd_dryrun)
    key = sub.add_parser("trial-key", help="mint a trial key for the proxy (HMAC, no database)")
    key.add_argument("--run", required=True)
    key.add_argument("--trial", required=True)
    key.add_argument("--secret", help="defaults to $RLSTACK_PROXY_TRIAL_KEY_SECRET")
    key.add_argument("--ttl-seconds", type=float, default=3600)
    key.set_defaults(func=cmd_trial_key)
    one = sub.add_parser("trial", help="run one agent trial of one Harbor task and print what it did (JSON last line)")
    one.add_argument("task_dir", type=Path, help="a Harbor task directory (task.toml, instruction.md, tests/test.sh)")
    one.add_argument("--agent", default="builtin", choices=["builtin", "claude-code", "codex", "opencode", "oracle", "nop"],
                     help="oracle runs solution/solve.sh, nop does nothing: neither calls a model")
    one.add_argument("--agent-command", help="any agent as a command line, e.g. 'mini -y -t {instruction}' "
                                             "({instruction}: a word of its own); it finds the proxy in OPENAI_BASE_URL / ANTHROPIC_BASE_URL")
    one.add_argument("--model", type=Path, help="model the replica serves (default: models/agent-demo; "
                                                "models/<agent>-demo for claude-code, codex and opencode)")
    one.add_argument("--trials-dir", type=Path, help="where the trial directory goes; with --proxy-url, that proxy's --trials-dir")
    one.add_argument("--runs-dir", type=Path, default=Path("runs"), help="the services started for the trial log under "
                                                                         "<runs-dir>/trial-<time>/logs")
    one.add_argument("--proxy-url", help="a running proxy; unset, a registry, one replica and a proxy are started for the trial")
    one.add_argument("--trial-key-secret", help="the proxy's trial-key secret; defaults to $RLSTACK_PROXY_TRIAL_KEY_SECRET")
    one.add_argument("--run", default="trial", help="run id: the trial's calls are filed under <trials-dir>/<run>/<trial>")
    one.add_argument("--max-turns", type=int, default=8, help="built-in agent: model calls at most")
    one.add_argument("--max-tokens", type=int, default=256, help="built-in agent: tokens per reply at most")
    one.add_argument("--temperature", type=float, default=1.0, help="built-in agent: sampling temperature")
    one.add_argument("--agent-timeout-seconds", type=float, help="overrides the task's [agent].timeout_sec")
    one.add_argument("--max-model-len", type=int, help="vLLM --max-model-len of the replica started for the trial")
    one.set_defaults(func=cmd_trial)
    box = sub.add_parser("sandbox", help="run one command in a sandbox pod as trial RUN/TRIAL, pointed at the proxy; print its log")
    box.add_argument("run", help="run prefix: the harbor-run label")
    box.add_argument("trial", help="the harbor-trial label")
    box.add_argument("cmd", nargs="+", help="the command (after --)")
    box.add_argument("--image", required=True)
    box.add_argument("--proxy-url", required=True, help="as the sandbox reaches it, e.g. http://rl-rlstack-proxy:4000")
    box.add_argument("--namespace")
    box.add_argument("--kube-api-url", help="API server URL (e.g. from `kubectl proxy`); default: in-cluster or kubeconfig")
    box.add_argument("--secret", help="trial-key secret; defaults to $RLSTACK_PROXY_TRIAL_KEY_SECRET")
    box.add_argument("--timeout", type=float, default=600)
    box.add_argument("--keep", action="store_true", help="leave the pod for inspection")
    box.set_defaults(func=cmd_sandbox)
    args = parser.parse_args(argv)
    configure_logging(args.log_level)
    sys.exit(args.func(args))


if __name__ == "__main__":
    main()
