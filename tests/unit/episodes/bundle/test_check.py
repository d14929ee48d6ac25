"""``check_image_compat`` on fake root filesystems: each reason an image is refused gets its
sentence, and links resolve inside the image, never on the host."""

from __future__ import annotations

import pytest

from rlstack.episodes.bundle.check import (
    BundleIncompatible,
    check_image_compat,
    image_libc,
    resolve_in_root,
)
from rlstack.episodes.bundle.manifest import AgentEntry, BundleManifest
from tests.unit.episodes.bundle.test_elf import fake_elf

MANIFEST = BundleManifest(
    mount="/opt/rlstack", arch="x86_64", glibc="2.36", digest="sha256:" + "0" * 64, size_bytes=1, files=1, inputs="x",
    agents={"builtin": AgentEntry(program="/opt/rlstack/bin/python3", version="1", image_programs=("bash",)),
            "codex": AgentEntry(program="/opt/rlstack/bin/codex", version="1", image_programs=("/bin/sh",)),
            "claude-code": AgentEntry(program="/opt/rlstack/bin/claude", version="1", image_programs=("bash|zsh",)),
            "old": AgentEntry(program="/opt/rlstack/bin/old", version="1", needs="glibc>=2.34")})


def image(root, machine: int = 62, sh: bool = True, bash: bool = False, libc: str | None = None, merged_usr: bool = True):
    """A rootfs with ``/bin/sh`` (an ELF header of ``machine``), optionally bash and a C library."""
    (root / "usr" / "bin").mkdir(parents=True)
    (root / "usr" / "lib" / "x86_64-linux-gnu").mkdir(parents=True)
    if merged_usr:
        (root / "bin").symlink_to("usr/bin")
        (root / "lib").symlink_to("usr/lib")
    if sh:
        fake_elf(root / "usr" / "bin" / "dash", machine).chmod(0o755)
        (root / "usr" / "bin" / "sh").symlink_to("/usr/bin/dash")  # absolute: must resolve inside root
    if bash:
        fake_elf(root / "usr" / "bin" / "bash", machine).chmod(0o755)
    if libc and libc.startswith("glibc"):
        release = libc.removeprefix("glibc-")
        (root / "usr/lib/x86_64-linux-gnu/libc.so.6").write_bytes(
            f"GNU C Library (Debian GLIBC {release}-1) stable release version {release}.\0".encode())
    elif libc == "musl":
        (root / "usr/lib/ld-musl-x86_64.so.1").write_bytes(b"musl")
    return root


def test_a_matching_image_passes(tmp_path) -> None:
    root = image(tmp_path, bash=True, libc="glibc-2.36")
    for agent in MANIFEST.agents:
        check_image_compat(root, MANIFEST, agent)


def test_a_foreign_architecture_is_named(tmp_path) -> None:
    with pytest.raises(BundleIncompatible, match=r"the image is aarch64 \(its /bin/sh\) but the agent bundle is built for x86_64"):
        check_image_compat(image(tmp_path, machine=183), MANIFEST, "codex")


def test_no_shell(tmp_path) -> None:
    with pytest.raises(BundleIncompatible, match="the image has no /bin/sh"):
        check_image_compat(image(tmp_path, sh=False), MANIFEST, "codex")


def test_a_script_shell_cannot_tell_its_architecture(tmp_path) -> None:
    root = image(tmp_path, sh=False)
    (root / "usr/bin/sh").write_text("#!/bin/busybox sh\n")
    with pytest.raises(BundleIncompatible, match=r"/bin/sh \(/usr/bin/sh\) is not an ELF program"):
        check_image_compat(root, MANIFEST, "codex")


def test_a_program_the_agent_runs_from_the_image(tmp_path) -> None:
    root = image(tmp_path)
    with pytest.raises(BundleIncompatible, match="builtin runs bash from the image, which has none"):
        check_image_compat(root, MANIFEST, "builtin")
    with pytest.raises(BundleIncompatible, match="claude-code runs bash or zsh from the image, which has none"):
        check_image_compat(root, MANIFEST, "claude-code")
    fake_elf(root / "usr" / "bin" / "zsh", 62).chmod(0o755)
    check_image_compat(root, MANIFEST, "claude-code")


@pytest.mark.parametrize(("libc", "says"), [(None, "the image has none"), ("musl", "the image has musl"),
                                            ("glibc-2.31", "the image has glibc 2.31")])
def test_an_agent_on_the_images_glibc(tmp_path, libc, says) -> None:
    with pytest.raises(BundleIncompatible, match=f"old uses the image's C library and needs glibc >= 2.34; {says}"):
        check_image_compat(image(tmp_path, libc=libc), MANIFEST, "old")


def test_an_agent_the_bundle_lacks(tmp_path) -> None:
    with pytest.raises(BundleIncompatible, match="has no 'opencode'"):
        check_image_compat(image(tmp_path), MANIFEST, "opencode")


def test_links_never_leave_the_root(tmp_path) -> None:
    root = tmp_path / "root"
    (root / "bin").mkdir(parents=True)
    (root / "etc").mkdir()
    (root / "bin" / "sh").symlink_to("/etc/../../../../bin/bash")  # on the host, that is /bin/bash
    assert resolve_in_root(root, "/bin/sh") is None  # the image has no bash (the host has)
    (root / "bin" / "loop").symlink_to("loop")
    assert resolve_in_root(root, "/bin/loop") is None
    fake_elf(root / "bin" / "bash", 62)
    assert resolve_in_root(root, "/bin/sh") == root / "bin" / "bash"


def test_libc_kinds(tmp_path) -> None:
    assert image_libc(image(tmp_path / "a", libc="glibc-2.36")) == ("glibc", (2, 36))
    assert image_libc(image(tmp_path / "b", libc="musl", merged_usr=False)) == ("musl", (0, 0))
    assert image_libc(image(tmp_path / "c")) is None
