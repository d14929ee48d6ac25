"""The agent's ``*_BASE_URL``s as the sandbox sees them: each address they name (the proxy) gets a
port on the sandbox's own 127.0.0.1, and the URLs are rewritten to it (a hostname means nothing in a
namespace with no resolver and no route). Both local modes use it; they differ in what carries the
traffic (``netbridge``'s forwarder on the host's tools, ``netns``'s door in a task image)."""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit


def inside_addresses(agent_env: dict[str, str]) -> tuple[dict[str, str], dict[tuple[str, int], int]]:
    """(the environment with its base URLs pointed inside, host address -> port inside). A target
    keeps its own port inside unless another target took it first."""
    env, ports = dict(agent_env), {}
    for key, value in agent_env.items():
        url = urlsplit(value)
        if not key.endswith("_BASE_URL") or url.scheme != "http" or not url.hostname:
            continue
        target = (url.hostname, url.port or 80)
        if target not in ports:
            inside = target[1]
            while inside in ports.values():
                inside += 1
            ports[target] = inside
        env[key] = urlunsplit(url._replace(netloc=f"127.0.0.1:{ports[target]}"))
    return env, ports
