"""``build_bundle``: assemble the agent bundle, a directory to mount read-only at ``/opt/rlstack``
in any task image, with every agent's runtime and CLI and the glibc they run on.

Steps, top to bottom: (1) skip if the inputs' stamp equals the existing bundle's; (2) stage each
component into a temporary directory beside ``out``; (3) copy the libraries all ELF files need
into ``lib/`` (host ``ldd``) and patch every file to use only those; (4) link ``bin/``; (5) run
each program once at the mount (``verify.py``); (6) write ``manifest.json`` with the content
digest; (7) swap the new tree in by rename. A half-built bundle is never at ``out``.
"""

from __future__ import annotations

import fcntl
import logging
import os
import platform
import shutil
import tempfile
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from rlstack.episodes.bundle import loader, verify
from rlstack.episodes.bundle.elf import glibc_release, read_elf
from rlstack.episodes.bundle.manifest import (
    MANIFEST_NAME,
    AgentEntry,
    BundleManifest,
    load_manifest,
    write_manifest,
)
from rlstack.episodes.bundle.paths import BUNDLE_BIN, BUNDLE_MOUNT
from rlstack.episodes.bundle.programs import COMPONENTS, Component
from rlstack.episodes.bundle.tree import content_digest, inputs_digest

log = logging.getLogger("rlstack.episodes.bundle")

DEFAULT_OUT = Path(".cache/agent-bundle")
DEFAULT_AGENTS = tuple(COMPONENTS)


def build_bundle(out: Path, agents: Iterable[str] = DEFAULT_AGENTS, *, repo: Path = Path("."),
                 keep_interpreter: Iterable[str] = (), verify_programs: bool | None = None,
                 force: bool = False) -> BundleManifest:
    """Build (or keep, if nothing changed) the bundle at ``out`` for ``agents``.

    ``keep_interpreter``: components left on the image's own glibc (not patched), recorded in the
    manifest as ``needs: glibc>=X.Y``, for a program patchelf cannot rewrite. ``verify_programs``:
    run each program once under bubblewrap (default: when bubblewrap works here).
    """
    repo, out = repo.resolve(), out.resolve()
    components = _components(agents)
    kept = set(keep_interpreter)
    if stray := kept - {c.name for c in components}:
        raise ValueError(f"keep_interpreter names agents not bundled: {sorted(stray)}")
    patchelf = loader.find_patchelf(repo)
    out.parent.mkdir(parents=True, exist_ok=True)
    with _lock(out):
        return _build(out, components, repo, kept, patchelf, verify_programs, force)


