"""``python -m rlstack.episodes.inside.become UID GID -- COMMAND...``: a trial phase as the image's user.

The local image sandbox is set up by bubblewrap as root (its mounts, the trial's logs and the
bundle, wherever on the host they are), which then runs this with only ``CAP_SETUID`` and
``CAP_SETGID``: it drops every supplementary group, takes the image's gid and uid (which clears
every capability it had) and execs the phase's command, so the agent runs as the image's ``USER``
in the host's own uid space: files it makes are that uid's, and the image's root-owned tree is not
its to change. bubblewrap's ``no_new_privs`` keeps a setuid program from giving anything back.
"""

from __future__ import annotations

import os
import sys


def main(argv: list[str]) -> int:
    if len(argv) < 4 or argv[2] != "--":
        print("usage: python -m rlstack.episodes.inside.become UID GID -- COMMAND...", file=sys.stderr)
        return 125
    uid, gid, command = int(argv[0]), int(argv[1]), argv[3:]
    os.setgroups([])
    os.setgid(gid)
    os.setuid(uid)
    if os.getuid() != uid or os.geteuid() != uid:
        print(f"become: still uid {os.geteuid()}", file=sys.stderr)
        return 125
    try:
        os.execvp(command[0], command)
    except OSError as exc:
        print(f"become: cannot run {command[0]}: {exc}", file=sys.stderr)
        return 127


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
