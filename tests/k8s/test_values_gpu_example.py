"""values-gpu-example.yaml: a user's own model on GPU nodes, its GPU count, and GRPO's main knobs
as chart values (learning rate, batch size, group size, staleness) that reach the services' settings
and that the schema checks; a service's own env still wins."""

from __future__ import annotations

import pytest
import yaml

from tests.k8s.conftest import CHART, by_kind, env_of, helm, objects_of


def gpus(objects: list[dict]) -> int:
    total = 0
    for o in objects:
        if o["kind"] not in ("Deployment", "StatefulSet", "Job"):
            continue
        spec = o["spec"]["template"]["spec"]
        per_pod = sum(int(c.get("resources", {}).get("limits", {}).get("nvidia.com/gpu", 0)) for c in spec["containers"])
        total += per_pod * int(o["spec"].get("replicas", o["spec"].get("completions", 1)) or 1)
    return total


def test_the_example_asks_for_the_gpus_it_says_and_maps_the_knobs_to_settings():
    objects = objects_of("values-gpu-example.yaml")
    assert "3 GPUs" in (CHART / "values-gpu-example.yaml").read_text() and gpus(objects) == 3
    assert gpus(objects_of("values.yaml")) == 3  # the defaults ask for the same, as the chart README says
    trainer = env_of(objects, "Job", "-trainer")
    assert (trainer["RLSTACK_TRAINER_OPTIMISATION__LR"], trainer["RLSTACK_TRAINER_BATCH_SIZE"]) == ("1e-06", "256")
    env = env_of(objects, "Deployment", "-env-arithmetic")
    assert (env["RLSTACK_ENV_GROUP_SIZE"], env["RLSTACK_ENV_MAX_STALENESS"]) == ("16", "1")


def test_unset_knobs_leave_each_services_default_and_a_services_own_env_wins():
    objects = objects_of("values.yaml")
    assert "RLSTACK_TRAINER_OPTIMISATION__LR" not in env_of(objects, "Job", "-trainer")
    assert "RLSTACK_ENV_MAX_STALENESS" not in env_of(objects, "Deployment", "-env-arithmetic")
    done = helm("template", "rl", str(CHART), "--set", "rollouts.groupSize=4", "--set", "trainer.env.RLSTACK_TRAINER_OPTIMISATION__LR=3e-5",
                "--set-json", "trainer.learningRate=0.000001")
    assert done.returncode == 0, done.stderr
    rendered = [o for o in yaml.safe_load_all(done.stdout) if o]
    assert env_of(rendered, "Deployment", "-env-arithmetic")["RLSTACK_ENV_GROUP_SIZE"] == "8"  # its own env says 8
    [job] = [j for j in by_kind(rendered, "Job") if j["metadata"]["name"].endswith("-trainer")]
    lr = [e for e in job["spec"]["template"]["spec"]["containers"][0]["env"] if e["name"] == "RLSTACK_TRAINER_OPTIMISATION__LR"]
    assert lr == [{"name": "RLSTACK_TRAINER_OPTIMISATION__LR", "value": "3e-5"}]  # one, the trainer's own env


@pytest.mark.parametrize(("setting", "path"), [("trainer.learningRate=0", "/trainer/learningRate"),
                                               ("trainer.batchSize=0", "/trainer/batchSize"),
                                               ("rollouts.groupSize=0", "/rollouts/groupSize"),
                                               ("rollouts.maxStaleness=-1", "/rollouts/maxStaleness")])
def test_the_schema_refuses_a_bad_knob_naming_it(setting, path):
    done = helm("template", "rl", str(CHART), "--set", setting)
    assert done.returncode != 0 and path in done.stderr
