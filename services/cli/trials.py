"""Commands around one trial: ``rlstack trial``, ``rlstack sandbox`` and the keys they carry."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from rlstack.cli.errors import UserError
from rlstack.cli.flags import add_model_family
from rlstack.cli.help import add_renamed

log = logging.getLogger("rlstack")


def cmd_trial_key(args: argparse.Namespace) -> int:
    import os

    from rlstack.common.trial_keys import mint

    secret = args.trial_key_secret or os.environ.get("RLSTACK_PROXY_TRIAL_KEY_SECRET")
    if not secret:
        raise UserError("no trial-key secret: pass --trial-key-secret or set RLSTACK_PROXY_TRIAL_KEY_SECRET")
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

    secret = args.trial_key_secret or os.environ.get("RLSTACK_PROXY_TRIAL_KEY_SECRET")
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
                               model_family=args.model_family,
                               trials_dir=args.trials_dir, proxy_url=args.proxy_url, trial_key_secret=args.trial_key_secret,
                               run=args.run, runs_dir=args.runs_dir, max_turns=args.max_turns, max_tokens=args.max_tokens,
                               temperature=args.temperature, agent_timeout_seconds=args.agent_timeout_seconds,
                               max_model_len=args.max_model_len, environment=args.environment)
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




RUN_ID_HELP = "run id: the trial's calls are filed under <trials-dir>/<run-id>/<trial>"


def add_trial_key_secret(parser: argparse.ArgumentParser) -> None:
    """The proxy's own name for it (``--trial-key-secret``); ``--secret`` was this CLI's, kept hidden for a release."""
    add_renamed(parser, "--trial-key-secret", "--secret", dest="trial_key_secret", default=None,
                help="the proxy's trial-key secret; default $RLSTACK_PROXY_TRIAL_KEY_SECRET")


def register(sub: argparse._SubParsersAction) -> None:
    key = sub.add_parser("trial-key", help="mint a trial key for the proxy (HMAC, no database)")
    add_renamed(key, "--run-id", "--run", dest="run", required=True, help=RUN_ID_HELP)
    key.add_argument("--trial", required=True, help="the trial's id within the run")
    add_trial_key_secret(key)
    key.add_argument("--ttl-seconds", type=float, default=3600, help="how long the key is accepted")
    key.set_defaults(func=cmd_trial_key)
    one = sub.add_parser("trial", help="run one agent trial of one Harbor task and print what it did (JSON last line)")
    one.add_argument("task_dir", type=Path, help="a Harbor task directory (task.toml, instruction.md, tests/test.sh)")
    one.add_argument("--agent", default="builtin", choices=["builtin", "claude-code", "codex", "opencode", "oracle", "nop"],
                     help="oracle runs solution/solve.sh, nop does nothing: neither calls a model")
    one.add_argument("--agent-command", help="any agent as a command line, e.g. 'mini -y -t {instruction}' "
                                             "({instruction}: a word of its own); it finds the proxy in OPENAI_BASE_URL / ANTHROPIC_BASE_URL")
    one.add_argument("--model", type=Path, help="model the replica serves (default: models/agent-demo; "
                                                "models/<agent>-demo for claude-code, codex and opencode)")
    add_model_family(one)
    one.add_argument("--environment", default="image", choices=["image", "host"],
                     help="image: the trial runs in the task's image (the dataset's images.lock.json, or built here); "
                          "host: on this host's tools (said loudly: a task that needs its image fails or scores 0)")
    one.add_argument("--trials-dir", type=Path, help="where the trial directory goes; with --proxy-url, that proxy's --trials-dir")
    one.add_argument("--runs-dir", type=Path, default=Path("runs"), help="the services started for the trial log under "
                                                                         "<runs-dir>/trial-<time>/logs")
    one.add_argument("--proxy-url", help="a running proxy; unset, a registry, one replica and a proxy are started for the trial")
    add_trial_key_secret(one)
    add_renamed(one, "--run-id", "--run", dest="run", default="trial", help=RUN_ID_HELP)
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
    box.add_argument("--image", required=True, help="the sandbox pod's image")
    box.add_argument("--proxy-url", required=True, help="as the sandbox reaches it, e.g. http://rl-rlstack-proxy:4000")
    box.add_argument("--namespace", help="the pod's namespace; default: the kubeconfig's or the in-cluster one")
    box.add_argument("--kube-api-url", help="API server URL (e.g. from `kubectl proxy`); default: in-cluster or kubeconfig")
    add_trial_key_secret(box)
    box.add_argument("--timeout", type=float, default=600, help="seconds the command may run before the pod is given up")
    box.add_argument("--keep", action="store_true", help="leave the pod for inspection")
    box.set_defaults(func=cmd_sandbox)
