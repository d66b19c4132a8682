"""OAuth 2.1 for `/mcp`: the official MCP SDK's OAuth client against Gatehouse, consent given in Chromium.

The SDK discovers the protected-resource and authorization-server metadata, registers
itself (RFC 7591), sends the person's browser to the consent page (driven by Playwright
in its own thread: the SDK's event loop owns the test's), exchanges the code with its
PKCE verifier, then lists and calls tools as the agent the person chose.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import html
import re
import secrets
from collections.abc import Awaitable
from datetime import timedelta
from typing import Any, TypeVar
from urllib.parse import parse_qs, urlencode, urlsplit

import anyio
import httpx
import httpx2
import pytest
from django.contrib.auth.models import User
from django.test import Client as DjangoClient
from django.utils import timezone
from mcp import Client
from mcp.client.auth import OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import AuthorizationCodeResult, OAuthClientInformationFull, OAuthClientMetadata, OAuthToken
from oauth2_provider.models import AccessToken, Application, Grant, RefreshToken
from playwright.sync_api import sync_playwright

from agents.models import Agent
from approvals.decisions import DecisionRefused, check_may_decide
from approvals.models import ToolCall
from audit.models import Event
from notifications import render
from oauth.models import AgentTemplate, ClientAgent
from tests.browser import CHROMIUM, CHROMIUM_ARGS
from tests.conftest import AgentFactory
from tests.mcp_server import LiveAsgi, free_port

pytestmark = [pytest.mark.browser]

T = TypeVar("T")
PASSWORD = "carla's own password"
REFUND = {"pedido_id": "PED-00000001", "valor_centavos": 30000, "motivo": "atraso_entrega"}
META = {"gatehouse/idempotency_key": "oauth-refund-1", "gatehouse/wait_seconds": 0}


def run(coro: Awaitable[T]) -> T:
    return asyncio.run(coro)  # type: ignore[arg-type]


class MemoryStorage:
    """The SDK's token storage, in memory."""

    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.client: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client = client_info


@pytest.fixture
def carla(make_agent: AgentFactory, settings: Any) -> User:
    """carla owns support-agent (refunds up to tier 3, order status) and box-office-agent."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # as `people` does: speed
    user = User.objects.create_user("carla", "carla@example.com", PASSWORD)
    make_agent("support-agent", {"emitir_estorno": 3, "get_order_status": 0}, owner="carla")
    make_agent("box-office-agent", {"search_seats": 0}, owner="carla")
    make_agent("someone-elses-agent", {"search_seats": 0})
    return user


def consent_in_browser(authorization_url: str, callback_prefix: str, agent_name: str, seen: dict[str, str]) -> str:
    """Sign in as carla, read the consent page, choose `agent_name`, allow; return the URL the code came back on."""
    landed: list[str] = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page()
        page.route(f"{callback_prefix}**", lambda route: (landed.append(route.request.url), route.fulfill(body="ok")))
        page.goto(authorization_url)
        page.get_by_label("Username").fill("carla")
        page.get_by_label("Password").fill(PASSWORD)
        page.get_by_role("button", name="Log in").click()
        page.get_by_label(agent_name).check()
        seen["consent"] = page.locator("main").inner_text()
        page.get_by_role("button", name="Allow").click()
        page.wait_for_timeout(100)
        deadline = 100
        while not landed and deadline:
            page.wait_for_timeout(100)
            deadline -= 1
        browser.close()
    assert landed, "the authorization server never redirected back to the client"
    return landed[0]


def sdk_provider(live: LiveAsgi, agent_name: str, seen: dict[str, str]) -> tuple[OAuthClientProvider, MemoryStorage]:
    """Return the SDK's OAuth client for `/mcp`, consenting in the browser as carla for `agent_name`."""
    callback = f"http://127.0.0.1:{free_port()}/callback"
    storage = MemoryStorage()
    returned: dict[str, str] = {}

    async def redirect_handler(url: str) -> None:
        seen["authorization_url"] = url
        returned["url"] = await anyio.to_thread.run_sync(consent_in_browser, url, callback, agent_name, seen)

    async def callback_handler() -> AuthorizationCodeResult:
        query = parse_qs(urlsplit(returned["url"]).query)
        return AuthorizationCodeResult(code=query["code"][0], state=query["state"][0], iss=query["iss"][0])

    metadata = OAuthClientMetadata(
        client_name="Test MCP host",
        redirect_uris=[callback],
        grant_types=["authorization_code", "refresh_token"],
        response_types=["code"],
        token_endpoint_auth_method="none",
        scope="mcp",
    )
    provider = OAuthClientProvider(live.mcp_url, metadata, storage, redirect_handler, callback_handler)
    return provider, storage


