"""Trials in their tasks' own images, through the real local image sandbox: tasks whose environment
exists only in their image score their reference solution 1 and doing nothing 0 there (and cannot
pass on the host's tools); what the agent changes anywhere reaches the verifier and nothing else;
/tests and /solution are not there while the agent runs; cpus and memory_mb hold; a timeout leaves
no process; a task that cannot have an image is an infra error naming it, never a reward.

The base image and the example datasets' images are built in the background (``task-images``).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from rlstack.episodes.harbor import HarborTask
from rlstack.episodes.harbor.dataset import load_dataset
from rlstack.episodes.images.lock import ImageLock
from rlstack.episodes.images.resolve import TaskImages
from rlstack.episodes.sandboxes import LocalSandboxConfig, build_sandbox
from rlstack.episodes.sandboxes.image import ImageSandbox
from rlstack.episodes.trials import AgentSpec, TrialSpec, TrialStatus, run_trial
from rlstack.episodes.trials.layout import TrialPaths
from tests.helpers.harbor_tasks import processes_with, sleep_marker, write_task
from tests.helpers.prebuild import SESSION
from tests.helpers.task_images import CACHE, DATASETS, PYTHON_IMAGE, image_settings

IMAGE_TASKS = DATASETS[0]

pytestmark = pytest.mark.prebuilt("task-images")


@pytest.fixture(scope="module")
def images():
    SESSION.wait("task-images")


def image_sandbox(tmp_path: Path, **fields) -> ImageSandbox:  # noqa: ANN003
    config = LocalSandboxConfig(work_dir=tmp_path / "layers", images=image_settings(), kill_grace_sec=0.5, **fields)
    box = build_sandbox(config)
    assert isinstance(box, ImageSandbox)
    return box


def trial(box, task: HarborTask, agent: AgentSpec, trials: Path, name: str):  # noqa: ANN001, ANN201
    return asyncio.run(run_trial(TrialSpec(run="img", trial=name, task=task, agent=agent), box, trials))


def sh(script: str) -> AgentSpec:
    return AgentSpec(name="sh", command=["/bin/sh", "-c", script])


def test_image_only_tasks_score_in_their_images_and_not_on_the_host(images, tmp_path):
    box = image_sandbox(tmp_path)
    lock = ImageLock.load(IMAGE_TASKS / "images.lock.json")
    for task in load_dataset(IMAGE_TASKS).tasks:
        solved = trial(box, task, AgentSpec.oracle(), tmp_path / "trials", f"{task.short_name}-oracle")
        assert (solved.status, solved.reward) == (TrialStatus.OK, 1.0), (task.name, solved.error)
        assert solved.image == f"{lock.images[task.name].ref}@{lock.images[task.name].image_id}"
        untouched = trial(box, task, AgentSpec.nop(), tmp_path / "trials", f"{task.short_name}-nop")
        assert (untouched.status, untouched.reward) == (TrialStatus.OK, 0.0), (task.name, untouched.error)
    # On the host's tools, the reference solution of a task about its image's state cannot succeed.
    host = build_sandbox(LocalSandboxConfig(environment="host", work_dir=tmp_path / "ws"))
    secret = HarborTask.load(IMAGE_TASKS / "secret-outside-app")
    on_host = trial(host, secret, AgentSpec.oracle(), tmp_path / "trials", "secret-on-host")
    assert on_host.reward != 1.0 and on_host.image is None


def test_what_the_agent_changes_anywhere_is_what_the_verifier_sees_and_only_it(images, tmp_path):
    verifier = ("#!/bin/bash\n[ \"$(cat /etc/agent-was-here)\" = yes ] && [ -x /usr/local/bin/tool ] && "
                "[ \"$(/usr/local/bin/tool)\" = made ] && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt\n")
    task = HarborTask.load(write_task(tmp_path / "tasks" / "anywhere", dockerfile=PYTHON_IMAGE, test_sh=verifier))
    box = image_sandbox(tmp_path)
    agent = sh("echo yes > /etc/agent-was-here && printf '#!/bin/sh\\necho made\\n' > /usr/local/bin/tool "
               "&& chmod +x /usr/local/bin/tool")
    changed = trial(box, task, agent, tmp_path / "trials", "changes")
    assert (changed.status, changed.reward) == (TrialStatus.OK, 1.0), changed.error
    # The next trial of the task starts from the image again, and the host never saw any of it.
    fresh = trial(box, task, AgentSpec.nop(), tmp_path / "trials", "fresh")
    assert (fresh.status, fresh.reward) == (TrialStatus.OK, 0.0)
    assert not Path("/etc/agent-was-here").exists() and not Path("/usr/local/bin/tool").exists()
    assert not list((tmp_path / "layers").iterdir())  # each trial's layer is gone with it


def test_tests_and_solution_are_not_there_while_the_agent_runs(images, tmp_path):
    marker = sleep_marker()
    verifier = "#!/bin/bash\ncat /logs/agent/late.txt > /logs/verifier/late.txt 2>&1\necho 1 > /logs/verifier/reward.txt\n"
    task = HarborTask.load(write_task(tmp_path / "tasks" / "hidden", dockerfile=PYTHON_IMAGE, test_sh=verifier,
                                      solve_sh="#!/bin/bash\necho solved\n"))
    box = image_sandbox(tmp_path)
    # The agent looks, then leaves a process behind that would copy /tests once it appears.
    agent = sh(f"ls /tests /solution > /logs/agent/seen.txt 2>&1; (setsid sh -c 'sleep {marker}; "
               "cp -r /tests /logs/agent/stolen' &) ; exit 0")
    result = trial(box, task, agent, tmp_path / "trials", "hidden")
    assert result.status == TrialStatus.OK, result.error
    seen = (tmp_path / "trials" / "img" / "hidden" / "agent" / "seen.txt").read_text()
    assert "No such file" in seen and "test.sh" not in seen and "solve.sh" not in seen
    assert processes_with(marker) == []  # gone before the verifier started
    assert not (tmp_path / "trials" / "img" / "hidden" / "agent" / "stolen").exists()
    oracle = trial(box, task, AgentSpec.oracle(), tmp_path / "trials", "oracle-sees-solution")
    assert oracle.status == TrialStatus.OK
    assert (tmp_path / "trials" / "img" / "oracle-sees-solution" / "agent" / "stdout.txt").read_text() == "solved\n"


def test_a_timeout_kills_every_process_of_the_trial(images, tmp_path):
    marker = sleep_marker()
    task = HarborTask.load(write_task(tmp_path / "tasks" / "slow", dockerfile=PYTHON_IMAGE, agent_timeout_sec=2))
    box = image_sandbox(tmp_path)
    result = trial(box, task, sh(f"(setsid sleep {marker} &); sleep {marker}"), tmp_path / "trials", "slow")
    assert result.status == TrialStatus.AGENT_TIMEOUT
    assert processes_with(marker) == []


def test_memory_and_cpus_of_the_task_are_enforced(images, tmp_path):
    toml = ('schema_version = "1.1"\n[task]\nname = "test/limits"\n[agent]\ntimeout_sec = 60.0\n'
            '[verifier]\ntimeout_sec = 30.0\n[environment]\ncpus = 1\nmemory_mb = 128\n')
    task = HarborTask.load(write_task(tmp_path / "tasks" / "limits", toml=toml, dockerfile=PYTHON_IMAGE))
    box = image_sandbox(tmp_path)
    agent = sh("cat /proc/self/cgroup > /logs/agent/cgroup.txt; "
               "python3 -c 'x = bytearray(512 << 20); print(len(x))' > /logs/agent/big.txt")
    result = trial(box, task, agent, tmp_path / "trials", "limits")
    agent_dir = tmp_path / "trials" / "img" / "limits" / "agent"
    assert "rlstack-sandboxes/img-limits-agent" in agent_dir.joinpath("cgroup.txt").read_text()
    assert result.status == TrialStatus.AGENT_ERROR  # the kernel killed the 512 MB allocation at 128 MB
    assert agent_dir.joinpath("big.txt").read_text() == ""


def test_a_task_without_a_usable_image_is_an_infra_error_naming_it(images, tmp_path):
    box = image_sandbox(tmp_path)
    broken = HarborTask.load(write_task(tmp_path / "tasks" / "broken", dockerfile="FROM debian:bookworm-slim\nRUN false\n"))
    result = trial(box, broken, AgentSpec.nop(), tmp_path / "trials", "broken")
    assert result.status == TrialStatus.INFRA_ERROR and result.reward is None
    assert "test/broken" in result.error and "RUN false" in result.error
    shell_less = HarborTask.load(write_task(tmp_path / "tasks" / "no-shell", dockerfile="FROM scratch\nCOPY marker /marker\n",
                                            files={"marker": "x\n"}))
    result = trial(box, shell_less, AgentSpec.nop(), tmp_path / "trials", "no-shell")
    assert result.status == TrialStatus.INFRA_ERROR and "/bin/sh" in result.error and "test/no-shell" in result.error
    # The env server asks for every image before its first trial and hears every failure at once.
    assert set(image_sandbox(tmp_path).prepare([broken, shell_less])) == {"test/broken", "test/no-shell"}


def test_a_task_changed_after_its_build_is_refused_until_built_again(images, tmp_path):
    dataset = tmp_path / "tasks"
    task = HarborTask.load(write_task(dataset / "changing", dockerfile=PYTHON_IMAGE, files={"data.txt": "1\n"}))
    from rlstack.episodes.images.dataset import build_dataset

    assert build_dataset(dataset, image_settings(), progress=False).ok
    (task.environment_dir / "data.txt").write_text("2\n")
    images = TaskImages(image_settings(), build_missing=False)
    with pytest.raises(Exception, match="test/changing changed after its image was built"):
        images.rootfs(HarborTask.load(task.path))
    assert json.loads((dataset / "images.lock.json").read_text())["images"]["test/changing"]
    assert CACHE.is_dir()


def test_a_lock_file_naming_an_image_this_host_lacks_is_refused_with_the_fix(images, tmp_path):
    from rlstack.episodes.images.digest import environment_digest
    from rlstack.episodes.images.lock import LockEntry

    dataset = tmp_path / "tasks"
    task = HarborTask.load(write_task(dataset / "gone", dockerfile=PYTHON_IMAGE))
    missing = "sha256:" + "0" * 64
    ImageLock(dataset=str(dataset), images={task.name: LockEntry(
        ref="registry.example/rlstack-task/gone:x", image_id=missing, env_digest=environment_digest(task),
        pushed_ref="registry.example/rlstack-task/gone@" + missing)}).write(dataset / "images.lock.json")
    with pytest.raises(Exception, match=r"test/gone: the lock file names .* which is not here \(pull registry.example"):
        TaskImages(image_settings(), build_missing=False).rootfs(task)
    box = image_sandbox(tmp_path, build_missing=False)
    result = trial(box, task, AgentSpec.nop(), tmp_path / "trials", "gone")
    assert result.status == TrialStatus.INFRA_ERROR and "rlstack tasks build" in result.error


def test_an_image_with_its_own_user_runs_both_phases_as_it(images, tmp_path):
    """The image's USER (a name, looked up in its own /etc/passwd) is who the agent and the verifier
    are: its home is writable, the image's root-owned /etc is not, and the logs still reach the env.
    The agent's bundle command (``image_command``) is what runs in an image, and result.json names it."""
    verifier = ("#!/bin/bash\n[ \"$(id -u)\" = 1234 ] && [ \"$HOME\" = /home/agent ] && [ -f /home/agent/made ] "
                "&& [ ! -e /etc/agent-was-here ] && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt\n")
    task = HarborTask.load(write_task(tmp_path / "tasks" / "own-user", test_sh=verifier,
                                      dockerfile=PYTHON_IMAGE + "RUN useradd -u 1234 -m agent\nUSER agent\n"))
    box = image_sandbox(tmp_path)
    in_image = ["/bin/sh", "-c", "touch $HOME/made; echo yes > /etc/agent-was-here; id -u"]
    agent = AgentSpec(name="sh", command=["/nonexistent/host-agent"], image_command=in_image)
    result = trial(box, task, agent, tmp_path / "trials", "own-user")
    assert (result.status, result.reward) == (TrialStatus.OK, 1.0), result.error
    written = json.loads(TrialPaths.of(tmp_path / "trials", "img", "own-user").result.read_text())
    assert result.agent.command == written["agent"]["command"] == in_image
    assert (tmp_path / "trials" / "img" / "own-user" / "agent" / "stdout.txt").read_text().strip().endswith("1234")
