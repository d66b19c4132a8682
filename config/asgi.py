"""ASGI entry point: `/mcp` and the ASGI lifespan go to the MCP endpoint, everything else to Django.

The lifespan must reach the MCP endpoint: it starts the SDK's session manager,
without which `/mcp` answers 503. Django's ASGI handler does not speak lifespan.
"""

from __future__ import annotations

import os

from django.core.asgi import get_asgi_application
from starlette.types import ASGIApp, Receive, Scope, Send

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

django_application = get_asgi_application()  # sets Django up before the MCP app imports models

from approvals.mcp.http import McpEndpoint  # noqa: E402
from approvals.middleware import ApiBodyLimit  # noqa: E402

MCP_PATHS = frozenset({"/mcp", "/mcp/"})


def route(django_app: ASGIApp, mcp_app: ASGIApp) -> ASGIApp:
    """Return an ASGI app sending lifespan and `/mcp` to `mcp_app`, the rest to `django_app`."""
    django_app = ApiBodyLimit(django_app)  # Django would read a whole body before refusing it

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan" or (scope["type"] == "http" and scope["path"] in MCP_PATHS):
            await mcp_app(scope, receive, send)
        else:
            await django_app(scope, receive, send)

    return app


# django-stubs types an ASGI scope as dict, Starlette as MutableMapping: the same scope, so the handler is an ASGIApp.
application = route(django_application, McpEndpoint())  # type: ignore[arg-type]
