"""The environment digest: the same for an unchanged task, different for any changed byte, blind to links' targets' contents."""

from __future__ import annotations

import os

from rlstack.episodes.harbor.task import HarborTask
from rlstack.episodes.images.digest import environment_digest, image_ref
from tests.helpers.harbor_tasks import write_task


def _task(path, **kwargs) -> HarborTask:
    return HarborTask.load(write_task(path, files={"data/input.txt": "1 2 3\n", "run.sh": "#!/bin/sh\n"}, **kwargs))


def test_an_unchanged_task_gives_the_same_digest(tmp_path):
    one = environment_digest(_task(tmp_path / "a"))
    assert one == environment_digest(_task(tmp_path / "a"))
    assert len(one) == 64 and int(one, 16) >= 0
    # the same content elsewhere (another checkout) is the same image
    assert one == environment_digest(_task(tmp_path / "elsewhere" / "a"))


def test_every_kind_of_change_changes_it(tmp_path):
    task = _task(tmp_path / "a")
    env = task.environment_dir
    seen = {environment_digest(task)}

    def changed() -> bool:
        digest = environment_digest(task)
        fresh = digest not in seen
        seen.add(digest)
        return fresh

    (env / "data" / "input.txt").write_text("1 2 4\n")
    assert changed(), "a changed byte"
    os.chmod(env / "run.sh", 0o755)
    assert changed(), "the executable bit"
    (env / "data" / "input.txt").rename(env / "data" / "input2.txt")
    assert changed(), "a renamed file"
    (env / "empty").mkdir()
    assert changed(), "a new empty directory"
    (env / "link").symlink_to("run.sh")
    assert changed(), "a new symlink"
    (env / "link").unlink()
    (env / "link").symlink_to("data")
    assert changed(), "a symlink's target"
    (env / "Dockerfile").write_text("FROM debian:bookworm-slim\n")
    assert changed(), "the Dockerfile"


def test_docker_image_counts_and_links_are_never_followed(tmp_path):
    outside = tmp_path / "outside.txt"
    outside.write_text("secret v1")
    task = _task(tmp_path / "a")
    (task.environment_dir / "leak").symlink_to(outside)
    (task.environment_dir / "leakdir").symlink_to(tmp_path)
    before = environment_digest(task)
    outside.write_text("secret v2")
    assert environment_digest(task) == before
    toml = 'schema_version = "1.1"\n[task]\nname = "t/img"\n[environment]\ndocker_image = "{}"\n'
    one = HarborTask.load(write_task(tmp_path / "img", toml=toml.format("debian:bookworm-slim"), dockerfile=None))
    two = HarborTask.load(write_task(tmp_path / "img2", toml=toml.format("debian:trixie-slim"), dockerfile=None))
    assert environment_digest(one) != environment_digest(two)


def test_image_ref_is_the_short_name_lowercased_and_the_digest_prefix(tmp_path):
    toml = 'schema_version = "1.1"\n[task]\nname = "Org/My_Task..V2"\n'
    task = HarborTask.load(write_task(tmp_path / "x", toml=toml))
    digest = environment_digest(task)
    assert image_ref(task, digest) == f"localhost/rlstack-task/my_task-v2:{digest[:16]}"
    plain = HarborTask.load(write_task(tmp_path / "Count-Lines"))
    assert image_ref(plain, "ab" * 32) == "localhost/rlstack-task/count-lines:" + "ab" * 8
