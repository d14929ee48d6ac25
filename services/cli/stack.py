"""Commands that run a stack: ``rlstack up`` and what it leaves behind (``rlstack ledger``)."""

from __future__ import annotations

import argparse
import json
import logging
import signal
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from rlstack.cli.errors import UserError, config_error, no_such_file, read_yaml
from rlstack.cli.flags import add_model_family
from rlstack.cli.help import add_renamed

if TYPE_CHECKING:
    from rlstack.launcher.config import RunConfig

log = logging.getLogger("rlstack")
DEFAULT_CONFIG = Path("examples/local-foundation.yaml")


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def make_run_dir(runs_dir: Path, name: str) -> Path:
    """A new run directory, and ``runs_dir/latest`` pointed at it. A ``latest`` that is not a link (an
    empty directory or a file something left there) is replaced; one with files in it is refused, not lost."""
    latest = runs_dir / "latest"
    if latest.is_dir() and not latest.is_symlink():
        if any(latest.iterdir()):
            raise UserError(f"{latest} is a directory with files in it, not the link to the newest run: move it "
                            f"away (mv {latest} {latest}.old) and start again")
        latest.rmdir()
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    run_dir = runs_dir / f"{name}-{stamp}"
    run_dir.mkdir(parents=True, exist_ok=True)
    if latest.is_symlink() or latest.exists():
        latest.unlink()
    latest.symlink_to(run_dir.name)
    return run_dir


def load_run_config(path: Path, default: bool) -> RunConfig:
    """A run config, or one line naming the file and the key that is wrong."""
    from pydantic import ValidationError

    from rlstack.launcher.config import RunConfig

    fix = ("the default config is relative: run from the repository root or name one, rlstack up PATH" if default
           else "name a run config, e.g. examples/local-foundation.yaml")
    data = read_yaml(path, "run config", fix)
    try:
        return RunConfig.model_validate(data)
    except ValidationError as exc:
        raise config_error(path, exc, data) from None


def cmd_up(args: argparse.Namespace) -> int:
    from rlstack.common.model_families import ModelFamilyError
    from rlstack.launcher.health import print_health, smoke_check
    from rlstack.launcher.policies import PolicyConfigError, expand
    from rlstack.launcher.preflight import check_replicas, with_model, with_model_family
    from rlstack.launcher.progress import wait_for
    from rlstack.launcher.service_settings import ServiceSettingsError
    from rlstack.launcher.supervisor import ServiceFailed, Supervisor

    config = load_run_config(args.config or DEFAULT_CONFIG, default=args.config is None)
    declared = [p.name for p in config.policies]
    if args.policies is not None and args.policies.split(",") != declared:
        raise UserError(f"--policies {args.policies}: the config declares {','.join(declared) or 'no policies: block'}; "
                        "name them as declared, in order")
    if args.model and config.policies:
        raise UserError(f"--model with {len(config.policies)} policies: each policy's model is its entry's `model:` in the "
                        "config's policies: block")
    if args.model:
        config = with_model(config, str(args.model))
    try:
        config = expand(config)
        if args.model_family:
            config = with_model_family(config, args.model_family)
        for name, family in check_replicas(config).items():
            log.info("%s serves a %s model (tool parser %s, reasoning parser %s)", name, family.name,
                     family.tool_parser, family.reasoning_parser)
    except (ModelFamilyError, PolicyConfigError, ServiceSettingsError) as exc:
        log.error("%s", exc)
        return 2
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
            wait_for(supervisor, config.until_services)
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
    """The trainer's summary (each policy's trainer's, by policy, in a run of several), with the
    launcher's restarts added (``{}``: none died)."""
    restarts = run_dir / "restarts.json"
    died = json.loads(restarts.read_text()) if restarts.exists() else {}
    single = run_dir / "summary.json"
    summaries = {None: single} if single.exists() else {p.parent.name: p for p in sorted(run_dir.glob("policies/*/summary.json"))}
    shown = {}
    for policy, summary in summaries.items():
        data = json.loads(summary.read_text())
        data["restarts"] = died
        summary.write_text(json.dumps(data, indent=2) + "\n")
        shown[policy] = data
    if shown:
        log.info("run finished: %s", run_dir)
        print(json.dumps(shown[None] if None in shown else shown, indent=2))


def cmd_ledger(args: argparse.Namespace) -> int:
    """Where every finished trial of a local agent run went (``rlstack.ops.ledger``); exit 1 if any was lost.
    Read only: a missing run is an error, never an empty ledger, and nothing is created on the way."""
    from rlstack.ops.ledger import LedgerSources, audit

    if not args.run_dir.is_dir():
        raise no_such_file(args.run_dir, "run directory", "name a run directory of `rlstack up` (runs/<name>-<time>), "
                           "or the chart's shared volume with --run-id")
    sources = LedgerSources.of(args.run_dir, args.run)
    if missing := sources.missing():
        raise UserError(f"{args.run_dir} is not a finished agent run: it lacks "
                        f"{', '.join(str(p.relative_to(args.run_dir)) for p in missing)}"
                        + ("" if args.run else " (a chart's shared volume? add --run-id RUN)"))
    ledger = audit(**sources.model_dump())
    print(ledger.model_dump_json(indent=2))
    return 0 if ledger.ok else 1


def cmd_policy_rows(args: argparse.Namespace) -> int:
    """Each policy's trained rows are its own calls' exact ids, none another's (``rlstack.ops.policy_rows``)."""
    from rlstack.ops.policy_rows import audit_rows

    if not (args.run_dir / "batcher").is_dir() or not (args.run_dir / "trials").is_dir():
        raise no_such_file(args.run_dir, "agent run directory", "name a run directory of `rlstack up` with batcher/ and trials/, "
                           "or the chart's shared volume with --run-id")
    report = audit_rows(args.run_dir, args.first_policy, args.run)
    print(report.model_dump_json(indent=2))
    return 0 if report.ok else 1


