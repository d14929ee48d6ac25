"""At a stop, a model call whose caller has hung up is cancelled instead of waited for.

uvicorn drains a stopping process by waiting for every request still running (up to its 30 s),
and nothing cancels a request whose client has gone: the generation goes on for no reader. In
``rlstack up`` the env servers, whose agents make the calls, stop before the proxy, so every call
left is such a call; on a slow model (Qwen3 thinking on CPU) waiting for them cost the whole grace.
Outside a stop nothing changes: a call whose caller left still finishes and is recorded.
"""

from __future__ import annotations

import asyncio
import logging

from starlette.types import ASGIApp, Message, Receive, Scope, Send

log = logging.getLogger(__name__)
CANCEL_MESSAGE = "the caller has gone and the proxy is stopping"


class CancelGoneOnStop:
    """Wraps the model-call app; ``stopping()`` (from the server's shutdown) cancels the calls whose caller left."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.is_stopping = False
        self.gone: set[asyncio.Task] = set()
        """Calls still running whose client has disconnected."""

    def stopping(self) -> None:
        """The server stops accepting: cancel what no one waits for now, and anything whose caller leaves later."""
        self.is_stopping = True
        if self.gone:
            log.info("stopping: cancelling %d model call(s) whose caller has gone", len(self.gone))
        for task in list(self.gone):
            task.cancel(CANCEL_MESSAGE)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        first = await receive()  # the whole body: BodyGuard has read it before anything here runs
        call = asyncio.current_task()
        assert call is not None
        delivered = answered = False

        async def replay() -> Message:
            nonlocal delivered
            if delivered:
                return await receive()
            delivered = True
            return first

        async def sent(message: Message) -> None:
            nonlocal answered
            await send(message)
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                answered = True

        async def watch() -> None:
            # The body is taken, so the next message is the disconnect (uvicorn repeats it to every
            # receiver); after the answer it only says the exchange is over, and what runs then is
            # the call's own bookkeeping, never to be cut.
            while (await receive())["type"] != "http.disconnect":
                pass
            if answered:
                return
            self.gone.add(call)
            if self.is_stopping:
                call.cancel(CANCEL_MESSAGE)

        watcher = asyncio.create_task(watch())
        try:
            await self.app(scope, replay, sent)
        except asyncio.CancelledError as exc:
            if call not in self.gone or exc.args != (CANCEL_MESSAGE,):
                raise
            call.uncancel()  # ours, and no one to answer: not an error for uvicorn to print
        finally:
            watcher.cancel()
            self.gone.discard(call)
