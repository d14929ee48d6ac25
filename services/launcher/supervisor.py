"""Starts services as child processes in dependency order, brings back one that dies, and
stops them in reverse.

Each service gets its own log file under the run directory. A service that dies after it was
ready is started again on its own port (so every other service's URLs stay right) after a
back-off that doubles with each death in a row, as a Deployment restarts a container; one that
dies more often than its ``restart.max_restarts`` in a row ends the run as a restart loop,
reported with the tail of its log. Restarts are logged and written to ``<run>/restarts.json``
(process handling is ``common.process``, shared with tests and benches).
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

from rlstack.common.ports import free_port
from rlstack.common.process import ServiceFailed, ServiceProcess, log_tail, start_process
from rlstack.launcher.auth import RunTokens
from rlstack.launcher.config import RunConfig, ServiceSpec
from rlstack.launcher.service_settings import command_args

log = logging.getLogger(__name__)
__all__ = ["Running", "ServiceFailed", "Supervisor", "log_tail"]


@dataclass
class Running(ServiceProcess):
    """A started service and the spec it was started from."""

    spec: ServiceSpec | None = None
    started_at: float = field(default_factory=time.monotonic)


@dataclass
class Restarts:
    """One service's deaths and restarts, for ``restarts.json`` and the decision to go on."""

    total: int = 0
    in_a_row: int = 0
    due_at: float | None = None
    """When a dead service is to be started again; None while it runs."""
    exit_codes: list[int] = field(default_factory=list)


class Supervisor:
    def __init__(self, config: RunConfig, run_dir: Path, python: str = sys.executable) -> None:
        self.config = config
        self.run_dir = run_dir
        self.python = python
        self.running: dict[str, Running] = {}
        self.ports = {s.name: s.port or free_port() for s in config.services}
        self.extra_ports = {s.name: {extra: free_port() for extra in s.extra_ports} for s in config.services}
        self.tokens = RunTokens.mint() if config.auth else None
        self.restarts: dict[str, Restarts] = {s.name: Restarts() for s in config.services}

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
        args = command_args(spec, addresses)
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

    def check_alive(self, except_for: Collection[str] = ()) -> None:
        """Restart what died and is due (never those ``except_for``, whose exits the caller judges);
        raise ``ServiceFailed`` for a service past its restarts in a row."""
        now = time.monotonic()
        for name, svc in list(self.running.items()):
            if name in except_for or svc.proc.poll() is None:
                continue
            policy, record = svc.spec.restart, self.restarts[name]
            if record.due_at is None:  # just found dead
                if now - svc.started_at >= policy.reset_after_s:
                    record.in_a_row = 0
                record.exit_codes.append(svc.proc.returncode)
                if record.in_a_row >= policy.max_restarts:
                    self._save_restarts()
                    raise ServiceFailed(f"{name} is in a restart loop: died {record.in_a_row + 1} times in a row "
                                        f"(last exit {svc.proc.returncode}, {policy.max_restarts} restarts allowed):\n"
                                        f"{log_tail(svc.log_path)}")
                wait = min(policy.max_backoff_s, policy.backoff_s * 2**record.in_a_row)
                record.due_at = now + wait
                log.warning("%s died with %s; restarting in %.1fs (restart %d in a row)", name, svc.proc.returncode, wait,
                            record.in_a_row + 1)
            if now >= record.due_at:
                record.total += 1
                record.in_a_row += 1
                record.due_at = None
                with svc.log_path.open("a") as out:
                    out.write(f"\n---- rlstack up: restart {record.total} after exit {svc.proc.returncode} ----\n")
                try:
                    self.start(svc.spec)
                except ServiceFailed as exc:  # dead again (the next look counts it) or still not ready: no end of the run
                    log.warning("%s did not come back ready: %s", name, str(exc).splitlines()[0])
                else:
                    log.warning("%s restarted (%d so far) and ready at %s", name, record.total, self.running[name].url)
                self._save_restarts()

    def _save_restarts(self) -> None:
        data = {name: {"restarts": r.total, "in_a_row": r.in_a_row, "exit_codes": r.exit_codes}
                for name, r in self.restarts.items() if r.exit_codes}
        (self.run_dir / "restarts.json").write_text(json.dumps(data, indent=2) + "\n")

    def stop_all(self, grace_s: float | None = None) -> dict[str, int]:
        """SIGTERM in reverse start order; returns each service's exit code (-9: killed after the
        grace, the run config's ``stop_grace_s`` unless given)."""
        grace_s = self.config.stop_grace_s if grace_s is None else grace_s
        codes = {}
        for name in reversed(list(self.running)):
            svc = self.running[name]
            if svc.proc.poll() is None:
                code = svc.terminate(grace_s)
                if code == -9:
                    log.warning("%s ignored SIGTERM for %.0fs and was killed", name, grace_s)
            codes[name] = svc.proc.returncode
        return codes
