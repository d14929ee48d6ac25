"""The trainer and proxy images build (under podman, from a debootstrap base) and a service from
each answers /healthz, then exits 0 on SIGTERM: python is PID 1 and gets the signal itself.

The builds run in the background from the session's start (``tests/helpers/prebuild.py``); these
tests run last and wait for them."""

from __future__ import annotations

import subprocess

import httpx
import pytest

from tests.conftest import free_port
from tests.helpers.prebuild import SESSION
from tests.helpers.wait import wait_until
from tests.images.podman import LIMITS, PODMAN, missing_tools, removed_after, run


@pytest.fixture(scope="module", autouse=True)
def podman_available():
    missing = missing_tools()
    if missing:
        pytest.fail(f"missing {missing}: `make setup-images` installs them")


def serve_and_stop(image: str, module: str, env: dict[str, str], port: int) -> None:
    name = f"rlstack-smoke-{port}"
    env_args = [a for k, v in env.items() for a in ("-e", f"{k}={v}")]
    run(*PODMAN, "run", "-d", "--name", name, "--network=host", *LIMITS, *env_args, image, "python", "-m", module)
    try:
        def healthy() -> bool:
            try:
                return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200
            except httpx.HTTPError:
                return False

        wait_until(healthy, timeout=180, interval=0.5)
        assert run(*PODMAN, "inspect", "-f", "{{.Config.User}}", name).stdout.strip() == "10001"
        run(*PODMAN, "stop", "-t", "30", name)
        code = run(*PODMAN, "inspect", "-f", "{{.State.ExitCode}}", name).stdout.strip()
        assert code == "0", run(*PODMAN, "logs", name, check=False).stdout[-2000:]
    finally:
        subprocess.run([*PODMAN, "rm", "-f", name], capture_output=True)


@pytest.mark.prebuilt("image-trainer")
def test_trainer_image_runs_a_service():
    with removed_after("localhost/rlstack-trainer:test") as image:
        SESSION.wait("image-trainer")
        port = free_port()
        serve_and_stop(image, "rlstack.registry", {"RLSTACK_REGISTRY_PORT": str(port)}, port)
        # The trainer's own imports (torch, transformers, peft) resolve in the image.
        run(*PODMAN, "run", "--rm", *LIMITS, image, "python", "-c", "import torch, transformers, peft, rlstack.trainer.loop")


@pytest.mark.prebuilt("image-proxy")
def test_proxy_image_runs_the_proxy():
    with removed_after("localhost/rlstack-proxy:test") as image:
        SESSION.wait("image-proxy")
        port = free_port()
        serve_and_stop(image, "rlstack.proxy", {"RLSTACK_PROXY_PORT": str(port), "RLSTACK_PROXY_TRIALS_DIR": "/tmp/trials",
                                                "RLSTACK_PROXY_REGISTRY_URL": f"http://127.0.0.1:{free_port()}"}, port)
