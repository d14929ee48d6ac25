"""Commands that look before or while a run goes: ``rlstack doctor`` and ``rlstack dryrun``."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

from rlstack.cli.errors import config_error, read_yaml
from rlstack.common.names import POLICY_NAME, SERVED_MODEL_NAME


def cmd_doctor(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from rlstack.ops.doctor import DoctorConfig, run_checks

    config = DoctorConfig(proxy_url=args.proxy_url, registry_url=args.registry_url, batcher_url=args.batcher_url,
                          served_model_name=args.served_model_name, policies=args.policies, trial_key=args.trial_key, run_prefix=args.run_prefix,
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

    from pydantic import ValidationError
    from rich.console import Console
    from rich.table import Table

    from rlstack.ops.dryrun import run_dryrun

    data = read_yaml(args.config, "run config or values file",
                     "name a run config (examples/*.yaml) or a chart values file (charts/rlstack/values*.yaml)")
    try:
        plan, findings, memory = run_dryrun(args.config, args.model_dir)
    except ValidationError as exc:
        raise config_error(args.config, exc, data) from None
    print(json.dumps({"plan": plan.model_dump(), "memory": memory}, indent=2))
    table = Table(title=f"rlstack dryrun {args.config}")
    for col in ("check", "ok", "detail"):
        table.add_column(col, overflow="fold")
    for f in findings:
        table.add_row(f.check, "[green]yes[/]" if f.ok else "[red]NO[/]", f.detail)
    Console(width=160).print(table)
    return 0 if all(f.ok for f in findings) else 1




def policy_names(value: str) -> list[str]:
    """``--policies``: names, comma-separated (``lead,helper``), or the JSON the launcher gives the
    batcher (``["lead", "helper"]``) or the proxy (``[{"name": "lead", ...}, ...]``)."""
    if value.lstrip().startswith("["):
        try:
            items = json.loads(value)
        except json.JSONDecodeError as exc:
            raise argparse.ArgumentTypeError(f"not valid JSON ({exc.msg} at character {exc.pos}): {value!r}") from None
        names = [item.get("name") if isinstance(item, dict) else item for item in items]
    else:
        names = [name.strip() for name in value.split(",")]
    bad = [name for name in names if not isinstance(name, str) or not re.fullmatch(POLICY_NAME, name)]
    if not names or bad:
        raise argparse.ArgumentTypeError(f"{bad or value!r}: each policy is its replicas' served name (letters, digits, "
                                         "'.', '_', '-'), as lead,helper or a JSON list")
    if len(set(names)) < len(names):
        raise argparse.ArgumentTypeError(f"each policy once; got {names}")
    return names


def register(sub: argparse._SubParsersAction) -> None:
    doctor = sub.add_parser("doctor", help="walk the health chain (proxy, replicas, batcher, GPUs, sandboxes) and explain failures")
    doctor.add_argument("--proxy-url", default="http://127.0.0.1:4000", help="the proxy the agents call")
    doctor.add_argument("--registry-url", default="http://127.0.0.1:8100", help="the registry of replicas")
    doctor.add_argument("--batcher-url", default="http://127.0.0.1:8000", help="the batcher the env servers post to")
    doctor.add_argument("--served-model-name", "--served-model", dest="served_model_name", default=SERVED_MODEL_NAME,
                        help="the name the replicas serve the policy under (--served-model: its old name)")
    doctor.add_argument("--policies", type=policy_names, default=None,
                        help="a run of several policies: their names (each its replicas' served name), the batcher's first "
                             "first, as lead,helper or JSON; the completion, replica and batcher checks run for each, and "
                             "replicas of a name none declares are flagged (unset: --served-model-name alone)")
    doctor.add_argument("--trial-key", help="a key minted with `rlstack trial-key` when the proxy checks them")
    doctor.add_argument("--run-dir", type=Path, default=Path("runs/latest"),
                        help="a local run (rlstack up): names a service in a restart loop from its restarts.json")
    doctor.add_argument("--run-prefix", help="also check sandbox pods labelled harbor-run=<prefix> (needs cluster access)")
    doctor.add_argument("--namespace", help="the release's namespace; default: the kubeconfig's or the in-cluster one")
    doctor.add_argument("--kube-api-url", help="API server URL (e.g. from `kubectl proxy`); default: in-cluster or kubeconfig")
    doctor.add_argument("--probe-image", help="check that NetworkPolicies are enforced: a sandbox-labelled pod in this image "
                        "(with python3) must not reach vLLM's port (needs create/watch/delete on pods)")
    doctor.set_defaults(func=cmd_doctor)
    dry = sub.add_parser("dryrun", help="check a run config or values file against the model's config before starting anything")
    dry.add_argument("config", type=Path, help="a run config (examples/*.yaml) or a chart values file; a values file "
                                               "other than values.yaml is read over the values.yaml beside it")
    dry.add_argument("--model-dir", help="a local copy of the model the config names; for a values file, default: "
                                         "model.path when present here, else model.source (a Hub repo id, a hostPath)")
    dry.set_defaults(func=cmd_dryrun)