def connect_and_call(live: LiveAsgi, agent_name: str = "support-agent") -> dict[str, Any]:
    seen: dict[str, Any] = {}
    provider, storage = sdk_provider(live, agent_name, seen)

    async def scenario() -> None:
        async with (
            httpx2.AsyncClient(auth=provider) as http,
            Client(streamable_http_client(live.mcp_url, http_client=http), mode="auto") as client,
        ):
            seen["tools"] = [tool.name for tool in (await client.list_tools()).tools]
            seen["result"] = await client.call_tool("emitir_estorno", REFUND, meta=META)

    run(scenario())
    seen["storage"] = storage
    return seen


def test_the_sdk_discovers_registers_gets_consent_and_calls_tools_as_the_chosen_agent(
    live_asgi: LiveAsgi, carla: User
) -> None:
    seen = connect_and_call(live_asgi)

    query = parse_qs(urlsplit(seen["authorization_url"]).query)
    assert query["code_challenge_method"] == ["S256"]
    assert query["resource"] == [f"{live_asgi.url}/mcp"]
    assert "support-agent" in seen["consent"] and "emitir_estorno" in seen["consent"]
    assert "someone-elses-agent" not in seen["consent"]
    assert seen["tools"] == ["emitir_estorno", "get_order_status", "get_call_status"]
    result = seen["result"]
    assert result.is_error is False and result.structured_content["status"] == "pending_approval"
    call = ToolCall.objects.get(pk=result.structured_content["id"])
    assert call.agent.name == "support-agent"
    application = Application.objects.get(name="Test MCP host")
    assert application.client_type == Application.CLIENT_PUBLIC
    binding = ClientAgent.objects.get(application=application)
    assert (binding.user, binding.agent.name) == (carla, "support-agent")
    token = AccessToken.objects.get(application=application, scope="mcp")  # not the registration token
    assert token.resource == [f"{live_asgi.url}/mcp"]
    assert token.expires - timezone.now() <= timedelta(minutes=10)
    assert seen["storage"].tokens.refresh_token
    assert Event.objects.filter(action="oauth.consented", agent_name="support-agent").exists()


def test_the_call_shows_the_person_behind_the_agent_who_may_not_approve_it(
    live_asgi: LiveAsgi, carla: User, people: dict[str, User]
) -> None:
    carla.groups.add(*people["alice"].groups.all())  # a reviewer too, in every approver group
    seen = connect_and_call(live_asgi)

    call = ToolCall.objects.get(pk=seen["result"].structured_content["id"])
    proposed = Event.objects.get(action="call.proposed", call_id=call.pk)
    console = DjangoClient()
    console.force_login(people["alice"])
    page = console.get(f"/calls/{call.pk}/").content.decode()
    carla = User.objects.get(pk=carla.pk)  # fresh: permissions are cached per instance

    assert call.on_behalf_of == carla
    assert call.proposer == "support-agent for carla@example.com"
    assert proposed.data["on_behalf_of"] == "carla"
    assert "support-agent for carla@example.com" in page
    assert render.card(call).agent == "support-agent for carla@example.com"
    with pytest.raises(DecisionRefused, match="You own the agent"):
        check_may_decide(call, carla, approving=True)
    # Ownership may move on; the person the call was made for still may not approve it.
    Agent.objects.filter(pk=call.agent_id).update(owner=people["admin"])
    call = ToolCall.objects.get(pk=call.pk)
    with pytest.raises(DecisionRefused, match="on your behalf"):
        check_may_decide(call, carla, approving=True)
    check_may_decide(call, User.objects.get(username="alice"), approving=True)  # anyone else may


def test_static_agent_tokens_keep_working(live_asgi: LiveAsgi, make_agent: AgentFactory) -> None:
    _, token = make_agent("box-office-agent", {"search_seats": 0})

    response = rpc(live_asgi, token)

    assert response.status_code == 200
    assert [tool["name"] for tool in response.json()["result"]["tools"]] == ["search_seats", "get_call_status"]


