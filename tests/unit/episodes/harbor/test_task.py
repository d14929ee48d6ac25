"""Harbor task directories: both task.toml schemas load; broken tasks fail naming the file and field."""

from __future__ import annotations

import pytest

from rlstack.episodes.harbor import HarborTask, TaskError
from tests.helpers.harbor_tasks import write_task

SCHEMA_1_0 = """version = "1.0"
[metadata]
author_name = "someone"
difficulty = "medium"
tags = ["statistics"]
[verifier]
timeout_sec = 900.0
[agent]
timeout_sec = 1200.0
[environment]
build_timeout_sec = 600.0
docker_image = "example/sampler:20251031"
cpus = 1
memory = "2G"
storage = "10G"
"""

SCHEMA_1_1 = """schema_version = "1.1"
[task]
name = "example/log-report"
description = "Summarise a log."
authors = [{ name = "someone", email = "someone@example.com" }]
[metadata]
category = "data"
[verifier]
timeout_sec = 120.0
[agent]
timeout_sec = 300.0
[environment]
cpus = 2
memory_mb = 4096
storage_mb = 10240
gpus = 0
allow_internet = true
mcp_servers = []
"""


def test_schema_1_0_loads_with_sizes_in_mb(tmp_path):
    task = HarborTask.load(write_task(tmp_path / "sampler", toml=SCHEMA_1_0, dockerfile=None))
    assert task.name == "sampler"  # 1.0 has no [task] table: the directory names it
    assert task.config.schema_version == "1.0"
    assert task.config.agent.timeout_sec == 1200.0 and task.config.verifier.timeout_sec == 900.0
    assert task.config.environment.memory_mb == 2048 and task.config.environment.storage_mb == 10240
    assert task.config.environment.docker_image == "example/sampler:20251031"
    assert task.config.metadata["tags"] == ["statistics"]


def test_schema_1_1_loads_with_its_task_table(tmp_path):
    task = HarborTask.load(write_task(tmp_path / "log-report-dir", toml=SCHEMA_1_1))
    assert task.name == "example/log-report" and task.short_name == "log-report"
    assert task.config.task.authors[0].email == "someone@example.com"
    assert task.config.environment.cpus == 2 and task.config.environment.memory_mb == 4096
    assert task.instruction == "Do the thing.\n"


def test_fields_of_later_harbor_schemas_are_kept_not_refused(tmp_path):
    toml = SCHEMA_1_1.replace('schema_version = "1.1"', 'schema_version = "1.4"') + (
        'network_mode = "public"\n[environment.healthcheck]\ncommand = "true"\n')
    task = HarborTask.load(write_task(tmp_path / "newer", toml=toml))
    assert task.config.environment.model_extra["network_mode"] == "public"


def test_defaults_when_tables_are_missing(tmp_path):
    task = HarborTask.load(write_task(tmp_path / "bare", toml='version = "1.0"\n'))
    assert task.config.agent.timeout_sec is None  # the trial runner's default applies
    assert task.config.verifier.timeout_sec == 600.0


@pytest.mark.parametrize(("toml", "message"), [
    ('version = "1.0"\n[agent]\ntimeout_sec = -5\n', "[agent].timeout_sec: Input should be greater than 0"),
    ('version = "1.0"\n[agent]\ntimeout_sec = "soon"\n', "[agent].timeout_sec"),
    ('version = "1.0"\n[environment]\nmemory = "lots"\n', "memory = 'lots' is not a size"),
    ('version = "1.0"\n[environment]\nmemory = "2G"\nmemory_mb = 1024\n', "disagree"),
    ('version = "2.0"\n', "schema_version '2.0' is not supported"),
    ('version = "1.0"\nschema_version = "1.1"\n', "disagree"),
    ('schema_version = "1.1"\n[task]\nname = "no-org"\n', "[task].name"),
    ('schema_version = "1.1"\n[[steps]]\nname = "one"\n', "multi-step tasks"),
    ('version = "1.0\n', "not valid TOML"),
])
def test_a_bad_task_toml_is_refused_naming_the_field(tmp_path, toml, message):
    with pytest.raises(TaskError) as err:
        HarborTask.load(write_task(tmp_path / "bad", toml=toml))
    assert message in str(err.value)
    assert "task.toml" in str(err.value)


def test_a_task_without_tests_test_sh_is_refused(tmp_path):
    with pytest.raises(TaskError, match=r"no tests/test\.sh"):
        HarborTask.load(write_task(tmp_path / "untested", test_sh=None))


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"instruction": None}, "no instruction.md"),
    ({"instruction": "  \n"}, "empty instruction"),
    ({"dockerfile": None}, "neither environment/Dockerfile nor"),
    ({"solve_sh": None, "files": {}}, None),  # no solution at all is fine
])
def test_other_missing_parts(tmp_path, kwargs, message):
    root = write_task(tmp_path / "partial", **kwargs)
    if message is None:
        assert HarborTask.load(root).solution_dir is None
        return
    with pytest.raises(TaskError, match=message):
        HarborTask.load(root)


def test_missing_task_toml_and_missing_directory(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(TaskError, match="no task.toml"):
        HarborTask.load(empty)
    with pytest.raises(TaskError, match="not a task directory"):
        HarborTask.load(tmp_path / "nowhere")


def test_workspace_files_leave_out_build_files(tmp_path):
    root = write_task(tmp_path / "files", files={"calc.py": "x = 1\n", ".dockerignore": "Dockerfile\n", "data/a.txt": "a"})
    names = [p.name for p in HarborTask.load(root).workspace_files()]
    assert names == ["calc.py", "data"]
