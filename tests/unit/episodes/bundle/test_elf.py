"""ELF reading: the header's machine (what check.py compares), a program's loader, needed
libraries and glibc versions (what the builder patches and copies), glibc's release banner."""

from __future__ import annotations

import shutil
import struct
from pathlib import Path

import pytest

from rlstack.episodes.bundle.elf import NotElf, glibc_release, read_elf, read_header, version_tuple


def fake_elf(path: Path, machine: int, bits: int = 64, little: bool = True, e_type: int = 2) -> Path:
    """The first 64 bytes of an ELF file: enough for ``read_header``."""
    raw = bytearray(64)
    raw[:6] = b"\x7fELF" + bytes([1 if bits == 32 else 2, 1 if little else 2])
    raw[16:20] = struct.pack("<HH" if little else ">HH", e_type, machine)
    path.write_bytes(bytes(raw))
    return path


@pytest.mark.parametrize(("machine", "bits", "little", "arch"), [
    (62, 64, True, "x86_64"), (183, 64, True, "aarch64"), (40, 32, True, "armv7l"), (3, 32, True, "i686"),
    (243, 64, True, "riscv64"), (21, 64, True, "ppc64le"), (21, 64, False, "ppc64"), (22, 64, False, "s390x"),
    (9999, 64, True, "e_machine=9999"),
])
def test_header_names_the_machine_as_uname_does(tmp_path, machine, bits, little, arch) -> None:
    header = read_header(fake_elf(tmp_path / "sh", machine, bits, little))
    assert (header.arch, header.bits, header.little_endian) == (arch, bits, little)


@pytest.mark.parametrize("content", [b"#!/bin/sh\necho hi\n", b"", b"\x7fELF", b"\x7fELF\x03\x01" + bytes(58)])
def test_what_is_not_elf_is_refused(tmp_path, content) -> None:
    (tmp_path / "sh").write_bytes(content)
    with pytest.raises(NotElf):
        read_header(tmp_path / "sh")


def test_a_dynamic_program_shows_its_loader_libraries_and_glibc_versions() -> None:
    true = Path(shutil.which("true")).resolve()
    info = read_elf(true)
    assert info.header.arch == "x86_64" or info.header.arch == "aarch64"
    assert info.interpreter is not None and info.interpreter.startswith("/lib")
    assert "libc.so.6" in info.needed and not info.is_static
    assert info.min_glibc is not None and info.min_glibc >= (2, 2)
    assert all(v.startswith("GLIBC_2.") for v in info.glibc_versions)


def test_a_header_only_file_has_no_loader(tmp_path) -> None:
    info = read_elf(fake_elf(tmp_path / "prog", 62))
    assert info.interpreter is None and info.needed == () and info.is_static


def test_glibc_release_is_read_from_the_banner(tmp_path) -> None:
    libc = tmp_path / "libc.so.6"
    libc.write_bytes(b"\0junk\0GNU C Library (Debian GLIBC 2.36-9+deb12u14) stable release version 2.36.\n\0more")
    assert glibc_release(libc) == (2, 36)
    libc.write_bytes(b"musl libc\0")
    assert glibc_release(libc) is None


def test_version_tuple() -> None:
    assert version_tuple("GLIBC_2.34") == (2, 34) and version_tuple("2.17") == (2, 17) and version_tuple("GLIBC_2.2.5") == (2, 2)
