"""Who an MCP request comes from, and how its handlers reach the database.

The HTTP layer (`approvals.mcp.http`) puts the authenticated agent (and, for an OAuth
token, the person it acts for) into the ASGI scope under these keys; handlers read
them from there, never from the message body.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import ParamSpec, TypeVar

import mcp.types as types
from asgiref.sync import sync_to_async
from django.contrib.auth.models import User
from django.db import close_old_connections
from mcp.server import ServerRequestContext
from mcp.shared.exceptions import MCPError
from starlette.requests import Request

from agents.models import Agent
from audit.typealiases import JSONObject

P = ParamSpec("P")
R = TypeVar("R")

AGENT_SCOPE_KEY = "gatehouse.agent"
ON_BEHALF_OF_SCOPE_KEY = "gatehouse.on_behalf_of"  # the person an OAuth token acts for (None: a static token)


def orm_work(function: Callable[P, R]) -> Callable[P, Awaitable[R]]:
    """Run `function` in a worker thread as one unit of database work, like a Django request.

    The SDK runs handlers in its own tasks, outside the request's thread-sensitive
    context, so Django's request signals never close these threads' connections:
    done here instead, before (a connection broken meanwhile is replaced) and after
    (it goes back to the pool).
    """

    def unit(*args: P.args, **kwargs: P.kwargs) -> R:
        close_old_connections()
        try:
            return function(*args, **kwargs)
        finally:
            close_old_connections()

    return sync_to_async(unit)


def request_agent(ctx: ServerRequestContext[JSONObject, Request]) -> Agent:
    """Return the agent the HTTP layer authenticated for this request (identity never comes from the model)."""
    agent = ctx.request.scope.get(AGENT_SCOPE_KEY) if ctx.request is not None else None
    if not isinstance(agent, Agent):
        # Only reachable if the server is mounted without Gatehouse's HTTP wrapper.
        raise MCPError(types.INVALID_REQUEST, "This request is not authenticated.")
    return agent


def request_person(ctx: ServerRequestContext[JSONObject, Request]) -> User | None:
    """Return the person an OAuth token acts for (None for a static agent token), as the HTTP layer found it."""
    person = ctx.request.scope.get(ON_BEHALF_OF_SCOPE_KEY) if ctx.request is not None else None
    return person if isinstance(person, User) else None
