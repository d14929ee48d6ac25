"""Two policies in one release (plans/two-policies.md §2.9): an inference Deployment and a trainer per
declared policy, one proxy, registry, batcher and set of env servers; and with no policies declared,
every manifest byte for byte what the chart rendered before policies existed (a digest golden).

`python -m tests.k8s.test_chart_policies --write-golden` rewrites the golden from the current chart:
only for a change meant to alter single-policy manifests, in a commit that says so."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import pytest

from tests.k8s.conftest import render

GOLDEN = Path(__file__).with_name("chart_digests.json")

KEDA = ("--set", "inference.autoscaling.enabled=true", "--set", "inference.autoscaling.keda.serverAddress=http://prom:9090")
SINGLE_POLICY_RENDERS: dict[str, tuple[str, ...]] = {
    **{v: (v,) for v in ("values.yaml", "values-agent.yaml", "values-cpu.yaml", "values-gpu-example.yaml", "values-kind-gpu.yaml")},
    "trainer-nodes-2": ("values.yaml", "--set", "trainer.nodes=2"),
    "trainer-gpus-4": ("values.yaml", "--set", "trainer.gpus=4"),
    "trainer-deployment": ("values.yaml", "--set", "trainer.workload=Deployment"),
    "trainer-run-id-kueue": ("values.yaml", "--set", "trainer.runId=r2", "--set", "trainer.kueue.queueName=gpu"),
    "trainer-wandb": ("values.yaml", "--set", "trainer.wandb.project=rl", "--set", "trainer.wandb.apiKeySecret=wandb"),
    "trainer-broadcast": ("values.yaml", "--set", "trainer.env.RLSTACK_TRAINER_SYNC_MODE=broadcast"),
    "inference-keda": ("values.yaml", *KEDA),
    "inference-hpa": ("values.yaml", *KEDA, "--set", "inference.autoscaling.type=hpa", "--set", "proxy.autoscaling.enabled=true"),
    "inference-pp2-no-shm": ("values.yaml", "--set", "inference.pipelineParallelSize=2", "--set", "inference.shmSize="),
    "inference-one-replica": ("values.yaml", "--set", "inference.replicas=1", "--set", "proxy.replicas=1"),
    "model-none": ("values.yaml", "--set", "model.source.type=none"),
    "model-claim": ("values.yaml", "--set", "model.source.type=claim", "--set", "model.source.claim.name=models",
                    "--set", "model.source.claim.subPath=qwen"),
    "model-host-path": ("values.yaml", "--set", "model.source.type=hostPath", "--set", "model.source.hostPath=/models/qwen"),
    "monitoring": ("values.yaml", "--set", "serviceMonitor.enabled=true", "--set", "prometheusRule.enabled=true"),
    "no-envs": ("values.yaml", "--set-json", "envs=[]"),
    "no-network-policies": ("values.yaml", "--set", "networkPolicies.enabled=false", "--set", "helmTest.enabled=false"),
    "fullname-override": ("values-cpu.yaml", "--set", "fullnameOverride=team-a"),
}
"""Every existing values file, and values.yaml with the settings whose branches the per-policy templates
took over (trainer shapes, scalers, model sources, monitoring), each rendered as the tests render."""


def digest(values: str, *extra: str) -> str:
    return hashlib.sha256(render(values, *extra).encode()).hexdigest()


def digests() -> dict[str, str]:
    return {name: digest(*args) for name, args in SINGLE_POLICY_RENDERS.items()}


@pytest.mark.parametrize("case", sorted(SINGLE_POLICY_RENDERS))
def test_with_no_policies_every_manifest_is_what_it_was(case):
    golden = json.loads(GOLDEN.read_text())
    assert digest(*SINGLE_POLICY_RENDERS[case]) == golden[case], (
        f"{case}: the chart renders other single-policy manifests than the golden; render it at the golden's commit "
        "and diff (or, for a change meant to alter them, python -m tests.k8s.test_chart_policies --write-golden)")


if __name__ == "__main__":
    if sys.argv[1:] != ["--write-golden"]:
        sys.exit("usage: python -m tests.k8s.test_chart_policies --write-golden")
    GOLDEN.write_text(json.dumps(digests(), indent=2, sort_keys=True) + "\n")
    print(f"wrote {GOLDEN}")
