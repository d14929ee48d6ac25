"""What a failed build says (task, step, tail, fix), the build's command line, and the /bin/sh check on an unpacked tree."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest

from rlstack.episodes.harbor.task import HarborTask
from rlstack.episodes.images import builder
from rlstack.episodes.images.builder import ImageBuildError, _step_and_tail
from rlstack.episodes.images.config import ImageSettings
from rlstack.episodes.images.engine import Engine, ImageConfig, ImageInfo, ToolError
from rlstack.episodes.images.rootfs import RootFS, resolve_inside
from tests.helpers.harbor_tasks import write_task


def test_the_failing_step_is_the_last_one_started(tmp_path):
    log = tmp_path / "build.log"
    lines = ["$ podman build ...", "STEP 1/3: FROM localhost/debian:bookworm-slim", "STEP 2/3: RUN echo hi", "hi",
             "--> 06c70d93ca8", "STEP 3/3: RUN false",
             *[f"noise {i}" for i in range(50)], 'Error: building at STEP "RUN false": exit status 1']
    log.write_text("\n".join(lines) + "\n")
    step, tail = _step_and_tail(log)
    assert step == "STEP 3/3: RUN false"
    assert tail.splitlines()[-1].startswith("Error: building at STEP") and len(tail.splitlines()) == 40
    assert _step_and_tail(tmp_path / "absent.log") == ("before the first step", "")


def test_the_error_names_task_step_fix_and_tail():
    err = ImageBuildError("org/t", "STEP 3/3: RUN false", "line a\nline b", "fix that step")
    assert str(err) == "task org/t: failed at STEP 3/3: RUN false: fix that step\n    line a\n    line b"
    pull = ImageBuildError("t", "FROM x", "", "map it", reason="base image 'x' cannot be pulled (no route)")
    assert str(pull) == "task t: base image 'x' cannot be pulled (no route): map it"


def test_build_command_lines():
    podman = Engine(ImageSettings()).build_argv(Path("/tmp/D"), Path("/ctx"), "localhost/rlstack-task/a:1", pull_never=True)
    assert podman == ["podman", "build", "--layers", "--force-rm", "--network=host", "--runtime", "runc",
                      "--ulimit", "nofile=1024:1024",
                      "--ulimit", "nproc=1024:1024", "--pull=never", "-f", "/tmp/D", "-t", "localhost/rlstack-task/a:1", "/ctx"]
    buildah = Engine(ImageSettings(builder="buildah", runtime=None, ulimits=[], network="none")).build_argv(
        Path("/tmp/D"), Path("/ctx"), "t", pull_never=False)
    assert buildah == ["buildah", "bud", "--layers", "--force-rm", "--network=none", "-f", "/tmp/D", "-t", "t", "/ctx"]
    assert Engine(ImageSettings(builder="buildah")).push_argv("a", "reg/x:1", Path("/d")) == [
        "buildah", "push", "--digestfile", "/d", "a", "reg/x:1"]


def _rootfs(root: Path) -> RootFS:
    return RootFS(image_id="sha256:" + "0" * 64, path=root, config=ImageConfig())


def test_bin_sh_is_found_through_links_inside_the_tree(tmp_path):
    root = tmp_path / "rootfs"
    (root / "usr" / "bin").mkdir(parents=True)
    (root / "bin").symlink_to("usr/bin")  # merged /usr
    (root / "usr" / "bin" / "dash").write_text("#!")
    (root / "usr" / "bin" / "dash").chmod(0o755)
    (root / "usr" / "bin" / "sh").symlink_to("dash")
    assert _rootfs(root).has_shell()
    (root / "usr" / "bin" / "sh").unlink()
    (root / "usr" / "bin" / "sh").symlink_to("/usr/bin/../bin/dash")  # absolute: from the tree's root, not the host's
    assert resolve_inside(root, "/bin/sh") == root / "usr" / "bin" / "dash"
    (root / "usr" / "bin" / "dash").chmod(0o644)
    assert not _rootfs(root).has_shell()
    (root / "usr" / "bin" / "sh").unlink()
    (root / "usr" / "bin" / "sh").symlink_to("/bin/sh")  # a loop
    assert not _rootfs(root).has_shell()
    (root / "usr" / "bin" / "sh").unlink()
    (root / "usr" / "bin" / "sh").symlink_to("../../../../../bin/bash")  # cannot climb out to the host's /bin/bash
    assert not _rootfs(root).has_shell()


def test_without_a_mountable_store_the_shell_is_looked_for_in_the_unpacked_tree(tmp_path, monkeypatch):
    """Rootless podman cannot mount the store: the tree is unpacked instead, and dropped again when refused."""
    tree = tmp_path / "rootfs" / ("0" * 64) / "rootfs"
    (tree / "bin").mkdir(parents=True)
    removed: list[str] = []

    class Store(Engine):
        @contextlib.contextmanager
        def mounted(self, image):  # noqa: ANN001, ANN202
            raise ToolError("rootless: cannot mount")
            yield

        def remove(self, ref: str) -> None:
            removed.append(ref)

    monkeypatch.setattr(builder, "unpacked_rootfs", lambda image, settings: _rootfs(tree))
    task = HarborTask.load(write_task(tmp_path / "t"))
    info = ImageInfo(id="sha256:" + "0" * 64, config=ImageConfig())
    engine = Store(ImageSettings(cache_dir=tmp_path))
    with pytest.raises(ImageBuildError, match="task test/t: image localhost/x:1 has no /bin/sh"):
        builder._require_shell(task, "localhost/x:1", info, engine.settings, engine, ours=True)
    assert removed == ["localhost/x:1"] and not tree.exists()
    (tree / "bin").mkdir(parents=True)
    (tree / "bin" / "sh").write_text("")
    (tree / "bin" / "sh").chmod(0o755)
    builder._require_shell(task, "localhost/x:1", info, engine.settings, engine, ours=True)