def test_a_static_token_call_names_no_person(live_asgi: LiveAsgi, make_agent: AgentFactory) -> None:
    _, token = make_agent("support-agent", {"emitir_estorno": 3})
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "emitir_estorno", "arguments": REFUND, "_meta": META},
    }
    headers = {"content-type": "application/json", "accept": "application/json, text/event-stream"}

    httpx.post(live_asgi.mcp_url, json=body, headers={**headers, "authorization": f"Bearer {token}"}, timeout=10)

    call = ToolCall.objects.get()
    assert (call.on_behalf_of, call.proposer) == (None, "support-agent")
    assert "on_behalf_of" not in Event.objects.get(action="call.proposed").data


# ---------------------------------------------------------------- tokens refused at /mcp


def rpc(live: LiveAsgi, token: str | None) -> httpx.Response:
    headers = {"content-type": "application/json", "accept": "application/json, text/event-stream"}
    if token:
        headers["authorization"] = f"Bearer {token}"
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    return httpx.post(live.mcp_url, json=body, headers=headers, timeout=10)


def issue(carla: User, agent_name: str, **fields: Any) -> str:
    """Issue an access token directly (as the token endpoint would) for a client acting as `agent_name`."""
    application = Application.objects.create(
        name="host",
        client_type=Application.CLIENT_PUBLIC,
        authorization_grant_type=Application.GRANT_AUTHORIZATION_CODE,
        redirect_uris="http://127.0.0.1:9/callback",
    )
    ClientAgent.objects.create(application=application, user=carla, agent=Agent.objects.get(name=agent_name))
    raw = secrets.token_urlsafe(30)
    values = {"scope": "mcp", "expires": timezone.now() + timedelta(minutes=5), **fields}
    AccessToken.objects.create(user=carla, application=application, token=raw, **values)
    return raw


def test_a_good_token_is_accepted_and_the_metadata_says_where_to_get_one(live_asgi: LiveAsgi, carla: User) -> None:
    token = issue(carla, "box-office-agent", resource=[f"{live_asgi.url}/mcp"])

    assert rpc(live_asgi, token).status_code == 200
    metadata = httpx.get(f"{live_asgi.url}/.well-known/oauth-protected-resource/mcp").json()
    assert metadata["resource"] == f"{live_asgi.url}/mcp"
    assert metadata["authorization_servers"] == [live_asgi.url]
    server = httpx.get(f"{live_asgi.url}/.well-known/oauth-authorization-server").json()
    assert server["issuer"] == live_asgi.url
    assert server["code_challenge_methods_supported"] == ["S256"]
    assert server["registration_endpoint"] == f"{live_asgi.url}/oauth/register/"
    assert server["grant_types_supported"] == ["authorization_code", "refresh_token"]


@pytest.mark.parametrize(
    ("case", "status", "error"),
    [
        ("none", 401, None),
        ("unknown", 401, "invalid_token"),
        ("expired", 401, "invalid_token"),
        ("revoked", 401, "invalid_token"),
        ("wrong audience", 401, "invalid_token"),
        ("no audience", 401, "invalid_token"),
        ("wrong scope", 403, "insufficient_scope"),
    ],
)
def test_bad_tokens_are_refused_with_a_challenge_naming_the_metadata(
    live_asgi: LiveAsgi, carla: User, case: str, status: int, error: str | None
) -> None:
    mcp = [f"{live_asgi.url}/mcp"]
    token = {
        "none": lambda: None,
        "unknown": lambda: "not-a-token-gatehouse-issued",
        "expired": lambda: issue(carla, "support-agent", resource=mcp, expires=timezone.now() - timedelta(seconds=1)),
        "revoked": lambda: revoked(issue(carla, "support-agent", resource=mcp)),
        "wrong audience": lambda: issue(carla, "support-agent", resource=["https://other.example/mcp"]),
        "no audience": lambda: issue(carla, "support-agent"),
        "wrong scope": lambda: issue(carla, "support-agent", resource=mcp, scope="read"),
    }[case]()

    response = rpc(live_asgi, token)

    assert response.status_code == status
    challenge = response.headers["www-authenticate"]
    assert challenge.startswith("Bearer ")
    assert f'resource_metadata="{live_asgi.url}/.well-known/oauth-protected-resource/mcp"' in challenge
    assert (f'error="{error}"' in challenge) if error else ("error=" not in challenge)
    assert not ToolCall.objects.exists()


def revoked(raw: str) -> str:
    AccessToken.objects.get(token_checksum=hashlib.sha256(raw.encode()).hexdigest()).revoke()
    return raw


# ---------------------------------------------------------------- the authorization endpoint


def pkce() -> tuple[str, str]:
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    return verifier, challenge


