"""File operations for directories an agent can write, which never follow a symlink out.

An agent under training writes into its trial's ``agent/`` directory (and a verifier into
``verifier/``); the env server and the phase runner then write, read and remove files there.
A plain ``open(path)`` follows whatever the agent planted (``exit_code.txt`` -> the batcher's
log), so every operation here walks from a trusted directory (``within``: resolved normally,
because the operator chose it) one component at a time with ``O_NOFOLLOW | O_DIRECTORY`` and
acts on the last name relative to that directory's descriptor: a symlink anywhere below
``within`` is refused (``UnsafePath``), a planted name is replaced, never written through.
Reads take regular files only (a FIFO would block, a device would never end), size-capped.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
READ_LIMIT = 1 << 20
"""Default cap on a read: the files read back (outcomes, rewards, exit codes) are tiny."""


class UnsafePath(OSError):
    """A path below the trusted directory is a symlink, leaves it, or is not what was expected."""


def _parts(path: Path, within: Path) -> tuple[Path, tuple[str, ...]]:
    """``within`` resolved (trusted), and the names from it to ``path`` (lexically inside it)."""
    target, base = os.path.normpath(os.path.abspath(path)), os.path.normpath(os.path.abspath(within))
    if target != base and not target.startswith(base.rstrip("/") + "/"):
        raise UnsafePath(errno.EXDEV, f"{path} is not inside {within}")
    return Path(os.path.realpath(base)), tuple(p for p in target[len(base):].split("/") if p)


def _open_below(root: Path, parts: tuple[str, ...], create: bool) -> int:
    fd = os.open(root, DIR_FLAGS)
    try:
        for name in parts:
            if create:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(name, 0o755, dir_fd=fd)
            try:
                child = os.open(name, DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise UnsafePath(exc.errno, f"{name} under {root} is a symlink or not a directory") from None
                raise
            os.close(fd)
            fd = child
        return fd
    except BaseException:
        os.close(fd)
        raise


@contextlib.contextmanager
def opened_dir(path: Path, within: Path, create: bool = False) -> Iterator[int]:
    """A descriptor of directory ``path``, reached from ``within`` without following a symlink;
    ``create`` makes missing directories on the way (0755)."""
    root, parts = _parts(path, within)
    fd = _open_below(root, parts, create)
    try:
        yield fd
    finally:
        os.close(fd)


def makedirs(path: Path, within: Path) -> None:
    with opened_dir(path, within, create=True):
        pass


def _unlink_name(name: str, dir_fd: int) -> None:
    """Remove whatever is at ``name`` (file, symlink, or a tree the agent put there)."""
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(st.st_mode):
        shutil.rmtree(name, dir_fd=dir_fd)
    else:
        os.unlink(name, dir_fd=dir_fd)


def _create(name: str, dir_fd: int, mode: int = 0o644) -> int:
    """A new regular file at ``name``; ``O_EXCL`` never follows a symlink (one planted meanwhile fails)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    return os.open(name, flags, mode, dir_fd=dir_fd)


def open_output(path: Path, within: Path) -> int:
    """A fresh file for writing at ``path`` (what was there is removed first); returns its fd."""
    with opened_dir(path.parent, within) as dir_fd:
        _unlink_name(path.name, dir_fd)
        return _create(path.name, dir_fd)


def write_bytes(path: Path, data: bytes, within: Path, atomic: bool = True) -> None:
    """``path`` holds ``data``. ``atomic``: written to a fresh temp name, then renamed over ``path``
    (rename replaces a planted symlink or file without following it; readers never see half)."""
    with opened_dir(path.parent, within) as dir_fd:
        if atomic:
            tmp = f".{path.name}.{secrets.token_hex(4)}.tmp"
            fd = _create(tmp, dir_fd)
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
                try:
                    os.rename(tmp, path.name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
                except IsADirectoryError:  # a directory planted under the name: replace it too
                    _unlink_name(path.name, dir_fd)
                    os.rename(tmp, path.name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp, dir_fd=dir_fd)
                raise
        else:
            _unlink_name(path.name, dir_fd)
            with os.fdopen(_create(path.name, dir_fd), "wb") as f:
                f.write(data)


def write_text(path: Path, text: str, within: Path, atomic: bool = True) -> None:
    write_bytes(path, text.encode(), within, atomic=atomic)


def read_bytes(path: Path, within: Path, limit: int = READ_LIMIT) -> bytes:
    """The first ``limit`` bytes of regular file ``path``; ``FileNotFoundError`` if absent,
    ``UnsafePath`` if it is a symlink, a FIFO, a device or a directory."""
    with opened_dir(path.parent, within) as dir_fd:
        try:
            fd = os.open(path.name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise UnsafePath(exc.errno, f"{path} is a symlink") from None
            raise
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise UnsafePath(errno.EINVAL, f"{path} is not a regular file")
            return f.read(limit)


def read_text(path: Path, within: Path, limit: int = READ_LIMIT) -> str:
    return read_bytes(path, within, limit).decode(errors="replace")


def tail(path: Path, within: Path, chars: int = 2000) -> str:
    """The end of a log the sandbox wrote, for an error message; what went wrong reading it otherwise."""
    try:
        return read_text(path, within).strip()[-chars:]
    except OSError as exc:
        return f"(no output: {exc})"


def is_file(path: Path, within: Path) -> bool:
    """A regular file (not a symlink to one) at ``path``."""
    try:
        with opened_dir(path.parent, within) as dir_fd:
            return stat.S_ISREG(os.stat(path.name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except (FileNotFoundError, NotADirectoryError, UnsafePath):
        return False


def unlink(path: Path, within: Path) -> None:
    """Remove ``path`` (a tree too) if present; a symlink is removed, never its target."""
    with opened_dir(path.parent, within) as dir_fd:
        _unlink_name(path.name, dir_fd)


def clear_dir(path: Path, within: Path) -> None:
    """Empty directory ``path`` (created if missing) without following anything planted in it."""
    with opened_dir(path, within, create=True) as dir_fd:
        for name in os.listdir(dir_fd):
            _unlink_name(name, dir_fd)
