"""Task images really built with podman from the debootstrap base (``rlstack tasks base``): an unchanged
dataset rebuilds nothing, a changed file rebuilds its task only, the unpacked filesystem holds what the
Dockerfile made, a push is locked by digest, and each failure names its task, its step and its fix."""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import uuid

import pytest

from rlstack.cli import tasks as tasks_cli
from rlstack.episodes.harbor.dataset import load_dataset
from rlstack.episodes.images.base import DEFAULT_TAG as BASE
from rlstack.episodes.images.config import ImageSettings
from rlstack.episodes.images.dataset import build_dataset
from rlstack.episodes.images.lock import ImageLock, ImageLockError
from rlstack.episodes.images.rootfs import remove_tree, unpacked_rootfs
from tests.conftest import REPO
from tests.helpers.harbor_tasks import write_task
from tests.helpers.prebuild import SESSION

pytestmark = [pytest.mark.slow, pytest.mark.prebuilt("task-images")]

ALPHA = """FROM debian:bookworm-slim
RUN mkdir -p /opt/task-data && echo 42 > /opt/task-data/secret.txt
WORKDIR /app
COPY data.txt nonce.txt /app/
"""
BETA = """FROM --platform=linux/amd64 debian:bookworm-slim AS base
RUN mkdir -p /opt/task-data && echo 42 > /opt/task-data/secret.txt
FROM base
COPY data.txt nonce.txt /app/
"""
UNPULLABLE = "debian:trixie-slim@sha256:" + "0" * 64


def _cli(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="rlstack")
    tasks_cli.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(list(argv))
    return args.func(args)


@pytest.fixture(scope="module")
def base() -> str:
    """``rlstack tasks base`` once per machine (about a minute): the image stays in podman's store.
    The session's ``task-images`` job makes it first; these tests wait for it rather than race it."""
    SESSION.wait("task-images")
    missing = [tool for tool in ("podman", "runc", "debootstrap") if shutil.which(tool) is None]
    if missing:
        pytest.fail(f"missing {missing}: `make setup-images` installs them")
    if subprocess.run(["podman", "image", "exists", BASE]).returncode != 0:
        if os.geteuid() != 0:
            pytest.fail(f"{BASE} is missing and debootstrap needs root: run `sudo make setup-task-base` once")
        assert _cli("tasks", "base", "--cache-dir", str(REPO / ".cache" / "task-images")) == 0
    return BASE


@pytest.fixture
def settings(tmp_path, base):
    """Images tagged in this test (their names end in its suffix) are removed after it; its
    unpacked trees with its cache directory."""
    settings = ImageSettings(base_map={"debian:bookworm-slim": base}, cache_dir=tmp_path / "cache", jobs=2)
    yield settings
    refs = subprocess.run(["podman", "images", "--format", "{{.Repository}}:{{.Tag}}", "--filter",
                           f"reference=localhost/rlstack-task/*-{_suffix(tmp_path)}"],
                          capture_output=True, text=True).stdout.split()
    if refs:
        subprocess.run(["podman", "rmi", "-f", *refs], capture_output=True)
    remove_tree(settings.cache_dir)


def _suffix(tmp_path) -> str:
    return hashlib.sha256(str(tmp_path).encode()).hexdigest()[:8]


def _dataset(tmp_path, dockerfiles: dict[str, str]):
    """Task names carry the test's suffix and a nonce file, so each run builds afresh and cleans up after itself."""
    suffix, nonce = _suffix(tmp_path), uuid.uuid4().hex
    for name, dockerfile in dockerfiles.items():
        write_task(tmp_path / "ds" / f"{name}-{suffix}", dockerfile=dockerfile,
                   files={"data.txt": f"data of {name}\n", "nonce.txt": nonce})
    return tmp_path / "ds", suffix


