"""Just enough ELF reading for the agent bundle: a file's machine, its loader, its shared-library
needs and the glibc versions it asks for.

The builder reads the bundled programs with it (which to patch, what ``ldd`` must resolve, whether
a program still depends on the image's libc) and ``check.py`` reads a task image's ``/bin/sh``
(what architecture the image is). Only headers, program headers and the dynamic segment are read,
so a 400 MB Bun binary costs a few kilobytes of I/O. No binutils needed.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

ELF_MAGIC = b"\x7fELF"

MACHINES = {3: "i686", 8: "mips", 20: "ppc", 21: "ppc64le", 22: "s390x", 40: "armv7l", 62: "x86_64",
            183: "aarch64", 243: "riscv64", 258: "loongarch64"}
"""``e_machine`` as ``uname -m`` names it (ppc64 big-endian is told apart by the byte order)."""

ET_EXEC, ET_DYN = 2, 3
PT_LOAD, PT_DYNAMIC, PT_INTERP = 1, 2, 3
DT_NULL, DT_NEEDED, DT_STRTAB, DT_STRSZ, DT_RPATH, DT_RUNPATH = 0, 1, 5, 10, 15, 29
DT_VERNEED, DT_VERNEEDNUM = 0x6FFFFFFE, 0x6FFFFFFF


class NotElf(ValueError):
    """The file is not an ELF object (a script, a text file, too short)."""


@dataclass(frozen=True)
class ElfHeader:
    """What the first 64 bytes say."""

    bits: int
    little_endian: bool
    type: int
    machine: int

    @property
    def arch(self) -> str:
        """The ``uname -m`` name of the machine this object runs on."""
        name = MACHINES.get(self.machine, f"e_machine={self.machine}")
        if name == "ppc64le" and not self.little_endian:
            return "ppc64"
        if name == "ppc" and self.bits == 64:
            return "ppc64"
        return name


@dataclass(frozen=True)
class ElfInfo:
    """What the dynamic loader will do with the file."""

    header: ElfHeader
    interpreter: str | None = None
    """``PT_INTERP``: the loader the kernel starts (None for static programs and shared libraries)."""
    dynamic: bool = False
    """Has a dynamic segment (static-pie programs have one, but no ``DT_NEEDED``)."""
    needed: tuple[str, ...] = ()
    rpath: str | None = None
    runpath: str | None = None
    glibc_versions: tuple[str, ...] = field(default=())
    """The ``GLIBC_2.x`` symbol versions it asks of its libraries (from ``DT_VERNEED``)."""

    @property
    def is_static(self) -> bool:
        """Needs no loader and no library: runs on any Linux of its architecture (codex, busybox)."""
        return self.interpreter is None and not self.needed

    @property
    def min_glibc(self) -> tuple[int, int] | None:
        """The newest ``GLIBC_2.x`` version it asks for: the oldest glibc it can run on."""
        versions = [version_tuple(v) for v in self.glibc_versions]
        return max(versions) if versions else None


def version_tuple(text: str) -> tuple[int, int]:
    """``GLIBC_2.34`` or ``2.34`` as ``(2, 34)``."""
    major, _, minor = text.removeprefix("GLIBC_").partition(".")
    return int(major), int(minor.split(".")[0] or 0)


def is_elf(path: Path) -> bool:
    try:
        with path.open("rb") as f:
            return f.read(4) == ELF_MAGIC
    except OSError:
        return False


def read_header(path: Path) -> ElfHeader:
    """The ELF identification and header of ``path``; ``NotElf`` if it is not one."""
    with path.open("rb") as f:
        return _header(f.read(64), path)


def _header(raw: bytes, path: Path) -> ElfHeader:
    if len(raw) < 20 or raw[:4] != ELF_MAGIC:
        raise NotElf(f"{path} is not an ELF file")
    bits = {1: 32, 2: 64}.get(raw[4])
    little = {1: True, 2: False}.get(raw[5])
    if bits is None or little is None:
        raise NotElf(f"{path} has an unknown ELF class or byte order")
    e_type, e_machine = struct.unpack_from("<HH" if little else ">HH", raw, 16)
    return ElfHeader(bits=bits, little_endian=little, type=e_type, machine=e_machine)


def read_elf(path: Path) -> ElfInfo:
    """Header, loader, needed libraries, search paths and glibc versions of a 64-bit
    little-endian ELF file (the only kind the bundle holds); other kinds give the header alone."""
    with path.open("rb") as f:
        raw = f.read(64)
        header = _header(raw, path)
        if header.bits != 64 or not header.little_endian:
            return ElfInfo(header=header)
        phoff, = struct.unpack_from("<Q", raw, 32)
        phentsize, phnum = struct.unpack_from("<HH", raw, 54)
        f.seek(phoff)
        table = f.read(phentsize * phnum)
        loads, interp, dyn = [], None, None
        for i in range(phnum):
            p_type, _, p_offset, p_vaddr, _, p_filesz, _, _ = struct.unpack_from("<IIQQQQQQ", table, i * phentsize)
            if p_type == PT_LOAD:
                loads.append((p_vaddr, p_offset, p_filesz))
            elif p_type == PT_INTERP:
                f.seek(p_offset)
                interp = f.read(p_filesz).split(b"\0")[0].decode()
            elif p_type == PT_DYNAMIC:
                dyn = (p_offset, p_filesz)
        if dyn is None:
            return ElfInfo(header=header, interpreter=interp)
        return _dynamic(f, header, interp, loads, *dyn)


def _dynamic(f: BinaryIO, header: ElfHeader, interp: str | None, loads: list, offset: int, size: int) -> ElfInfo:
    f.seek(offset)
    raw = f.read(size)
    entries = [struct.unpack_from("<qQ", raw, i) for i in range(0, len(raw) - 15, 16)]
    tags: dict[int, int] = {}
    needed_offsets: list[int] = []
    for tag, value in entries:
        if tag == DT_NULL:
            break
        if tag == DT_NEEDED:
            needed_offsets.append(value)
        else:
            tags.setdefault(tag, value)

    def file_offset(vaddr: int) -> int:
        for start, off, filesz in loads:
            if start <= vaddr < start + filesz:
                return off + vaddr - start
        return vaddr  # shared objects linked at 0 map offsets one to one

    strtab = b""
    if DT_STRTAB in tags:
        f.seek(file_offset(tags[DT_STRTAB]))
        strtab = f.read(tags.get(DT_STRSZ, 0))

    def string(at: int) -> str:
        return strtab[at:strtab.index(b"\0", at)].decode(errors="replace") if at < len(strtab) else ""

    glibc: set[str] = set()
    if DT_VERNEED in tags:
        f.seek(file_offset(tags[DT_VERNEED]))
        block = f.read(64 * 1024)
        at = 0
        for _ in range(tags.get(DT_VERNEEDNUM, 0)):
            _, count, _, aux, nxt = struct.unpack_from("<HHIII", block, at)
            a = at + aux
            for _ in range(count):
                _, _, _, name, anext = struct.unpack_from("<IHHII", block, a)
                if (text := string(name)).startswith("GLIBC_2."):
                    glibc.add(text)
                a += anext
            if not nxt:
                break
            at += nxt
    return ElfInfo(header=header, interpreter=interp, dynamic=True,
                   needed=tuple(string(o) for o in needed_offsets),
                   rpath=string(tags[DT_RPATH]) if DT_RPATH in tags else None,
                   runpath=string(tags[DT_RUNPATH]) if DT_RUNPATH in tags else None,
                   glibc_versions=tuple(sorted(glibc, key=version_tuple)))


GLIBC_RELEASE = re.compile(rb"GNU C Library [^\n\0]*?release version (\d+)\.(\d+)")


def glibc_release(libc: Path) -> tuple[int, int] | None:
    """The glibc release a ``libc.so.6`` is, from its version banner (``... release version 2.36``)."""
    with libc.open("rb") as f:
        data = f.read()
    match = GLIBC_RELEASE.search(data)
    return (int(match.group(1)), int(match.group(2))) if match else None
