"""WSGI entry point: the console, the agent API and `/mcp`, all from one WSGI server (the Procfile's gunicorn).

Django is served as WSGI because under ASGI every request to its sync views is handed
between the event loop and a thread, which costs about as much as a small request itself
(docs/benchmarks.md, finding 27). `/mcp` is the MCP SDK's ASGI app. It runs on an event
loop of its own, in a thread of each server process, and the server's request threads
hand it their requests through a2wsgi; the same loop runs the ASGI lifespan, which starts
the SDK's session manager (without it `/mcp` answers 503). `config.asgi` serves the same
routes to an ASGI server.

An API body sent without a length (chunked) is read here, up to the limit: Django reads
only a declared Content-Length, so it would see such a body empty.
"""

from __future__ import annotations

import asyncio
import io
import json
import logging
import os
import threading
from collections.abc import Iterable
from typing import cast
from wsgiref.types import StartResponse, WSGIApplication, WSGIEnvironment

from a2wsgi import ASGIMiddleware
from a2wsgi.asgi_typing import ASGIApp as A2wsgiApp
from django.conf import settings
from django.core.wsgi import get_wsgi_application
from starlette.types import ASGIApp, Message

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

django_application = get_wsgi_application()  # sets Django up before the MCP app imports models

from approvals.errors import error_body  # noqa: E402
from approvals.mcp.http import McpEndpoint  # noqa: E402
from approvals.middleware import API_PREFIXES, GENERIC_ERRORS  # noqa: E402

log = logging.getLogger(__name__)
MCP_PATHS = frozenset({"/mcp", "/mcp/"})
LIFESPAN_STARTUP_TIMEOUT = 30.0


async def start_lifespan(app: ASGIApp) -> asyncio.Task[None]:
    """Start `app`'s ASGI lifespan; return its task once the app reports startup complete.

    The lifespan is never told to shut down: the stateless session manager holds nothing
    to hand over, and it ends with the process.
    """
    started: asyncio.Future[Message] = asyncio.get_running_loop().create_future()
    told_startup = False

    async def receive() -> Message:
        nonlocal told_startup
        if not told_startup:
            told_startup = True
            return {"type": "lifespan.startup"}
        await asyncio.Event().wait()  # no shutdown message: the process's end stops the loop
        raise AssertionError("unreachable")

    async def send(message: Message) -> None:
        if not started.done():
            started.set_result(message)

    async def lifespan() -> None:
        await app({"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}}, receive, send)

    task = asyncio.create_task(lifespan())
    message = await started
    if message["type"] != "lifespan.startup.complete":
        raise RuntimeError(f"the MCP endpoint did not start: {message.get('message', message['type'])}")
    return task


class AsgiOnOwnLoop:
    """A WSGI app that serves an ASGI app on an event loop thread, started with its lifespan on first use.

    Started lazily so that it starts in the process that serves (a WSGI server may fork
    its workers after importing this module; a loop thread would not survive the fork).
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self._lock = threading.Lock()
        self._wsgi: ASGIMiddleware | None = None
        self._lifespan: asyncio.Task[None] | None = None  # referenced, so the loop does not drop the task

    def __call__(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        return self.started()(environ, start_response)  # type: ignore[arg-type]  # a2wsgi's own WSGI aliases

    def started(self) -> ASGIMiddleware:
        """Return the WSGI side of the app, starting its loop and lifespan if this process has not yet."""
        with self._lock:
            if self._wsgi is None:
                loop = asyncio.new_event_loop()
                threading.Thread(target=loop.run_forever, name="asgi-loop", daemon=True).start()
                lifespan = asyncio.run_coroutine_threadsafe(start_lifespan(self.app), loop)
                self._lifespan = lifespan.result(timeout=LIFESPAN_STARTUP_TIMEOUT)
                self._wsgi = ASGIMiddleware(cast(A2wsgiApp, self.app), loop=loop)
            return self._wsgi


def limit_chunked_api_bodies(app: WSGIApplication) -> WSGIApplication:
    """Return `app` with chunked API bodies read up to the limit and passed on with their length, or refused.

    At most the limit is held and the rest is never read; past it the answer is the
    API's 413, as `ApiBodyLimit` gives under ASGI (declared lengths are refused by
    `ApiBodyLimitMiddleware`).
    """

    def guarded(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        chunked = "chunked" in environ.get("HTTP_TRANSFER_ENCODING", "").lower()
        if not chunked or not environ.get("PATH_INFO", "").startswith(API_PREFIXES):
            return app(environ, start_response)
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        body = environ["wsgi.input"].read(limit + 1)
        if len(body) > limit:
            return payload_too_large(environ, start_response, limit)
        environ.update({"wsgi.input": io.BytesIO(body), "CONTENT_LENGTH": str(len(body))})
        del environ["HTTP_TRANSFER_ENCODING"]
        return app(environ, start_response)

    return guarded


def payload_too_large(environ: WSGIEnvironment, start_response: StartResponse, limit: int) -> list[bytes]:
    """Answer 413 `payload_too_large` and close the connection: the unread rest of the body is never wanted."""
    log.info("Payload Too Large: %s %s", environ["REQUEST_METHOD"], environ["PATH_INFO"])  # as Django logs a 4xx
    message = GENERIC_ERRORS[413][1].format(limit=limit)
    payload = json.dumps(error_body("payload_too_large", message, limit_bytes=limit)).encode()
    headers = [("Content-Type", "application/json"), ("Content-Length", str(len(payload))), ("Connection", "close")]
    start_response("413 Request Entity Too Large", headers)
    return [payload]


def route(django_app: WSGIApplication, mcp_app: WSGIApplication) -> WSGIApplication:
    """Return a WSGI app sending `/mcp` to `mcp_app` and everything else to `django_app`."""

    def app(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        target = mcp_app if environ.get("PATH_INFO") in MCP_PATHS else django_app
        return target(environ, start_response)

    return app


application = limit_chunked_api_bodies(route(django_application, AsgiOnOwnLoop(McpEndpoint())))
