"""The builder's use of ldd and patchelf: ldd's lines read, libraries already in the bundle left
where they are, too old a patchelf refused, and what gets patched."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from rlstack.episodes.bundle import loader
from rlstack.episodes.bundle.elf import read_elf
from rlstack.episodes.bundle.paths import BUNDLE_LIB, BUNDLE_LOADER
from tests.conftest import REPO


def test_ldd_lines() -> None:
    named = loader.LDD_LINE.match("\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f8af45dc000)")
    assert named and named.group(1, 2) == ("libc.so.6", "/lib/x86_64-linux-gnu/libc.so.6")
    loader_line = loader.LDD_LINE.match("\t/lib64/ld-linux-x86-64.so.2 (0x00007f8af47d6000)")
    assert loader_line and loader_line.group(3) == "/lib64/ld-linux-x86-64.so.2"
    assert loader.LDD_LINE.match("\tlinux-vdso.so.1 (0x00007f8af47d4000)") is None


def test_libraries_of_a_program(tmp_path) -> None:
    true = Path(shutil.which("true")).resolve()
    libs = loader.resolve_libraries([true], tmp_path)
    assert {"libc.so.6", "ld-linux-x86-64.so.2"} <= set(libs) and all(p.is_absolute() for p in libs.values())
    assert loader.resolve_libraries([true], Path("/")) == {}  # everything is "inside" /: nothing to copy


def test_too_old_a_patchelf_is_refused(tmp_path, monkeypatch) -> None:
    old = tmp_path / ".cache/patchelf/bin/patchelf"
    old.parent.mkdir(parents=True)
    old.write_text("#!/bin/sh\necho patchelf 0.14.3\n")
    old.chmod(0o755)
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(loader.BundleBuildError, match=r"patchelf >= 0.19 is needed \(found: .*0.14.3\)"):
        loader.find_patchelf(tmp_path)


@pytest.fixture
def patchelf() -> Path:
    try:
        return loader.find_patchelf(REPO)
    except loader.BundleBuildError as exc:
        pytest.fail(f"{exc}")


def test_a_program_gets_the_bundles_loader_and_rpath(tmp_path, patchelf) -> None:
    prog = tmp_path / "true"
    shutil.copy2(Path(shutil.which("true")).resolve(), prog)
    assert loader.patch(patchelf, prog, read_elf(prog)) == "program"
    info = read_elf(prog)
    assert info.interpreter == BUNDLE_LOADER and info.rpath == BUNDLE_LIB and info.runpath is None


def test_a_library_loses_its_own_search_path_but_keeps_origin(tmp_path, patchelf) -> None:
    lib = tmp_path / "libfake.so"  # libm under another name: a library with no PT_INTERP (libc has one)
    libc = loader.resolve_libraries([Path(shutil.which("true")).resolve()], tmp_path)["libc.so.6"]
    shutil.copy2(libc.with_name("libm.so.6"), lib)
    subprocess.run([str(patchelf), "--set-rpath", "$ORIGIN/../x:/build/prefix/lib", str(lib)], check=True)
    assert read_elf(lib).runpath == "$ORIGIN/../x:/build/prefix/lib"
    assert loader.patch(patchelf, lib, read_elf(lib)) == "library"
    assert read_elf(lib).rpath == f"{BUNDLE_LIB}:$ORIGIN/../x" and read_elf(lib).runpath is None
    libc = tmp_path / "libc.so.6"
    shutil.copy2(lib, libc)
    assert loader.patch(patchelf, libc, read_elf(libc)) == "unchanged"