def register(live: LiveAsgi, redirect_uri: str, **extra: Any) -> httpx.Response:
    body = {"client_name": "probe", "redirect_uris": [redirect_uri], "token_endpoint_auth_method": "none", **extra}
    return httpx.post(f"{live.url}/oauth/register/", json=body, timeout=10)


def authorize_query(live: LiveAsgi, client_id: str, redirect_uri: str, challenge: str, method: str = "S256") -> str:
    params = {
        "response_type": "code",
        "client_id": client_id,
        "redirect_uri": redirect_uri,
        "state": "s1",
        "scope": "mcp",
        "code_challenge": challenge,
        "code_challenge_method": method,
        "resource": f"{live.url}/mcp",
    }
    return f"{live.url}/oauth/authorize/?{urlencode(params)}"


@pytest.fixture
def signed_in(live_asgi: LiveAsgi, carla: User) -> httpx.Client:
    """An HTTP session signed in as carla at the console (as her browser would be)."""
    session = httpx.Client(base_url=live_asgi.url, timeout=10)
    session.get("/accounts/login/")
    form = {"username": "carla", "password": PASSWORD, "csrfmiddlewaretoken": session.cookies["csrftoken"]}
    assert session.post("/accounts/login/", data=form).status_code == 302
    return session


def consent(session: httpx.Client, url: str, choice: str) -> httpx.Response:
    """GET the consent page, then POST Allow for `choice` (agent:PK, template:PK) with its hidden fields."""
    page = session.get(url)
    assert page.status_code == 200, page.text
    hidden = re.findall(r'<input type="hidden" name="([a-z_]+)" value="([^"]*)"', page.text)
    fields = {name: html.unescape(value) for name, value in hidden}
    fields.update(allow="Authorize", agent=choice)
    return session.post(url, data=fields)


def test_pkce_plain_is_refused(live_asgi: LiveAsgi, signed_in: httpx.Client) -> None:
    redirect_uri = "http://127.0.0.1:9/callback"
    client_id = register(live_asgi, redirect_uri).json()["client_id"]

    plain = signed_in.get(authorize_query(live_asgi, client_id, redirect_uri, "x" * 43, method="plain"))
    missing = signed_in.get(authorize_query(live_asgi, client_id, redirect_uri, "", method=""))

    for response in (plain, missing):
        assert response.status_code == 400
        assert "S256" in response.text
    assert not Grant.objects.exists()


def test_a_code_without_its_verifier_is_refused_and_with_it_gives_a_token(
    live_asgi: LiveAsgi, signed_in: httpx.Client
) -> None:
    redirect_uri = "http://127.0.0.1:9/callback"
    client_id = register(live_asgi, redirect_uri).json()["client_id"]
    verifier, challenge = pkce()
    agent = Agent.objects.get(name="support-agent")

    allowed = consent(signed_in, authorize_query(live_asgi, client_id, redirect_uri, challenge), f"agent:{agent.pk}")
    code = parse_qs(urlsplit(allowed.headers["location"]).query)["code"][0]
    exchange = {"grant_type": "authorization_code", "code": code, "redirect_uri": redirect_uri, "client_id": client_id}
    without = httpx.post(f"{live_asgi.url}/oauth/token/", data=exchange)
    wrong = httpx.post(f"{live_asgi.url}/oauth/token/", data={**exchange, "code_verifier": pkce()[0]})
    right = httpx.post(f"{live_asgi.url}/oauth/token/", data={**exchange, "code_verifier": verifier})

    assert (without.status_code, without.json()["error"]) == (400, "invalid_request")
    assert wrong.status_code == 400
    assert right.status_code == 200, right.text
    assert rpc(live_asgi, right.json()["access_token"]).status_code == 200
    refreshed = httpx.post(
        f"{live_asgi.url}/oauth/token/",
        data={"grant_type": "refresh_token", "refresh_token": right.json()["refresh_token"], "client_id": client_id},
    )
    assert refreshed.status_code == 200, refreshed.text
    assert rpc(live_asgi, refreshed.json()["access_token"]).status_code == 200


def test_a_person_cannot_choose_someone_elses_agent(live_asgi: LiveAsgi, signed_in: httpx.Client) -> None:
    redirect_uri = "http://127.0.0.1:9/callback"
    client_id = register(live_asgi, redirect_uri).json()["client_id"]
    foreign = Agent.objects.get(name="someone-elses-agent")

    response = consent(signed_in, authorize_query(live_asgi, client_id, redirect_uri, pkce()[1]), f"agent:{foreign.pk}")

    assert response.status_code == 200  # the consent page again, with the error
    assert "Select a valid choice" in response.text
    assert not ClientAgent.objects.exists() and not Grant.objects.exists()


