from pathlib import Path

import pytest
from pydantic import ValidationError

from rlstack.launcher.config import RunConfig
from rlstack.launcher.policies import expand
from rlstack.launcher.service_settings import resolve, stand_in_addresses

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.yaml")), ids=lambda p: p.name)
def test_every_example_config_validates(path):
    assert RunConfig.load(path).services


def test_duplicate_service_names_are_refused():
    with pytest.raises(ValidationError, match="repeated: \\['batcher'\\]"):
        RunConfig.model_validate({"name": "x", "services": [
            {"name": "batcher", "module": "rlstack.batcher"}, {"name": "batcher", "module": "rlstack.batcher"}]})


def test_unknown_keys_are_refused():
    with pytest.raises(ValidationError, match="modul"):
        RunConfig.model_validate({"name": "x", "services": [{"name": "a", "modul": "rlstack.batcher"}]})


def test_until_must_name_a_service():
    with pytest.raises(ValidationError, match="until names no service"):
        RunConfig.model_validate({"name": "x", "until": "trainer", "services": [{"name": "batcher", "module": "rlstack.batcher"}]})


def test_extra_ports_are_free_and_addressable(tmp_path):
    from rlstack.launcher.supervisor import Supervisor

    config = RunConfig.model_validate({"name": "x", "services": [{"name": "inference", "module": "rlstack.inference", "extra_ports": ["vllm"]}]})
    addresses = Supervisor(config, tmp_path)._addresses()
    assert "{inference.vllm}".format(**addresses).isdigit()
    assert addresses["inference"].vllm != addresses["inference"].port


@pytest.mark.parametrize("path", sorted(p for p in EXAMPLES.glob("local-agent-*.yaml") if not p.stem.endswith("-team")),
                         ids=lambda p: p.stem)
def test_each_cli_agent_run_serves_and_trains_its_own_demo_policy(path):
    """``make run-agent AGENT=<agent>`` runs ``examples/local-agent-<agent>.yaml``: its env runs that
    agent, on the tasks and the policy ``rlstack make-cli-agent-demo --agent <agent>`` writes."""
    from rlstack.envs.config import AgentName

    agent = path.stem.removeprefix("local-agent-")
    services = {s.name: s for s in RunConfig.load(path).services}
    env = services["env"].args
    assert env[env.index("--agent.name") + 1] == agent and agent in AgentName.__args__
    assert env[env.index("--tasks-dir") + 1] == f"data/{agent}-tasks"
    for name in ("inference", "trainer"):
        args = services[name].args
        assert args[args.index("--model") + 1] == f"models/{agent}-demo"


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.yaml")), ids=lambda p: p.name)
def test_a_restarted_replica_finds_the_trainers_published_weights(path):
    """A replica ``rlstack up`` restarts loads the newest weights the trainer published, from the
    trainer's ``sync.weights_dir`` (``{run_dir}/weights`` unless given). Without it, the fault run found,
    the replica came back on the base model, the env servers' staleness bound read version 0 and
    stopped, and the trainer waited for a batch forever."""
    config = expand(RunConfig.load(path))
    addresses = stand_in_addresses(config.services)
    for policy in [p.name for p in config.policies] or [None]:
        replicas = [resolve(s, addresses) for s in config.services if s.module == "rlstack.inference" and s.policy == policy]
        trainers = [resolve(s, addresses) for s in config.services if s.module == "rlstack.trainer" and s.policy == policy]
        if not replicas or not trainers:
            continue
        trainer = trainers[0]
        if trainer.sync.mode not in ("filesystem", "lora"):
            continue
        published = trainer.sync.weights_dir or trainer.run_dir / "weights"
        for replica in replicas:
            assert replica.weights_dir is not None and Path(replica.weights_dir) == Path(published)
