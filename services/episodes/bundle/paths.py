"""Where the agent bundle sits inside a trial's container and where each agent's program is in it.

The bundle is built for one fixed path: every program in it is patched to load its libraries from
``BUNDLE_LIB`` and the wrappers name absolute paths, so it works only when mounted at
``BUNDLE_MOUNT`` (read-only: a bind mount in the local sandbox, an emptyDir filled by an init
container on Kubernetes). Nothing here may depend on the image: no PATH, no PYTHONHOME.
"""

from __future__ import annotations

BUNDLE_MOUNT = "/opt/rlstack"
BUNDLE_BIN = BUNDLE_MOUNT + "/bin"
BUNDLE_LIB = BUNDLE_MOUNT + "/lib"
BUNDLE_LOADER = BUNDLE_LIB + "/ld-linux-x86-64.so.2"
"""The glibc loader every patched program names as its interpreter (``PT_INTERP``)."""

PYTHON = BUNDLE_BIN + "/python3"
"""CPython with the built-in agent's packages; finds its stdlib from its own location (no PYTHONHOME)."""
BUILTIN_AGENT_ARGV = (PYTHON, "-I", "-m", "rlstack.agent")
"""The built-in agent. ``-I``: no ``PYTHON*`` variable of the image, no user site and not /app
(the task's files) on ``sys.path``, so nothing the task or the agent writes is imported."""
NODE = BUNDLE_BIN + "/node"
"""Node.js, for scaffolds written in JavaScript (none of the shipped agents needs it)."""
CLAUDE = BUNDLE_BIN + "/claude"
"""claude-code's native (Bun-compiled) executable, patched."""
CODEX = BUNDLE_BIN + "/codex"
"""codex's static musl executable, with its package layout beside it (``codex-path``, ``codex-resources``)."""
OPENCODE = BUNDLE_BIN + "/opencode"
"""opencode's Bun-compiled executable, patched."""

AGENT_PROGRAMS = {"builtin": PYTHON, "claude-code": CLAUDE, "codex": CODEX, "opencode": OPENCODE, "node": NODE}
"""Each bundle entry's program, by the name ``--agents`` and the manifest use."""