def cmd_team_roles(args: argparse.Namespace) -> int:
    """Each team member's own part, in training and at each held-out round (``rlstack.ops.team_roles``)."""
    from rlstack.ops.team_roles import plot, team_roles

    trials = args.run_dir / "trials"
    if not trials.is_dir():
        raise no_such_file(args.run_dir, "agent run directory", "name a run directory of `rlstack up` with trials/")
    if args.parts < 1:
        raise UserError(f"--parts {args.parts}: the training trials are cut into at least 1 part")
    report = team_roles(trials, args.lead, args.worker, args.parts)
    if not report.training and not report.heldout:
        log.error("%s holds no finished trial", trials)
        return 1
    print(report.model_dump_json(indent=2))
    if args.plot is not None:
        plot(report, args.plot, args.title)
        log.info("wrote %s", args.plot)
    return 0


def cmd_plot_runs(args: argparse.Namespace) -> int:
    """Several runs of one config (seeds) on one figure: reward per step and held-out score per evaluation."""
    from rlstack.trainer.report import EvalRecord, StepRecord, plot_runs, read_lines

    runs = {}
    for run_dir in args.run_dirs:
        records = read_lines(run_dir / "metrics.jsonl", StepRecord)
        if not records:
            log.error("%s holds no metrics.jsonl steps", run_dir)
            return 1
        name = run_dir.resolve().name
        summary = run_dir / "summary.json"
        if summary.exists() and (seed := json.loads(summary.read_text()).get("seed")) is not None:
            name = f"seed {seed}"
        if run_dir.resolve().parent.name == "policies":  # one policy of a run of several: <run>/policies/<p>
            name = f"policy {run_dir.resolve().name}" + (f", {name}" if name.startswith("seed") else "")
        runs[name] = (records, read_lines(run_dir / "evals.jsonl", EvalRecord))
    plot_runs(runs, args.out, args.title)
    log.info("wrote %s", args.out)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    up = sub.add_parser("up", help="start the services of a run config as local processes")
    up.add_argument("config", type=Path, nargs="?", default=None,
                    help=f"a run config (examples/*.yaml); default {DEFAULT_CONFIG}, relative to the current directory")
    up.add_argument("--check", action="store_true", help="start, run the health chain and a smoke round trip, stop")
    up.add_argument("--model", type=Path, default=None,
                    help="the model every service that names one (the replicas, the trainer) takes instead of the config's")
    add_model_family(up, help="serve every replica's model as this family (unset: read from each model directory)")
    up.add_argument("--policies", default=None, metavar="A,B",
                    help="the policies the config must declare, in order (a check: a run of two policies started by name)")
    up.set_defaults(func=cmd_up)
    ledger = sub.add_parser("ledger", help="where every finished trial of an agent run went: trained once, abandoned with "
                                           "a reason, still queued, or lost (exit 1 if any was lost or trained twice; "
                                           "2 if the run or its files are missing); reads only")
    ledger.add_argument("run_dir", type=Path, nargs="?", default=Path("runs/latest"),
                        help="a run directory of `rlstack up`, or with --run-id the chart's shared volume")
    add_renamed(ledger, "--run-id", "--run", dest="run", default=None,
                help="the chart's run id (the release name, or <release>-<trainer.runId>) whose files on the shared "
                     "volume to audit; run_dir is then the volume's root")
    ledger.set_defaults(func=cmd_ledger)
    rows = sub.add_parser("policy-rows", help="a run of several policies: every row each policy trained is one of its own "
                                              "calls' exact ids and none begins as another policy's call (exit 1 if not); reads only")
    rows.add_argument("run_dir", type=Path, nargs="?", default=Path("runs/latest"),
                      help="a run directory of `rlstack up`, or with --run-id the chart's shared volume")
    add_renamed(rows, "--run-id", "--run", dest="run", default=None,
                help="the chart's run id whose files on the shared volume to read (as `rlstack ledger --run-id`); "
                     "run_dir is then the volume's root")
    rows.add_argument("--first-policy", default=None,
                      help="the policy a group naming none belongs to (the batcher's first); unset: a run of one policy")
    rows.set_defaults(func=cmd_policy_rows)
    roles = sub.add_parser("team-roles", help="a lead-and-worker team's run: the team's pass rate and each member's own part "
                                              "(how often the lead hands the task over, how often a task handed over is "
                                              "solved), over the training trials and at each held-out round; reads only")
    roles.add_argument("run_dir", type=Path, nargs="?", default=Path("runs/latest"), help="a run directory of `rlstack up`")
    roles.add_argument("--lead", default="lead", help="the lead's policy")
    roles.add_argument("--worker", default="helper", help="the worker's policy")
    roles.add_argument("--parts", type=int, default=4, help="equal parts the training trials are cut into, in the order they began")
    roles.add_argument("--plot", type=Path, default=None, help="also draw both panels into this PNG")
    roles.add_argument("--title", default="lead and worker, each member's part", help="the figure's title")
    roles.set_defaults(func=cmd_team_roles)
    plot = sub.add_parser("plot-runs", help="several runs (seeds), or a run's policies, on one PNG: reward per step and "
                                             "held-out score")
    plot.add_argument("run_dirs", type=Path, nargs="+", help="run directories of `rlstack up` (runs/<name>-<time>), or a "
                                                              "run's policies (runs/<name>-<time>/policies/*)")
    plot.add_argument("--out", type=Path, required=True, help="the PNG to write")
    plot.add_argument("--title", default="GRPO, one line per run", help="the figure's title")
    plot.set_defaults(func=cmd_plot_runs)
