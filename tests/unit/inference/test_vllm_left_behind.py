"""A sidecar killed alone leaves its vLLM serving (vLLM runs in a session of its own). The fault run
found the next sidecar then took that orphan's answers for its own vLLM's, registered it, and died
when its own vLLM could not bind the port, over and over. Now a sidecar stops the vLLM an earlier
one recorded before it starts its own, and refuses a port another process holds. Real processes:
a listener started as the vLLM command (what is tested is the process handling, not vLLM)."""

from __future__ import annotations

import sys
import time

import pytest

from rlstack.common.ports import free_port
from rlstack.inference import replica
from rlstack.inference.replica import VllmProcess, port_taken

LISTEN = ("import socket, sys, time; s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); "
          "s.bind(('127.0.0.1', int(sys.argv[sys.argv.index('--port') + 1]))); s.listen(); time.sleep(600)")


def server(port: int) -> VllmProcess:
    return VllmProcess([sys.executable, "-c", LISTEN, "--port", str(port)], {}, f"http://127.0.0.1:{port}", "policy", None)


def wait_taken(port: int) -> None:
    deadline = time.monotonic() + 10
    while not port_taken(port):
        assert time.monotonic() < deadline, f"nothing listens on {port}"
        time.sleep(0.05)


@pytest.fixture(autouse=True)
def pid_dir(tmp_path, monkeypatch):
    monkeypatch.setattr(replica, "PID_DIR", tmp_path)


def test_a_new_sidecar_stops_the_vllm_a_killed_one_left_and_starts_its_own():
    port = free_port()
    orphan = server(port)
    orphan.start()
    wait_taken(port)  # its sidecar is killed here: nothing stops this process

    own = server(port)
    own.start()
    try:
        assert orphan.proc.wait(10) == -9
        wait_taken(port)
        assert own.proc.poll() is None
    finally:
        own.stop(grace=5)
    assert not (replica.PID_DIR / f"{port}.pid").exists()


def test_a_port_held_by_another_process_is_refused_not_taken_for_ours():
    port = free_port()
    foreign = server(port)
    foreign.start()
    wait_taken(port)
    (replica.PID_DIR / f"{port}.pid").unlink()  # not one a sidecar of ours recorded
    ours = server(port)
    ours.port_wait_seconds = 1
    try:
        with pytest.raises(RuntimeError, match=f"port {port} is held by another process"):
            ours.start()
        assert foreign.proc.poll() is None and ours.proc is None
    finally:
        foreign.stop(grace=5)


def test_the_record_is_the_command_line_proc_shows_never_an_empty_one():
    """The fault run on 2026-11-27: a record read from /proc right after Popen can be empty (the exec
    has not set up the new image yet), and an empty record never matches, so the orphan lived on."""
    port = free_port()
    orphan = server(port)
    orphan.start()
    try:
        pid, _, recorded = (replica.PID_DIR / f"{port}.pid").read_bytes().partition(b"\n")
        assert int(pid) == orphan.proc.pid
        assert recorded == b"".join(a.encode() + b"\0" for a in orphan.argv)
        wait_taken(port)
        assert replica._cmdline(orphan.proc.pid) == recorded
    finally:
        orphan.stop(grace=5)


def test_a_sidecar_that_started_no_vllm_leaves_the_orphans_record_for_the_next():
    """The same fault run: a sidecar that failed before starting its vLLM removed, as it stopped, the
    record of the orphan it could not reap; every later sidecar then found the port held, for ever."""
    port = free_port()
    orphan = server(port)
    orphan.start()
    wait_taken(port)  # its sidecar is killed here
    failed = server(port)
    assert failed.stop(grace=5) is None  # it never started one (here: it did not get that far)
    assert (replica.PID_DIR / f"{port}.pid").exists()
    own = server(port)
    own.start()
    try:
        assert orphan.proc.wait(10) == -9
        wait_taken(port)
    finally:
        own.stop(grace=5)
