"""rlstack's own env client keys each post, so a retry after a lost answer lands the group once (real batcher app)."""

import asyncio

import httpx

from rlstack.batcher.app import build_app
from rlstack.batcher.config import BatcherSettings
from rlstack.common.batcher_client import BatcherClient
from tests.helpers.groups import env_registration, make_group, trainer_registration
from tests.helpers.serving import served


class LosesFirstAnswer(httpx.AsyncHTTPTransport):
    """A real HTTP transport whose first /scored_data answer is lost on the way back (the post did land)."""

    def __init__(self) -> None:
        super().__init__()
        self.lost = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await super().handle_async_request(request)
        if request.url.path == "/scored_data" and self.lost == 0:
            await response.aread()
            self.lost += 1
            raise httpx.ReadError("connection reset after the batcher answered", request=request)
        return response


def test_retried_post_after_a_lost_answer_lands_once(tmp_path):
    app = build_app(BatcherSettings(data_dir=tmp_path))
    with served(app) as url:
        httpx.post(f"{url}/register", json=trainer_registration(batch_size=4)).raise_for_status()
        httpx.post(f"{url}/register-env", json=env_registration(group_size=2)).raise_for_status()

        async def post() -> int:
            client = BatcherClient(url)
            transport = LosesFirstAnswer()
            client._client._transport = transport  # the client's own retry loop runs unchanged
            try:
                await client.post_group(make_group(seed=3))
            finally:
                await client.aclose()
            return transport.lost

        assert asyncio.run(post()) == 1
        assert httpx.get(f"{url}/status").json()["queue_size"] == 1
