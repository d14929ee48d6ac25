"""Can this task image run that bundled agent? Asked once per task, before its first trial, so an
image the bundle cannot serve fails with a sentence instead of a trial's "exec format error".

What is read, all from the image's root filesystem and never executed: the ELF header of its
``/bin/sh`` (the image's architecture, and proof it has the shell launchers use), its C library
(glibc's release, or musl's loader) when an agent still needs the image's glibc, and the programs
an agent runs from the image (its shell tool's ``bash``). Paths are resolved inside the rootfs:
an absolute link (``/bin/sh -> /bin/busybox``) points into the image, not the host.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path, PurePosixPath

from rlstack.episodes.bundle.elf import NotElf, glibc_release, read_header
from rlstack.episodes.bundle.manifest import BundleManifest

SEARCH_PATH = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")
"""Where the image's programs are looked for (Debian's default PATH)."""
GLIBC_PLACES = ("lib/x86_64-linux-gnu", "usr/lib/x86_64-linux-gnu", "lib/aarch64-linux-gnu",
                "usr/lib/aarch64-linux-gnu", "lib64", "usr/lib64", "lib", "usr/lib")
MAX_LINKS = 40


class BundleIncompatible(RuntimeError):
    """The image cannot run the agent from the bundle; the message says why in one sentence."""


def check_image_compat(rootfs: Path, manifest: BundleManifest, agent: str) -> None:
    """Raise ``BundleIncompatible`` unless ``agent`` from the bundle can run in the image at ``rootfs``."""
    entry = manifest.agents.get(agent)
    if entry is None:
        raise BundleIncompatible(f"the agent bundle has no {agent!r} (it has {', '.join(sorted(manifest.agents))})")
    sh = resolve_in_root(rootfs, "/bin/sh")
    if sh is None:
        raise BundleIncompatible("the image has no /bin/sh: every task image needs one (agent launchers and "
                                 "the verifier run it)")
    try:
        header = read_header(sh)
    except NotElf:
        raise BundleIncompatible(f"the image's /bin/sh ({_inside(rootfs, sh)}) is not an ELF program, so its "
                                 f"architecture cannot be told; the bundle is for {manifest.arch}") from None
    if header.arch != manifest.arch:
        raise BundleIncompatible(f"the image is {header.arch} (its /bin/sh) but the agent bundle is built for "
                                 f"{manifest.arch}")
    missing = [p for p in entry.image_programs if all(find_program(rootfs, alt) is None for alt in p.split("|"))]
    if missing:
        wanted = " and ".join(p.replace("|", " or ") for p in missing)
        raise BundleIncompatible(f"{agent} runs {wanted} from the image, which has none")
    if (needed := entry.min_glibc) is not None:
        libc = image_libc(rootfs)
        want = "glibc >= {}.{}".format(*needed)
        if libc is None:
            raise BundleIncompatible(f"{agent} uses the image's C library and needs {want}; the image has none")
        if libc[0] == "musl":
            raise BundleIncompatible(f"{agent} uses the image's C library and needs {want}; the image has musl")
        if libc[1] < needed:
            raise BundleIncompatible(f"{agent} uses the image's C library and needs {want}; "
                                     "the image has glibc {}.{}".format(*libc[1]))


def image_libc(rootfs: Path) -> tuple[str, tuple[int, int]] | None:
    """``("glibc", (2, 36))``, ``("musl", (0, 0))`` or None (a static-only or distroless image)."""
    for place in GLIBC_PLACES:
        libc = resolve_in_root(rootfs, f"/{place}/libc.so.6")
        if libc is not None and (release := glibc_release(libc)) is not None:
            return "glibc", release
    for place in ("lib", "usr/lib"):
        directory = resolve_in_root(rootfs, f"/{place}", want_dir=True)
        if directory is not None and any(n.startswith("ld-musl-") for n in os.listdir(directory)):
            return "musl", (0, 0)
    return None


def find_program(rootfs: Path, name: str) -> Path | None:
    """An executable ``name`` (an absolute path, or looked up in ``SEARCH_PATH``) in the image."""
    candidates = [name] if name.startswith("/") else [f"{d}/{name}" for d in SEARCH_PATH]
    for candidate in candidates:
        found = resolve_in_root(rootfs, candidate)
        if found is not None and os.stat(found).st_mode & 0o111:
            return found
    return None


def resolve_in_root(rootfs: Path, path: str, want_dir: bool = False) -> Path | None:
    """The host path of ``path`` as the image sees it: every link followed with ``rootfs`` as ``/``
    (never out of it); None if it does not exist or is not a file (a directory with ``want_dir``)."""
    parts = list(PurePosixPath(path).parts[1:])
    current: list[str] = []
    hops = 0
    while parts:
        part = parts.pop(0)
        if part in ("", "."):
            continue
        if part == "..":
            if current:
                current.pop()
            continue
        host = rootfs.joinpath(*current, part)
        try:
            st = host.lstat()
        except OSError:
            return None
        if stat.S_ISLNK(st.st_mode):
            hops += 1
            if hops > MAX_LINKS:
                return None
            target = PurePosixPath(os.readlink(host))
            if target.is_absolute():
                current = []
                parts = list(target.parts[1:]) + parts
            else:
                parts = list(target.parts) + parts
            continue
        current.append(part)
    host = rootfs.joinpath(*current)
    try:
        st = host.stat()
    except OSError:
        return None
    ok = stat.S_ISDIR(st.st_mode) if want_dir else stat.S_ISREG(st.st_mode)
    return host if ok else None


def _inside(rootfs: Path, host: Path) -> str:
    return "/" + host.relative_to(rootfs).as_posix()
