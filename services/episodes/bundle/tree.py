"""Digests of directory trees: the bundle's content digest (what a pod's copy can be checked
against) and the digest of its inputs' sizes and times (what makes a second build a no-op).
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Iterable
from pathlib import Path


def content_digest(root: Path, skip: Iterable[str] = ()) -> tuple[str, int, int]:
    """``sha256:`` over every entry's relative path, type, mode and content (a link's target),
    in sorted order; with the total size of the files and their count."""
    skipped = set(skip)
    h = hashlib.sha256()
    size = files = 0
    for path in _walk(root):
        rel = path.relative_to(root).as_posix()
        if rel in skipped:
            continue
        st = path.lstat()
        if stat.S_ISLNK(st.st_mode):
            h.update(f"L {rel} {os.readlink(path)}\n".encode())
        elif stat.S_ISDIR(st.st_mode):
            h.update(f"D {rel}\n".encode())
        else:
            h.update(f"F {rel} {stat.S_IMODE(st.st_mode):o} {st.st_size} {_file_sha256(path)}\n".encode())
            size += st.st_size
            files += 1
    return f"sha256:{h.hexdigest()}", size, files


def inputs_digest(paths: Iterable[Path], extra: Iterable[str] = ()) -> str:
    """``sha256:`` over each input file's (or each file under an input directory's) path, size and
    modification time, plus ``extra`` strings (the builder's settings and code)."""
    h = hashlib.sha256()
    for text in extra:
        h.update(f"X {text}\n".encode())
    for top in paths:
        top = Path(top)
        entries = _walk(top) if top.is_dir() else [top]
        for path in entries:
            try:
                st = path.stat()
            except FileNotFoundError:
                h.update(f"- {path}\n".encode())
                continue
            h.update(f"{path} {st.st_size} {st.st_mtime_ns}\n".encode())
    return f"sha256:{h.hexdigest()}"


def _walk(root: Path) -> list[Path]:
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        base = Path(dirpath)
        out += [base / d for d in dirnames] + [base / f for f in sorted(filenames)]
    return sorted(out)


def _file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()