def test_builds_once_rebuilds_what_changed_and_unpacks_the_filesystem(tmp_path, settings):
    root, suffix = _dataset(tmp_path, {"alpha": ALPHA, "beta": BETA})
    first = build_dataset(root, settings, progress=False)
    assert first.ok, "\n".join(map(str, first.failures))
    assert [(b.task, b.rebuilt) for b in first.built] == [(f"test/alpha-{suffix}", True), (f"test/beta-{suffix}", True)]
    lock = ImageLock.load(root / "images.lock.json")
    dataset = load_dataset(root)
    alpha, beta = dataset.tasks
    assert lock.resolve(alpha).ref == first.built[0].ref and first.built[0].ref.startswith(f"localhost/rlstack-task/alpha-{suffix}:")

    rootfs = unpacked_rootfs(lock.resolve(alpha).image_id, settings)
    assert rootfs.path == settings.cache_dir / "rootfs" / lock.resolve(alpha).image_id.removeprefix("sha256:") / "rootfs"
    assert (rootfs.path / "opt" / "task-data" / "secret.txt").read_text() == "42\n"
    assert (rootfs.path / "app" / "data.txt").read_text() == "data of alpha\n"
    assert '"working_dir": "/app"' in (rootfs.path.parent / "config.json").read_text()
    assert rootfs.config.working_dir == "/app" and "PATH" in rootfs.config.env and rootfs.has_shell()
    passwd = (rootfs.path / "usr" / "bin" / "passwd").stat()
    assert passwd.st_mode & 0o4000, "setuid bits kept"
    if os.geteuid() == 0:
        assert passwd.st_uid == 0 and (rootfs.path / "tmp").stat().st_mode & 0o1777 == 0o1777

    second = build_dataset(root, settings, progress=False)
    assert second.ok and [b.rebuilt for b in second.built] == [False, False]

    (beta.environment_dir / "data.txt").write_text("changed\n")
    with pytest.raises(ImageLockError, match=f"task test/beta-{suffix} changed after its image was built"):
        ImageLock.load(root / "images.lock.json").resolve(beta)
    third = build_dataset(root, settings, progress=False)
    assert [b.rebuilt for b in third.built] == [False, True]
    assert third.built[1].ref != first.built[1].ref
    assert ImageLock.load(root / "images.lock.json").resolve(beta).ref == third.built[1].ref

    registry = tmp_path / "registry"
    (registry / "rlstack-task").mkdir(parents=True)  # the oci: transport wants the parent of each repository
    pushed = build_dataset(root, settings, push=f"oci:{registry}", progress=False)
    assert pushed.ok, "\n".join(map(str, pushed.failures))
    ref = pushed.lock.resolve(alpha).pushed_ref
    assert ref is not None and ref.startswith(f"oci:{registry}/rlstack-task/alpha-{suffix}@sha256:")


def test_failures_name_the_task_the_step_and_the_fix(tmp_path, settings, capsys):
    root, suffix = _dataset(tmp_path, {
        "good": ALPHA,
        "broken": "FROM debian:bookworm-slim\nRUN echo before-the-failure\nRUN false\nRUN echo never\n",
        "pinned": f"FROM {UNPULLABLE}\nRUN true\n",
        "shell-less": "FROM scratch\nCOPY data.txt /data.txt\n",
    })
    code = _cli("tasks", "build", str(root), "--no-progress", "--cache-dir", str(settings.cache_dir),
                "--base-map", f"debian:bookworm-slim={settings.base_map['debian:bookworm-slim']}")
    err = capsys.readouterr().err
    assert code == 1
    broken = err[err.index(f"task test/broken-{suffix}:"):]
    assert broken.startswith(f"task test/broken-{suffix}: failed at STEP 3/4: RUN false: fix that step of ")
    assert "before-the-failure" in broken  # the log's tail
    assert (f"task test/pinned-{suffix}: base image '{UNPULLABLE}' cannot be pulled (" in err
            and "map it to a local or mirrored image with --base-map debian:trixie-slim=REF (or RLSTACK_TASKS_BASE_MAP)" in err)
    assert f"task test/shell-less-{suffix}: image localhost/rlstack-task/shell-less-{suffix}:" in err and "has no /bin/sh" in err
    assert "1 image(s) ready" in err
    lock = ImageLock.load(root / "images.lock.json")
    assert list(lock.images) == [f"test/good-{suffix}"]


def test_buildah_builds_too_and_concurrent_unpacks_share_one_tree(tmp_path, settings):
    from concurrent.futures import ThreadPoolExecutor

    root, _ = _dataset(tmp_path, {"gamma": ALPHA})
    result = build_dataset(root, settings.model_copy(update={"builder": "buildah"}), progress=False)
    assert result.ok, "\n".join(map(str, result.failures))
    built = result.built[0]
    assert built.rebuilt and built.ref.startswith("localhost/rlstack-task/gamma-")

    fresh = settings.model_copy(update={"cache_dir": settings.cache_dir / "fresh"})
    with ThreadPoolExecutor(max_workers=3) as pool:
        trees = list(pool.map(lambda _: unpacked_rootfs(built.ref, fresh), range(3)))
    assert len({t.path for t in trees}) == 1 and (trees[0].path / "opt" / "task-data" / "secret.txt").read_text() == "42\n"
    assert [p.name for p in (fresh.cache_dir / "rootfs").iterdir() if p.name.startswith(".tmp-")] == []
