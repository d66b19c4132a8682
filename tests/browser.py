"""Console fixtures: the demo's reviewers, a CSRF-enforcing session for each, and Chromium.

`playwright install` cannot download browsers here, so Playwright launches the
system Chromium. The switches keep it from phoning home or needing a GPU.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from html import unescape
from typing import Any

import pytest
from django.contrib.auth.models import Group, User
from django.test import Client
from playwright.sync_api import Browser, BrowserType, Playwright, sync_playwright

from approvals.models import ToolCall
from tests.conftest import AgentApi, refund

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
REVIEWER_PASSWORD = "correct horse battery"


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args: dict[str, Any]) -> dict[str, Any]:
    """Launch Debian's Chromium instead of a downloaded one."""
    return {**browser_type_launch_args, "executable_path": CHROMIUM, "args": CHROMIUM_ARGS}


# Playwright's sync API keeps an asyncio loop running in the main thread while it is
# started. pytest-playwright starts it once per session, which breaks every later test
# that calls asyncio.run() (the MCP client tests do). These overrides give each browser
# test module its own Playwright, stopped when the module ends.


@pytest.fixture(scope="module")
def playwright(_pw_api_request_contexts: Any) -> Iterator[Playwright]:
    """Playwright, started for one test module."""
    pw = sync_playwright().start()
    if _pw_api_request_contexts:
        _pw_api_request_contexts.instrument(pw)
    yield pw
    pw.stop()


@pytest.fixture(scope="module")
def browser_type(playwright: Playwright, browser_name: str) -> BrowserType:
    return getattr(playwright, browser_name or "chromium")


@pytest.fixture(scope="module")
def launch_browser(browser_type_launch_args: dict[str, Any], browser_type: BrowserType) -> Callable[..., Browser]:
    return lambda **kwargs: browser_type.launch(**{**browser_type_launch_args, **kwargs})


@pytest.fixture(scope="module")
def browser(launch_browser: Callable[..., Browser]) -> Iterator[Browser]:
    """Chromium, for one test module."""
    browser = launch_browser()
    yield browser
    browser.close()


@pytest.fixture(scope="session")
def browser_context_args(browser_context_args: dict[str, Any]) -> dict[str, Any]:
    """A laptop-sized window."""
    return {**browser_context_args, "viewport": {"width": 1440, "height": 900}}


@pytest.fixture
def people(catalog: dict[str, Any], settings: Any) -> dict[str, User]:
    """alice and bob (reviewers and seniors), admin (reviewer; owns the demo agents), carol (reviewer, not
    senior), mallory (signed in, but no review permission)."""
    from demo.management.commands.seed_demo import REVIEWERS_GROUP, seed_people

    # A deliberately slow password hash is the point in production and pure waiting here.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    seed_people(REVIEWER_PASSWORD, reset_passwords=True)
    carol = User.objects.create_user("carol", password=REVIEWER_PASSWORD)
    carol.groups.add(Group.objects.get(name=REVIEWERS_GROUP))
    User.objects.create_user("mallory", password=REVIEWER_PASSWORD)
    return {user.username: user for user in User.objects.all()}


class Console:
    """A signed-in session of the Django test client that enforces CSRF, sending the token as the forms do."""

    def __init__(self, user: User | None = None) -> None:
        self.client = Client(enforce_csrf_checks=True)
        if user is not None:
            self.client.force_login(user)
            self.client.get("/accounts/login/")  # sets the CSRF cookie, as any page with a form does

    @property
    def token(self) -> str:
        return self.client.cookies["csrftoken"].value

    def get(self, path: str, htmx: bool = False, **kwargs: Any) -> Any:
        headers = {"HX-Request": "true"} if htmx else {}
        return self.client.get(path, headers=headers, **kwargs)

    def post(self, path: str, data: dict[str, Any] | None = None, *, htmx: bool = False, follow: bool = False) -> Any:
        headers = {"HX-Request": "true"} if htmx else {}
        body = {"csrfmiddlewaretoken": self.token, **(data or {})}
        return self.client.post(path, body, headers=headers, follow=follow)

    def approve(self, call: Any, **kwargs: Any) -> Any:
        """Approve the call's current arguments, as its page's Approve button does."""
        call.refresh_from_db()
        seen = {"arguments_hash": call.arguments_hash, "tool_version": call.tool_version}
        return self.post(f"/calls/{call.pk}/approve/", seen, **kwargs)


@pytest.fixture
def console(people: dict[str, User]) -> Callable[[str], Console]:
    """Return console(username) → a CSRF-enforcing session signed in as that person."""
    return lambda username: Console(people[username])


@pytest.fixture
def support(agent_api: Callable[..., AgentApi], people: dict[str, User]) -> AgentApi:
    """The support agent, owned by admin (so alice and bob may decide its calls)."""
    return agent_api("support-agent", {"emitir_estorno": 3, "get_order_status": 0}, owner="admin")


def propose_refund(api: AgentApi, valor: int, key: str, **extra: Any) -> ToolCall:
    """Propose a refund through the agent API; return the stored call."""
    response = api.propose(refund(valor, idempotency_key=key, **extra))
    assert response.status_code in (201, 202), response.content
    return ToolCall.objects.get(pk=response.json()["id"])


def page_text(response: Any) -> str:
    """Return a page as a person reads it (entities decoded)."""
    return unescape(response.content.decode())


LAPTOP = {"width": 1440, "height": 900}


@pytest.fixture
def log_in(browser: Any, live_server: Any, people: dict[str, User]) -> Iterator[Callable[..., Any]]:
    """Return log_in(username, viewport=LAPTOP) → a page of a fresh browser context signed in as that reviewer.

    A viewport narrower than 600 px is a phone: touch on, mobile layout.
    """
    contexts = []

    def open_as(username: str, viewport: dict[str, int] = LAPTOP) -> Any:
        touch = viewport["width"] < 600
        context = browser.new_context(viewport=viewport, base_url=live_server.url, has_touch=touch, is_mobile=touch)
        contexts.append(context)
        page = context.new_page()
        page.goto("/accounts/login/")
        page.get_by_label("Username").fill(username)
        page.get_by_label("Password").fill(REVIEWER_PASSWORD)
        page.get_by_role("button", name="Log in").click()
        page.wait_for_url(f"{live_server.url}/")
        return page

    yield open_as
    for context in contexts:
        context.close()
