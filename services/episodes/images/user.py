"""The user an image's containers run as, in numbers: what a pod's ``runAsUser`` must say.

Kubernetes verifies ``runAsNonRoot`` only against a numeric user, and a sandbox pod's identity is
chosen by the env server, which cannot look inside the image; so ``rlstack tasks build`` turns the
image's ``USER`` into ``uid:gid`` once, from the image's own ``/etc/passwd`` and ``/etc/group``,
and the lock file carries it. No ``USER`` (or ``root``, ``0``) is root: such a task's pod gets
the root profile (docs/agent-trials.md), never a silent non-root user its files were not made for.
"""

from __future__ import annotations

from pathlib import Path


class ImageUserError(LookupError):
    """The image names a user or group its own files do not define."""


def _table(layers: list[Path], name: str) -> dict[str, list[str]]:
    """``etc/<name>`` of the topmost layer that has it, by entry name."""
    for layer in layers:
        path = layer / "etc" / name
        if path.is_file():
            rows = [line.split(":") for line in path.read_text(errors="replace").splitlines() if line and not line.startswith("#")]
            return {row[0]: row for row in rows if len(row) >= 3}
    return {}


def numeric_user(user: str | None, layers: list[Path]) -> str:
    """``uid:gid`` for ``USER user`` in an image whose filesystem is ``layers`` (topmost first)."""
    if not user:
        return "0:0"
    name, _, group = user.partition(":")
    passwd = _table(layers, "passwd")
    if name.isdigit():
        uid, primary = name, next((row[3] for row in passwd.values() if len(row) > 3 and row[2] == name), "0")
    elif name in passwd and len(passwd[name]) > 3:
        uid, primary = passwd[name][2], passwd[name][3]
    else:
        raise ImageUserError(f"USER {user}: no user {name!r} in the image's /etc/passwd")
    if not group:
        return f"{uid}:{primary}"
    if group.isdigit():
        return f"{uid}:{group}"
    groups = _table(layers, "group")
    if group not in groups:
        raise ImageUserError(f"USER {user}: no group {group!r} in the image's /etc/group")
    return f"{uid}:{groups[group][2]}"


def home_of(user: str, layers: list[Path]) -> str:
    """The home directory ``/etc/passwd`` gives the uid of ``uid:gid``; ``/root`` for root, ``/`` if none."""
    uid = user.partition(":")[0]
    home = next((row[5] for row in _table(layers, "passwd").values() if len(row) > 5 and row[2] == uid), None)
    return home or ("/root" if uid == "0" else "/")
