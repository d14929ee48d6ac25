"""Ports picked for our services stay out of the kernel's ephemeral range (where outgoing
connections and other programs' ``bind(0)`` land between our pick and our bind), are free, and
are never handed out twice by one process."""

from __future__ import annotations

import socket

from rlstack.common import ports


def test_ports_come_from_below_the_ephemeral_range_free_and_distinct():
    low, _ = ports.ephemeral_range()
    picked = [ports.free_port() for _ in range(50)]
    assert len(set(picked)) == 50
    assert all(ports.LOWEST <= p < low for p in picked)
    for port in picked[:5]:
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))  # free when handed out


def test_the_range_is_read_from_the_kernel_with_linuxs_default_as_fallback(tmp_path):
    custom = tmp_path / "range"
    custom.write_text("40000\t50000\n")
    assert ports.ephemeral_range(custom) == (40000, 50000)
    assert ports.ephemeral_range(tmp_path / "missing") == (32768, 60999)


def test_without_room_below_the_range_the_kernel_picks(monkeypatch):
    monkeypatch.setattr(ports, "ephemeral_range", lambda: (ports.LOWEST + 10, 60999))
    picked = {ports.free_port() for _ in range(10)}
    assert len(picked) == 10 and all(p >= ports.LOWEST + 10 for p in picked)
