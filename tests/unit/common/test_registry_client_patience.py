"""A weight sync lists its replicas patiently: the fault run killed the registry and the trainer's
next sync failed on a refused connection, ending the trainer (it came back, minus its steps since
the last checkpoint). The real registry app on a real socket, started seconds after the sync asks."""

from __future__ import annotations

import asyncio
import threading

import httpx
import pytest

from rlstack.common.ports import free_port
from rlstack.common.registry_client import RegistryClient
from rlstack.registry.app import build_app
from rlstack.registry.config import RegistrySettings
from tests.helpers.serving import BackgroundServer


def test_a_sync_waits_out_a_registry_that_is_being_restarted():
    port = free_port()
    server = BackgroundServer(build_app(RegistrySettings(probe_interval_seconds=300)), port=port)
    later = threading.Timer(4.0, server.start)  # what `rlstack up` takes to bring a killed registry back
    later.start()

    async def sync() -> list:
        client = RegistryClient(f"http://127.0.0.1:{port}")
        try:
            return await client.sync_targets("policy")
        finally:
            await client.aclose()

    try:
        assert asyncio.run(sync()) == []  # answered, once it was back
    finally:
        later.join()
        server.stop()


def test_a_plain_listing_still_fails_fast():
    async def listing() -> None:
        client = RegistryClient(f"http://127.0.0.1:{free_port()}")
        try:
            await client.list(attempts=1)
        finally:
            await client.aclose()

    with pytest.raises(httpx.ConnectError):
        asyncio.run(listing())
