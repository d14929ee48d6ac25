"""Starts services as child processes in dependency order and stops them in reverse.

Each service gets its own log file under the run directory; a service that dies is reported
with the tail of its log (process handling is ``common.process``, shared with tests and benches).
"""

from __future__ import annotations

import logging
import sys
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

from rlstack.common.ports import free_port
from rlstack.common.process import ServiceFailed, ServiceProcess, log_tail, start_process
from rlstack.launcher.auth import RunTokens
from rlstack.launcher.config import RunConfig, ServiceSpec

log = logging.getLogger(__name__)
__all__ = ["Running", "ServiceFailed", "Supervisor", "log_tail"]


@dataclass
class Running(ServiceProcess):
    """A started service and the spec it was started from."""

    spec: ServiceSpec | None = None


class Supervisor:
    def __init__(self, config: RunConfig, run_dir: Path, python: str = sys.executable) -> None:
        self.config = config
        self.run_dir = run_dir
        self.python = python
        self.running: dict[str, Running] = {}
        self.ports = {s.name: s.port or free_port() for s in config.services}
        self.extra_ports = {s.name: {extra: free_port() for extra in s.extra_ports} for s in config.services}
        self.tokens = RunTokens.mint() if config.auth else None

    def _addresses(self) -> dict[str, SimpleNamespace]:
        return {name: SimpleNamespace(port=port, url=f"http://127.0.0.1:{port}", **self.extra_ports[name])
                for name, port in self.ports.items()}

    def start_all(self) -> None:
        (self.run_dir / "logs").mkdir(parents=True, exist_ok=True)
        if self.tokens is not None:
            self.tokens.save(self.run_dir)
        for spec in self.config.services:
            self.start(spec)

    def start(self, spec: ServiceSpec) -> Running:
        addresses = {**self._addresses(), "run_dir": str(self.run_dir)}
        args = [a.format(**addresses) for a in spec.args]
        tokens = self.tokens.service_env(spec.module) if self.tokens is not None else {}
        env = {**tokens, **{k: v.format(**addresses) for k, v in spec.env.items()}}
        log_path = self.run_dir / "logs" / f"{spec.name}.log"
        port = self.ports[spec.name]
        python = str(Path(spec.python).absolute()) if spec.python else self.python
        if not Path(python).exists():
            raise ServiceFailed(f"{spec.name}: no interpreter at {python} (run `make setup`)")
        cmd = [python, "-m", spec.module, "--port", str(port), *args]
        log.info("starting %s: %s", spec.name, " ".join(cmd[1:]))
        started = start_process(spec.name, cmd, port, log_path, env=env, new_session=True)
        running = Running(started.name, started.port, started.proc, started.log_path, spec)
        self.running[spec.name] = running
        running.wait_ready(spec.ready_path, spec.ready_timeout_s, poll=0.2)
        log.info("%s ready at %s", spec.name, running.url)
        return running

    def token(self, name: str) -> str | None:
        """The bearer token service ``name``'s routes want (None: auth is off)."""
        return self.tokens.token_for(self.running[name].spec.module) if self.tokens is not None else None

    def check_alive(self, except_for: str | None = None) -> None:
        for svc in self.running.values():
            if svc.spec.name != except_for and svc.proc.poll() is not None:
                raise ServiceFailed(f"{svc.spec.name} died with {svc.proc.returncode}:\n{log_tail(svc.log_path)}")

    def stop_all(self, grace_s: float = 60.0) -> dict[str, int]:
        """SIGTERM in reverse start order; returns each service's exit code. The grace outlasts the
        replica sidecar's own 30 s for stopping vLLM, so a slow vLLM never gets the sidecar killed."""
        codes = {}
        for name in reversed(list(self.running)):
            svc = self.running[name]
            if svc.proc.poll() is None:
                code = svc.terminate(grace_s)
                if code == -9:
                    log.warning("%s ignored SIGTERM for %.0fs and was killed", name, grace_s)
            codes[name] = svc.proc.returncode
        return codes
