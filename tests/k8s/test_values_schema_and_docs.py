"""values.schema.json is current and refuses bad values with the value's path; the chart README
documents every value; the dashboards are scoped to a namespace and release and show the loop's
health (rollouts, reward, batch wait, sync failures, registered replicas) from exported metrics."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
import yaml

from tests.conftest import REPO
from tests.k8s.conftest import CHART, helm

README = CHART / "README.md"


def test_committed_schema_is_what_the_generator_writes():
    done = subprocess.run([sys.executable, str(REPO / "k8s" / "values_schema.py"), "--check"], capture_output=True, text=True)
    assert done.returncode == 0, "charts/rlstack/values.schema.json is stale: run python k8s/values_schema.py"


@pytest.mark.parametrize(("setting", "complaint"), [
    ("inference.tensorParallelSize=0", "/inference/tensorParallelSize"),
    ("inference.device=rocm", "/inference/device"),
    ("batcher.replicas=2", "/batcher/replicas"),
    ("registry.replicas=3", "/registry/replicas"),
    ("trainer.workload=StatefulSet", "/trainer/workload"),
    ("trainer.nodes=0", "/trainer/nodes"),
    ("model.source.type=s3", "/model/source/type"),
    ("model.path=models/policy", "/model/path"),
    ("sharedStorage.accessMode=ReadOnlyMany", "/sharedStorage/accessMode"),
    ("inference.gpus=2", "gpus"),          # removed: GPUs follow tensorParallelSize x pipelineParallelSize
    ("sandboxes.runLabel=x", "runLabel"),  # removed: the label is fixed in the code
    ("proxy.pdb.minAvailable=1", "minAvailable"),
    ("inferense.replicas=1", "inferense"),  # a typo is refused, never silently ignored
])
def test_schema_refuses_a_bad_value_with_its_path(setting, complaint):
    for command in (["template", "rl"], ["lint", "--strict"]):
        done = helm(*command, str(CHART), "--set", setting)
        assert done.returncode != 0 and complaint in done.stdout + done.stderr, (command, done.stdout + done.stderr)


def test_model_path_outside_the_volume_is_refused():
    done = helm("template", "rl", str(CHART), "--set", "model.path=/models/policy")
    assert done.returncode != 0 and "must lie under sharedStorage.mountPath" in done.stderr


def leaf_paths(values: dict, prefix: str = "") -> set[str]:
    out = set()
    for key, value in values.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and value and not key.endswith(("resources", "SecurityContext", "Selector", "env", "requests", "limits")):
            out |= leaf_paths(value, path + ".")
        else:
            out.add(path)
    return out


def test_chart_readme_documents_every_value():
    documented = set(re.findall(r"^\| `([^`]+)` \|", README.read_text(), re.M))
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    missing = sorted(p for p in leaf_paths(values) if p not in documented)
    assert not missing, f"charts/rlstack/README.md lacks: {missing}"


def test_dashboards_are_scoped_and_show_the_loops_health():
    exported = set(re.findall(r'"(rlstack_[a-z_]+)"', "".join(p.read_text() for p in (REPO / "services").rglob("*.py"))))
    wanted = {"rlstack_env_rollouts", "rlstack_env_reward_mean", "rlstack_trainer_batch_wait_seconds",
              "rlstack_trainer_sync_replica_failures", "rlstack_registry_endpoints_ready"}
    queried = set()
    for board in sorted((CHART / "dashboards").glob("*.json")):
        d = json.loads(board.read_text())
        assert {"namespace", "release"} <= {v["name"] for v in d["templating"]["list"]}, board.name
        for panel in d["panels"]:
            for target in panel["targets"]:
                for name in re.findall(r"\b((?:rlstack_|vllm:)[A-Za-z0-9_:]+)", target["expr"]):
                    assert target["expr"].count(name + '{namespace=~"$namespace",pod=~"$release-.*"') >= 1, target["expr"]
                    queried.add(re.sub(r"_(total|bucket)$", "", name))
    assert wanted <= queried
    # Registry metrics are built from a prefix in the code; the rest are literal names there.
    assert {n for n in wanted if not n.startswith("rlstack_registry_")} <= exported