def test_a_person_creates_their_agent_from_a_template_on_the_consent_page(
    live_asgi: LiveAsgi, signed_in: httpx.Client, carla: User
) -> None:
    template = AgentTemplate.objects.create(name="helpdesk", grants={"get_order_status": 0, "emitir_estorno": 2})
    redirect_uri = "http://127.0.0.1:9/callback"
    client_id = register(live_asgi, redirect_uri).json()["client_id"]
    url = authorize_query(live_asgi, client_id, redirect_uri, pkce()[1])

    page = signed_in.get(url).text
    allowed = consent(signed_in, url, f"template:{template.pk}")
    again = consent(signed_in, url, f"template:{template.pk}")

    assert "from the template helpdesk" in page and "get_order_status" in page
    assert allowed.status_code == again.status_code == 302
    agent = Agent.objects.get(name="helpdesk-carla")
    assert agent.owner == carla
    assert dict(agent.grants.values_list("tool__name", "max_tier")) == {"get_order_status": 0, "emitir_estorno": 2}
    assert ClientAgent.objects.get().agent == agent
    assert Agent.objects.filter(name__startswith="helpdesk").count() == 1  # the second consent reused it


def test_a_template_never_takes_over_another_owners_agent(
    live_asgi: LiveAsgi, signed_in: httpx.Client, make_agent: AgentFactory
) -> None:
    make_agent("helpdesk-carla", {"search_seats": 0})  # not carla's
    template = AgentTemplate.objects.create(name="helpdesk", grants={"get_order_status": 0})
    redirect_uri = "http://127.0.0.1:9/callback"
    client_id = register(live_asgi, redirect_uri).json()["client_id"]

    response = consent(
        signed_in, authorize_query(live_asgi, client_id, redirect_uri, pkce()[1]), f"template:{template.pk}"
    )

    assert response.status_code == 200 and "not yours to use" in response.text
    assert Agent.objects.get(name="helpdesk-carla").owner is None
    assert not ClientAgent.objects.exists()


def test_an_unregistered_redirect_uri_is_never_redirected_to(live_asgi: LiveAsgi, signed_in: httpx.Client) -> None:
    client_id = register(live_asgi, "http://127.0.0.1:9/callback").json()["client_id"]

    response = signed_in.get(authorize_query(live_asgi, client_id, "https://evil.example/steal", pkce()[1]))

    assert response.status_code == 400
    assert "evil.example" not in response.headers.get("location", "")


@pytest.mark.parametrize(
    ("redirect_uri", "extra"),
    [
        ("https://evil.example/cb#frag", {}),
        ("http://evil.example/cb", {}),
        ("javascript:alert(1)", {}),
        ("https://host.example/cb", {"token_endpoint_auth_method": "client_secret_basic"}),
        ("https://host.example/cb", {"grant_types": ["client_credentials"]}),
    ],
)
def test_registration_refuses_what_gatehouse_does_not_offer(
    live_asgi: LiveAsgi, transactional_db: None, redirect_uri: str, extra: dict[str, Any]
) -> None:
    response = register(live_asgi, redirect_uri, **extra)

    assert (response.status_code, response.json()["error"]) == (400, "invalid_client_metadata")
    assert not Application.objects.exists()


def test_a_person_revokes_a_clients_tokens_in_the_console(live_asgi: LiveAsgi, carla: User) -> None:
    token = issue(carla, "support-agent", resource=[f"{live_asgi.url}/mcp"])
    binding = ClientAgent.objects.get()
    RefreshToken.objects.create(
        user=carla, application=binding.application, token="r" * 40, access_token=AccessToken.objects.get()
    )
    session = httpx.Client(base_url=live_asgi.url, timeout=10)
    session.get("/accounts/login/")
    session.post(
        "/accounts/login/",
        data={"username": "carla", "password": PASSWORD, "csrfmiddlewaretoken": session.cookies["csrftoken"]},
    )

    listing = session.get("/connected-clients/")
    revoked_page = session.post(
        f"/connected-clients/{binding.pk}/revoke/", data={"csrfmiddlewaretoken": session.cookies["csrftoken"]}
    )

    assert "support-agent" in listing.text
    assert revoked_page.status_code == 302
    assert rpc(live_asgi, token).status_code == 401
    assert not ClientAgent.objects.exists()
    assert RefreshToken.objects.get().revoked is not None
    assert Event.objects.filter(action="oauth.revoked", agent_name="support-agent").exists()