@contextmanager
def _lock(out: Path) -> Iterator[None]:
    """One build per output at a time (``make -j`` and a test fixture may both ask); under it,
    what a killed build left behind is removed."""
    with open(out.with_name(f".{out.name}.lock"), "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        for stale in out.parent.glob(f".{out.name}.*"):
            if stale.is_dir():
                shutil.rmtree(stale, ignore_errors=True)
        yield


def _build(out: Path, components: list[Component], repo: Path, kept: set[str], patchelf: Path,
           verify_programs: bool | None, force: bool) -> BundleManifest:
    current = None if force else _current(out)
    if current is not None and current.inputs == _stamp(components, repo, kept, patchelf, current.libraries):
        log.info("agent bundle %s is current (%s)", out, current.digest)
        return current

    started = time.monotonic()
    stage = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        stage.chmod(0o755)
        entries, libraries = _assemble(stage, components, repo, kept, patchelf)
        check = verify.can_sandbox() if verify_programs is None else verify_programs
        if check:
            verify.verify(stage, entries)
        digest, size, files = content_digest(stage, skip=[MANIFEST_NAME])
        manifest = BundleManifest(mount=BUNDLE_MOUNT, arch=platform.machine(), glibc=_glibc(stage), agents=entries,
                                  digest=digest, size_bytes=size, files=files, verified=check, libraries=libraries,
                                  inputs=_stamp(components, repo, kept, patchelf, libraries))
        write_manifest(stage, manifest)
        _swap(stage, out)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    log.info("agent bundle %s built in %.0f s: %d files, %.0f MB, %s", out, time.monotonic() - started, files,
             size / 1e6, digest)
    return manifest


def _components(agents: Iterable[str]) -> list[Component]:
    names = list(dict.fromkeys(agents))
    unknown = [n for n in names if n not in COMPONENTS]
    if unknown or not names:
        raise ValueError(f"unknown bundle agents {unknown} (known: {', '.join(COMPONENTS)})" if unknown
                         else "no agents to bundle")
    return [COMPONENTS[n] for n in names]


def _stamp(components: list[Component], repo: Path, kept: set[str], patchelf: Path,
           libraries: dict[str, str]) -> str:
    """What the bundle is built from: the builder's code, and by size and time patchelf, each
    component's inputs and the host libraries copied into ``lib/`` (as recorded in the manifest)."""
    builder = sorted(Path(__file__).parent.glob("*.py"))  # by content: a checkout's new mtimes rebuild nothing
    paths = [patchelf.resolve(), *(Path(p) for _, p in sorted(libraries.items()))]
    for c in components:
        paths += c.inputs(repo)
    extra = [f"agents={','.join(c.name for c in components)}", f"keep={','.join(sorted(kept))}",
             f"mount={BUNDLE_MOUNT}", *(p.read_text() for p in builder)]
    return inputs_digest(paths, extra)


def _current(out: Path) -> BundleManifest | None:
    try:
        return load_manifest(out)
    except (OSError, ValueError):
        return None


def _assemble(stage: Path, components: list[Component], repo: Path, kept: set[str],
              patchelf: Path) -> tuple[dict[str, AgentEntry], dict[str, str]]:
    owned: dict[str, Path] = {}
    for c in components:
        log.info("staging %s", c.name)
        c.stage(stage, repo)
        owned[c.name] = stage / c.target.split("/")[0]
    files = loader.elf_files(stage)
    libraries = loader.copy_libraries(loader.resolve_libraries(files, stage), stage / "lib")
    needs: dict[str, str] = {}
    for path in files + loader.elf_files(stage / "lib"):
        owner = next((n for n, top in owned.items() if path.is_relative_to(top)), None)
        info = read_elf(path)
        if owner in kept and info.interpreter is not None:
            if info.min_glibc and _newer(info.min_glibc, needs.get(owner)):
                needs[owner] = "glibc>={}.{}".format(*info.min_glibc)
            continue
        loader.patch(patchelf, path, info)
    bin_dir = stage / "bin"
    bin_dir.mkdir()
    entries = {}
    for c in components:
        link = bin_dir / Path(c.program).name
        link.symlink_to(os.path.relpath(stage / c.target, bin_dir))
        entries[c.name] = AgentEntry(program=c.program, version=c.version(repo), needs=needs.get(c.name, "any"),
                                     image_programs=c.image_programs, version_argv=(c.program, *c.version_args))
    assert all(e.program.startswith(BUNDLE_BIN + "/") for e in entries.values())
    return entries, {name: str(path) for name, path in sorted(libraries.items())}


def _newer(version: tuple[int, int], current: str | None) -> bool:
    if current is None:
        return True
    major, _, minor = current.removeprefix("glibc>=").partition(".")
    return version > (int(major), int(minor))


def _glibc(stage: Path) -> str:
    libc = stage / "lib" / "libc.so.6"
    release = glibc_release(libc) if libc.is_file() else None
    return "{}.{}".format(*release) if release else "none"


def _swap(stage: Path, out: Path) -> None:
    """Move the finished tree to ``out``; an older bundle is moved aside first, then removed."""
    old = None
    if out.exists() or out.is_symlink():
        old = out.with_name(f".{out.name}.old-{os.getpid()}")
        out.rename(old)
    stage.rename(out)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
